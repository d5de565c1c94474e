"""The compact projection of each synthetic object: only the fields gpu-guard reads.

The realistic cluster is 849 MB of JSON at scale 1.0 (managedFields, 30 images per node, env,
probes, volumes, containerStatuses...). The serve, memory and audit benchmarks want the same
cluster as the ~66 MB ``kind: List`` an operator would hand ``gpu-guard serve --state``. This
keeps every field a projection of the projections of ``policies/cluster/`` (or
``policies.state.cluster``'s pod prefilter) reads, and drops the rest:

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
  domain's gpus and hostDevices are read); conditions kept whole;
* DRA (pods' and VMs' ``resourceClaims``, a pod's ``resourceClaimStatuses``; DeviceClass,
  ResourceSlice, ResourceClaim, ResourceClaimTemplate): their spec and status whole, only the
  bookkeeping goes (policies read nearly all of it: selectors, attributes, allocations).

The result projects to the same ``ClusterState`` (node labels compared on the kept prefixes) and
audits to the same report: ``verify`` checks both at a small scale.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.synthetic.draw import Obj
from bench.synthetic.layout import DEFAULT_SEED

#: Node label prefixes some policy, index or diagnosis reads: GPU Operator/GFD (nvidia.com/),
#: NFD PCI device labels, kubernetes.io/hostname and the node-role labels, NFD's node name.
KEPT_NODE_LABEL_PREFIXES = (
    "nvidia.com/",
    "feature.node.kubernetes.io/pci-",
    "kubernetes.io/",
    "node-role.kubernetes.io/",
    "nfd.node.kubernetes.io/",
)
#: Conditions are projected whole (type, status, reason, message, lastTransitionTime).
CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")
NOT_EXTENDED = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def keep_node_label(key: str) -> bool:
    return key.startswith(KEPT_NODE_LABEL_PREFIXES)


def _pick(source: Obj | None, keys: Iterable[str]) -> Obj:
    """The ``keys`` ``source`` has, in the order given."""
    source = source or {}
    return {k: source[k] for k in keys if k in source}


def _extended(amounts: Obj | None) -> Obj:
    return {
        k: v
        for k, v in (amounts or {}).items()
        if k not in NOT_EXTENDED and not k.startswith("hugepages-")
    }


def _conditions(items: list[Obj] | None) -> list[Obj]:
    return [_pick(c, CONDITION_KEYS) for c in items or []]


def _object(obj: Obj, labels: Callable[[str], bool] | None = None, **parts: Obj | None) -> Obj:
    """apiVersion, kind, the identity (with the labels ``labels`` passes) and ``parts``, those
    that are None left out."""
    meta: Obj = obj.get("metadata") or {}
    out_meta = {"name": meta["name"], **_pick(meta, ("namespace", "deletionTimestamp"))}
    kept = {k: v for k, v in (meta.get("labels") or {}).items() if labels is not None and labels(k)}
    if kept:
        out_meta["labels"] = kept
    head = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": out_meta}
    return head | {k: v for k, v in parts.items() if v is not None}


def compact_node(obj: Obj) -> Obj:
    status = obj.get("status") or {}
    out_status: Obj = {"conditions": _conditions(status.get("conditions"))}
    if allocatable := _extended(status.get("allocatable")):
        out_status["allocatable"] = allocatable
    if info := _pick(status.get("nodeInfo"), ("kubeletVersion", "swap")):
        out_status["nodeInfo"] = info
    spec = _pick(obj.get("spec"), ("unschedulable", "taints")) or None
    return _object(obj, keep_node_label, spec=spec, status=out_status)


def _container(container: Obj) -> Obj:
    out: Obj = {"name": container.get("name", ""), **_pick(container, ("restartPolicy",))}
    resources = container.get("resources") or {}
    kept = {key: _extended(resources.get(key)) for key in ("requests", "limits")}
    if kept := {k: v for k, v in kept.items() if v}:
        out["resources"] = kept
    return out


def _container_status(status: Obj) -> Obj | None:
    state = status.get("state") or {}
    for phase in ("waiting", "terminated"):
        if reason := (state.get(phase) or {}).get("reason"):
            return {"state": {phase: {"reason": reason}}}
    return None


def compact_pod(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    out_spec = _pick(spec, ("nodeName", "nodeSelector", "affinity", "resourceClaims"))
    out_spec["containers"] = [_container(c) for c in spec.get("containers") or []]
    if spec.get("initContainers"):
        out_spec["initContainers"] = [_container(c) for c in spec["initContainers"]]
    status = obj.get("status") or {}
    out_status = _pick(
        status, ("phase", "reason", "resourceClaimStatuses", "extendedResourceClaimStatus")
    )
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
    return _object(obj, lambda key: key == "app", spec=out_spec, status=out_status)


def _vmi_spec(spec: Obj | None) -> Obj:
    devices = ((spec or {}).get("domain") or {}).get("devices") or {}
    kept = {k: devices[k] for k in ("gpus", "hostDevices") if devices.get(k)}
    claims = _pick(spec, ("resourceClaims",))
    return {**_pick(spec, ("evictionStrategy",)), "domain": {"devices": kept}, **claims}


def compact_vm(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    out_spec = _pick(spec, ("runStrategy", "running"))
    out_spec["template"] = {"spec": _vmi_spec((spec.get("template") or {}).get("spec"))}
    status = obj.get("status") or {}
    out_status = {"conditions": _conditions(status.get("conditions"))}
    return _object(obj, spec=out_spec, status=out_status | _pick(status, ("printableStatus",)))


def compact_vmi(obj: Obj) -> Obj:
    out = _object(obj, spec=_vmi_spec(obj.get("spec")))
    owners = [
        {"kind": r["kind"], "name": r["name"]}
        for r in (obj.get("metadata") or {}).get("ownerReferences") or []
        if r.get("kind") == "VirtualMachine"
    ]
    if owners:
        out["metadata"]["ownerReferences"] = owners
    status = obj.get("status") or {}
    out_status = {"conditions": _conditions(status.get("conditions"))}
    return out | {"status": out_status | _pick(status, ("phase", "nodeName"))}


def compact_node_feature(obj: Obj) -> Obj:
    instances = (((obj.get("spec") or {}).get("features") or {}).get("instances")) or {}
    elements = (instances.get("pci.device") or {}).get("elements") or []
    kept = [
        {"attributes": _pick(e["attributes"], ("vendor", "device"))}
        for e in elements
        if isinstance(e, dict) and isinstance(e.get("attributes"), dict)
    ]
    spec = {"features": {"instances": {"pci.device": {"elements": kept}}}}
    return _object(obj, lambda key: key.startswith("nfd.node.kubernetes.io/"), spec=spec)


def compact_configuration(obj: Obj) -> Obj:
    """A singleton configuration CR (KubeVirt, ClusterPolicy): only its bookkeeping goes."""
    return _object(obj, spec=obj.get("spec") or {})


def compact_dra(obj: Obj) -> Obj:
    """A DRA object: spec and status whole (status only where it has one)."""
    return _object(obj, spec=obj.get("spec") or {}, status=obj.get("status"))


#: By the kind's plural, as ``KINDS`` and ``DRA_KINDS`` name them.
COMPACTORS: dict[str, Callable[[Obj], Obj]] = {
    "nodes": compact_node,
    "pods": compact_pod,
    "virtualmachines": compact_vm,
    "virtualmachineinstances": compact_vmi,
    "kubevirts": compact_configuration,
    "clusterpolicies": compact_configuration,
    "nodefeatures": compact_node_feature,
    "deviceclasses": compact_dra,
    "resourceslices": compact_dra,
    "resourceclaims": compact_dra,
    "resourceclaimtemplates": compact_dra,
}


# --- verification ----------------------------------------------------------------------------


def _comparable(state: Any) -> dict[str, Any]:
    """The ClusterState's tables and indexes, node labels cut to the kept prefixes."""
    out = {k: v for k, v in vars(state).items() if k != "_db"}
    out["_nodes"] = {
        name: replace(node, labels={k: v for k, v in node.labels.items() if keep_node_label(k)})
        for name, node in state._nodes.items()
    }
    for key in ("_pods_by_node", "_gpu_pods_by_node"):
        out[key] = {n: dict(p) for n, p in out[key].items()}
    out["_dra"] = vars(state._dra)
    return out


def verify(scale: float = 0.02, seed: int = DEFAULT_SEED, dra: bool = False) -> list[str]:
    """Problems found comparing the compact and the realistic files at ``scale`` ([] if none):
    the same ClusterState and the same audit report (``dra``: of the DRA cluster)."""
    from bench.synthetic.write import write_list
    from webhook.audit.report import run_audit
    from webhook.engine import Engine
    from webhook.state.files import load_state

    with tempfile.TemporaryDirectory(prefix="gpu-guard-compact-") as tmp:
        full, small = Path(tmp) / "full.json", Path(tmp) / "compact.json"
        write_list(full, "json", scale=scale, seed=seed, dra=dra)
        write_list(small, "json", scale=scale, seed=seed, compact=True, dra=dra)
        a, b = load_state([str(full)]), load_state([str(small)])
    ca, cb = _comparable(a), _comparable(b)
    problems = [f"ClusterState.{key} differs" for key in sorted(ca) if ca[key] != cb[key]]
    now = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
    if run_audit(Engine(), a, now).to_json() != run_audit(Engine(), b, now).to_json():
        problems.append("the audit reports differ")
    return problems
