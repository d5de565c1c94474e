"""A compact large state file: bench.synthetic's cluster with only the fields gpu-guard reads.

``bench.synthetic`` writes 849 MB of realistic JSON at scale 1.0 (managedFields, 30 images per
node, env, probes, volumes, containerStatuses...). The serve, memory and audit benchmarks want the
same cluster as the ~66 MB ``kind: List`` an operator would hand ``gpu-guard serve --state``.
This module post-processes each synthetic object, keeping every field a projection of
``policies/objects.py`` (or ``webhook.state.cluster``'s pod prefilter) reads, and dropping the rest:

* every kind: managedFields, annotations, uid, resourceVersion, generation, creationTimestamp,
  finalizers, ownerReferences (except a VMI's VirtualMachine owner);
* Node: status.images, addresses, capacity, daemonEndpoints, runtimeHandlers, most of nodeInfo;
  labels outside the prefixes the policies and the audit read (NFD CPU/kernel/OS flags, cloud
  topology); allocatable without cpu/memory/pods/ephemeral-storage (only extended resources are
  read); conditions kept whole (health, since-when, reasons);
* Pod: labels except ``app``; env, probes, volumes, ports, mounts, tolerations, securityContext;
  container resources other than extended ones; conditions other than ``Initialized`` (kept as
  type and status); containerStatuses reduced to the waiting/terminated reason;
* VirtualMachine / VMI: dataVolumeTemplates, volumes, networks, disks and interfaces (only the
  domain's gpus and hostDevices are read); conditions kept whole.

The result projects to exactly the same ``ClusterState`` (node labels compared on the kept
prefixes) and audits to the same report: ``--verify`` checks both at a small scale.

    python -m bench.compact -o /tmp/gpu-guard-bench/big.json [--scale 1.0] [--seed 7]
    python -m bench.compact --verify [--verify-scale 0.02]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.synthetic import DEFAULT_SEED, KINDS, Layout

Obj = dict[str, Any]

#: Node label prefixes some policy, index or diagnosis reads: GPU Operator/GFD (nvidia.com/),
#: NFD PCI device labels, kubernetes.io/hostname and the node-role labels, NFD's node name.
KEPT_NODE_LABEL_PREFIXES = (
    "nvidia.com/",
    "feature.node.kubernetes.io/pci-",
    "kubernetes.io/",
    "node-role.kubernetes.io/",
    "nfd.node.kubernetes.io/",
)
#: Node conditions are projected whole (type, status, reason, message, lastTransitionTime).
CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")
NOT_EXTENDED = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def keep_node_label(key: str) -> bool:
    return key.startswith(KEPT_NODE_LABEL_PREFIXES)


def _is_extended(name: str) -> bool:
    return name not in NOT_EXTENDED and not name.startswith("hugepages-")


def _meta(obj: Obj, labels: Callable[[str], bool] | None) -> Obj:
    meta: Obj = obj.get("metadata") or {}
    out: Obj = {"name": meta["name"]}
    if "namespace" in meta:
        out["namespace"] = meta["namespace"]
    if "deletionTimestamp" in meta:
        out["deletionTimestamp"] = meta["deletionTimestamp"]
    source = meta.get("labels") or {}
    kept = {k: v for k, v in source.items() if labels is not None and labels(k)}
    if kept:
        out["labels"] = kept
    return out


def _conditions(items: list[Obj] | None) -> list[Obj]:
    return [{k: c[k] for k in CONDITION_KEYS if k in c} for c in items or []]


def _head(obj: Obj) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"]}


def compact_node(obj: Obj) -> Obj:
    out = _head(obj)
    out["metadata"] = _meta(obj, keep_node_label)
    spec = obj.get("spec") or {}
    out_spec = {k: spec[k] for k in ("unschedulable", "taints") if k in spec}
    if out_spec:
        out["spec"] = out_spec
    status = obj.get("status") or {}
    node_info = status.get("nodeInfo") or {}
    info = {k: node_info[k] for k in ("kubeletVersion", "swap") if k in node_info}
    allocatable = {k: v for k, v in (status.get("allocatable") or {}).items() if _is_extended(k)}
    out_status: Obj = {"conditions": _conditions(status.get("conditions"))}
    if allocatable:
        out_status["allocatable"] = allocatable
    if info:
        out_status["nodeInfo"] = info
    out["status"] = out_status
    return out


def _container(container: Obj) -> Obj:
    out: Obj = {"name": container.get("name", "")}
    if "restartPolicy" in container:
        out["restartPolicy"] = container["restartPolicy"]
    resources = container.get("resources") or {}
    kept: Obj = {}
    for key in ("requests", "limits"):
        amounts = {k: v for k, v in (resources.get(key) or {}).items() if _is_extended(k)}
        if amounts:
            kept[key] = amounts
    if kept:
        out["resources"] = kept
    return out


def _container_status(cs: Obj) -> Obj | None:
    state = cs.get("state") or {}
    for phase in ("waiting", "terminated"):
        reason = (state.get(phase) or {}).get("reason")
        if reason:
            return {"state": {phase: {"reason": reason}}}
    return None


def compact_pod(obj: Obj) -> Obj:
    out = _head(obj)
    out["metadata"] = _meta(obj, lambda key: key == "app")
    spec = obj.get("spec") or {}
    out_spec: Obj = {}
    for key in ("nodeName", "nodeSelector", "affinity"):
        if key in spec:
            out_spec[key] = spec[key]
    out_spec["containers"] = [_container(c) for c in spec.get("containers") or []]
    if spec.get("initContainers"):
        out_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    out["spec"] = out_spec
    status = obj.get("status") or {}
    out_status: Obj = {}
    for key in ("phase", "reason"):
        if key in status:
            out_status[key] = status[key]
    initialized = [
        {"type": c["type"], "status": c.get("status", "")}
        for c in status.get("conditions") or []
        if c.get("type") == "Initialized"
    ]
    if initialized:
        out_status["conditions"] = initialized
    statuses = [s for s in map(_container_status, status.get("containerStatuses") or []) if s]
    if statuses:
        out_status["containerStatuses"] = statuses
    out["status"] = out_status
    return out


def _vmi_spec(spec: Obj) -> Obj:
    out: Obj = {}
    if "evictionStrategy" in spec:
        out["evictionStrategy"] = spec["evictionStrategy"]
    devices = ((spec.get("domain") or {}).get("devices")) or {}
    kept = {k: devices[k] for k in ("gpus", "hostDevices") if devices.get(k)}
    out["domain"] = {"devices": kept}
    return out


def compact_vm(obj: Obj) -> Obj:
    out = _head(obj)
    out["metadata"] = _meta(obj, None)
    spec = obj.get("spec") or {}
    out_spec: Obj = {k: spec[k] for k in ("runStrategy", "running") if k in spec}
    template = spec.get("template") or {}
    out_spec["template"] = {"spec": _vmi_spec(template.get("spec") or {})}
    out["spec"] = out_spec
    status = obj.get("status") or {}
    out_status: Obj = {"conditions": _conditions(status.get("conditions"))}
    if "printableStatus" in status:
        out_status["printableStatus"] = status["printableStatus"]
    out["status"] = out_status
    return out


def compact_vmi(obj: Obj) -> Obj:
    out = _head(obj)
    meta = _meta(obj, None)
    owners = [
        {"kind": r["kind"], "name": r["name"]}
        for r in (obj.get("metadata") or {}).get("ownerReferences") or []
        if r.get("kind") == "VirtualMachine"
    ]
    if owners:
        meta["ownerReferences"] = owners
    out["metadata"] = meta
    out["spec"] = _vmi_spec(obj.get("spec") or {})
    status = obj.get("status") or {}
    out_status: Obj = {"conditions": _conditions(status.get("conditions"))}
    for key in ("phase", "nodeName"):
        if key in status:
            out_status[key] = status[key]
    out["status"] = out_status
    return out


def compact_node_feature(obj: Obj) -> Obj:
    out = _head(obj)
    out["metadata"] = _meta(obj, lambda key: key.startswith("nfd.node.kubernetes.io/"))
    instances = (((obj.get("spec") or {}).get("features") or {}).get("instances")) or {}
    elements = (instances.get("pci.device") or {}).get("elements") or []
    kept = [
        {"attributes": {k: v for k, v in e["attributes"].items() if k in ("vendor", "device")}}
        for e in elements
        if isinstance(e, dict) and isinstance(e.get("attributes"), dict)
    ]
    out["spec"] = {"features": {"instances": {"pci.device": {"elements": kept}}}}
    return out


def compact_kubevirt(obj: Obj) -> Obj:
    """The KubeVirt CR is one object: only its bookkeeping goes."""
    out = _head(obj)
    out["metadata"] = _meta(obj, None)
    out["spec"] = obj.get("spec") or {}
    return out


def compact_cluster_policy(obj: Obj) -> Obj:
    out = _head(obj)
    out["metadata"] = _meta(obj, None)
    out["spec"] = obj.get("spec") or {}
    return out


COMPACTORS: dict[str, Callable[[Obj], Obj]] = {
    "nodes": compact_node,
    "pods": compact_pod,
    "virtualmachines": compact_vm,
    "virtualmachineinstances": compact_vmi,
    "kubevirts": compact_kubevirt,
    "clusterpolicies": compact_cluster_policy,
    "nodefeatures": compact_node_feature,
}


def compact_cluster(layout: Layout) -> Iterator[tuple[str, Obj]]:
    """(kind label, compact object) for every object of the synthetic cluster."""
    for label, plural, generate in KINDS:
        compact = COMPACTORS[plural]
        for obj in generate(layout):
            yield label, compact(obj)


def write_compact(path: str | Path, *, scale: float = 1.0, seed: int = DEFAULT_SEED) -> Obj:
    """Writes the compact cluster as one JSON ``kind: List``, streaming one object at a time.
    Returns objects per kind and "bytes"."""
    layout = Layout.at(scale, seed)
    counts: Obj = {}
    with open(path, "wb") as out:
        written = out.write(b'{"apiVersion":"v1","kind":"List","metadata":{},"items":[\n')
        first = True
        for label, obj in compact_cluster(layout):
            counts[label] = counts.get(label, 0) + 1
            written += out.write((b"" if first else b",\n") + orjson.dumps(obj))
            first = False
        written += out.write(b"\n]}\n")
    counts["bytes"] = written
    return counts


# --- verification ----------------------------------------------------------------------------


def _comparable(state: Any) -> dict[str, Any]:
    """The ClusterState's tables and indexes, node labels cut to the kept prefixes."""
    from dataclasses import replace

    out = {k: v for k, v in vars(state).items() if k != "_db"}
    out["_nodes"] = {
        name: replace(node, labels={k: v for k, v in node.labels.items() if keep_node_label(k)})
        for name, node in state._nodes.items()
    }
    for key in ("_pods_by_node", "_gpu_pods_by_node"):
        out[key] = {n: dict(p) for n, p in out[key].items()}
    return out


def verify(scale: float = 0.02, seed: int = DEFAULT_SEED) -> list[str]:
    """Problems found comparing the compact and the realistic files at ``scale`` ([] if none):
    the same ClusterState and the same audit report."""
    from bench.synthetic import write_list
    from webhook.audit.report import run_audit
    from webhook.engine import Engine
    from webhook.state.files import load_state

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpu-guard-compact-") as tmp:
        full, small = Path(tmp) / "full.json", Path(tmp) / "compact.json"
        write_list(full, "json", scale=scale, seed=seed)
        write_compact(small, scale=scale, seed=seed)
        a, b = load_state([str(full)]), load_state([str(small)])
    ca, cb = _comparable(a), _comparable(b)
    for key in sorted(ca):
        if ca[key] != cb[key]:
            problems.append(f"ClusterState.{key} differs")
    now = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
    ra = run_audit(Engine(), a, now).to_json()
    rb = run_audit(Engine(), b, now).to_json()
    if ra != rb:
        problems.append("the audit reports differ")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compact", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-o", "--output", help="file to write (a JSON kind: List)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--verify", action="store_true", help="check the compact file loads to the same state"
    )
    parser.add_argument("--verify-scale", type=float, default=0.02)
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing when --output already exists"
    )
    args = parser.parse_args(argv)
    if args.verify:
        started = time.perf_counter()
        problems = verify(args.verify_scale, args.seed)
        took = time.perf_counter() - started
        for problem in problems:
            print(f"compact: {problem}", file=sys.stderr)
        verdict = "FAILED" if problems else "same ClusterState and audit report"
        print(f"compact --verify at scale {args.verify_scale}: {verdict} ({took:.1f} s)")
        if problems:
            return 1
    if args.output is None:
        return 0 if args.verify else parser.error("-o/--output or --verify is required")
    if args.if_missing and Path(args.output).exists():
        print(f"{args.output}: exists, kept", file=sys.stderr)
        return 0
    started = time.perf_counter()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    counts = write_compact(args.output, scale=args.scale, seed=args.seed)
    size = counts.pop("bytes")
    print(
        f"{args.output}: {sum(counts.values()):,} objects, {size / 1e6:,.1f} MB in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    for label, n in counts.items():
        print(f"  {label:<36} {n:>8,}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
