"""The whole cluster, kind by kind, and the one ``kind: List`` file it is written as (realistic or
compact, JSON or YAML; the device-plugin cluster or, with ``dra``, the DRA one), streamed: memory
stays at one object (and the DRA cluster's plan)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import orjson
import yaml

from bench.synthetic.compact import COMPACTORS
from bench.synthetic.dra_claims import resource_claim_templates, resource_claims
from bench.synthetic.dra_layout import DraLayout
from bench.synthetic.dra_nodes import device_classes, dra_nodes, resource_slices
from bench.synthetic.dra_workloads import (
    dra_kubevirts,
    dra_pods,
    dra_virtual_machine_instances,
    dra_virtual_machines,
)
from bench.synthetic.draw import Obj
from bench.synthetic.layout import DEFAULT_SEED, Layout
from bench.synthetic.nodes import node_features, nodes
from bench.synthetic.operators import cluster_policies, kubevirts
from bench.synthetic.pods import pods
from bench.synthetic.vms import virtual_machine_instances, virtual_machines

L = TypeVar("L", Layout, DraLayout)
Generator = Callable[[Layout], Iterator[Obj]]
DraGenerator = Callable[[DraLayout], Iterator[Obj]]

#: (kind as the state counts it, plural, generator): the order a state file lists them in.
KINDS: tuple[tuple[str, str, Generator], ...] = (
    ("Node", "nodes", nodes),
    ("Pod", "pods", pods),
    ("VirtualMachine.kubevirt.io", "virtualmachines", virtual_machines),
    ("VirtualMachineInstance.kubevirt.io", "virtualmachineinstances", virtual_machine_instances),
    ("KubeVirt.kubevirt.io", "kubevirts", kubevirts),
    ("ClusterPolicy.nvidia.com", "clusterpolicies", cluster_policies),
    ("NodeFeature.nfd.k8s-sigs.io", "nodefeatures", node_features),
)
GENERATORS: dict[str, Generator] = {plural: generate for _, plural, generate in KINDS}
#: The DRA cluster (``DraLayout``), in the same order, its DRA kinds last.
DRA_KINDS: tuple[tuple[str, str, DraGenerator], ...] = (
    ("Node", "nodes", dra_nodes),
    ("Pod", "pods", dra_pods),
    ("VirtualMachine.kubevirt.io", "virtualmachines", dra_virtual_machines),
    (
        "VirtualMachineInstance.kubevirt.io",
        "virtualmachineinstances",
        dra_virtual_machine_instances,
    ),
    ("KubeVirt.kubevirt.io", "kubevirts", dra_kubevirts),
    ("DeviceClass.resource.k8s.io", "deviceclasses", device_classes),
    ("ResourceSlice.resource.k8s.io", "resourceslices", resource_slices),
    ("ResourceClaim.resource.k8s.io", "resourceclaims", resource_claims),
    ("ResourceClaimTemplate.resource.k8s.io", "resourceclaimtemplates", resource_claim_templates),
)


def cluster(layout: Layout) -> Iterator[Obj]:
    """Every object of the synthetic cluster, kind by kind."""
    for _, _, generate in KINDS:
        yield from generate(layout)


def dra_cluster(layout: DraLayout) -> Iterator[Obj]:
    """Every object of the synthetic DRA cluster, kind by kind."""
    for _, _, generate in DRA_KINDS:
        yield from generate(layout)


def labelled(
    layout: L,
    kinds: tuple[tuple[str, str, Callable[[L], Iterator[Obj]]], ...],
    compact: bool = False,
) -> Iterator[tuple[str, Obj]]:
    """(kind label, object) for every object; ``compact``: only the fields gpu-guard reads."""
    for label, plural, generate in kinds:
        shrink = COMPACTORS[plural] if compact else None
        for obj in generate(layout):
            yield label, obj if shrink is None else shrink(obj)


def write_list(
    path: str | Path,
    fmt: str = "json",
    *,
    scale: float = 1.0,
    seed: int = DEFAULT_SEED,
    compact: bool = False,
    dra: bool = False,
    dynamic_mig: bool = False,
) -> dict[str, int]:
    """Writes the whole cluster as one ``kind: List`` (``fmt`` "json" or "yaml"; ``compact``: only
    the fields gpu-guard reads; ``dra``: the DRA cluster), streaming. Returns objects per kind,
    plus "bytes" written."""
    if fmt not in ("json", "yaml"):
        raise ValueError(f"fmt must be json or yaml, not {fmt!r}")
    counts: dict[str, int] = {}

    def counted() -> Iterator[Obj]:
        objects = (
            labelled(
                replace(DraLayout.at(scale, seed), dynamic_mig=dynamic_mig), DRA_KINDS, compact
            )
            if dra
            else labelled(Layout.at(scale, seed), KINDS, compact)
        )
        for label, obj in objects:
            counts[label] = counts.get(label, 0) + 1
            yield obj

    with open(path, "wb") as out:
        written = (_write_json if fmt == "json" else _write_yaml)(out, counted())
    counts["bytes"] = written
    return counts


def _write_json(out: BinaryIO, objects: Iterator[Obj]) -> int:
    written = out.write(b'{"apiVersion":"v1","kind":"List","metadata":{},"items":[\n')
    for i, obj in enumerate(objects):
        written += out.write((b",\n" if i else b"") + orjson.dumps(obj))
    return written + out.write(b"\n]}\n")


def _write_yaml(out: BinaryIO, objects: Iterator[Obj]) -> int:
    written = out.write(b"apiVersion: v1\nkind: List\nmetadata: {}\nitems:\n")
    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for obj in objects:
        written += out.write(yaml.dump([obj], Dumper=dumper, sort_keys=False, width=120).encode())
    return written
