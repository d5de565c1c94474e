"""Small builders for the Kubernetes objects tests need, shaped like what the API server sends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from policies.cluster.kinds import group_kind_of
from policies.cluster.pciids import PciDatabase
from policies.cluster.view import ClusterView
from policies.state.cluster import ClusterState
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import UPDATE, AdmissionRequest, GroupKind, UserInfo
from policies.vocabulary.verdicts import Action, Finding, Policy
from webhook.engine import Engine
from webhook.state.feeding import new_state

Obj = dict[str, Any]
LONG_AGO = "2026-07-10T03:12:41Z"


def node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    ready: str = "True",
    reason: str = "KubeletReady",
    message: str = "kubelet is posting ready status",
    since: str = "2026-01-01T00:00:00Z",
    allocatable: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> Obj:
    spec: Obj = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": "32", "memory": "126Gi", "pods": "110", **(allocatable or {})},
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": since,
                    "lastHeartbeatTime": since,
                },
            ],
            "nodeInfo": {"kubeletVersion": "v1.33.4"},
        },
    }


def dead_node(name: str, **kwargs: Any) -> Obj:
    """A node whose kubelet stopped posting status, as the node-lifecycle controller leaves it."""
    return node(
        name,
        ready="Unknown",
        reason="NodeStatusUnknown",
        message="Kubelet stopped posting node status.",
        since=LONG_AGO,
        taints=[
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        ],
        **kwargs,
    )


def relabel(obj: Obj, **changes: str | None) -> Obj:
    """A copy of a node with labels set (value) or removed (None); keys use '__' for '/'."""
    labels = dict(obj["metadata"].get("labels", {}))
    for key, value in changes.items():
        label = key.replace("__", "/").replace("_", ".")
        if value is None:
            labels.pop(label, None)
        else:
            labels[label] = value
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}


def with_labels(obj: Obj, labels: Mapping[str, str | None]) -> Obj:
    """A copy of ``obj`` with labels set, or removed where the value is None."""
    current = dict(obj["metadata"].get("labels", {}))
    for key, value in labels.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return {**obj, "metadata": {**obj["metadata"], "labels": current}}


def pod(
    name: str,
    node_name: str = "",
    *,
    namespace: str = "ml",
    limits: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    init_limits: Mapping[str, str] | None = None,
    phase: str = "Running",
    initialized: bool = True,
    terminating: bool = False,
    app: str = "",
) -> Obj:
    container: Obj = {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": {}}
    if limits:
        container["resources"]["limits"] = dict(limits)
    if requests:
        container["resources"]["requests"] = dict(requests)
    spec: Obj = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if init_limits:
        spec["initContainers"] = [
            {"name": "warmup", "image": "busybox", "resources": {"limits": dict(init_limits)}}
        ]
    meta: Obj = {"name": name, "namespace": namespace}
    if app:
        meta["labels"] = {"app": app}
    if terminating:
        meta["deletionTimestamp"] = "2026-07-10T04:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Initialized", "status": "True" if initialized else "False"}],
        },
    }


def gpu_pod(name: str, node_name: str, resource: str = "nvidia.com/gpu", **kwargs: Any) -> Obj:
    return pod(name, node_name, limits={resource: "1"}, **kwargs)


def _devices(gpus: Sequence[str], host_devices: Sequence[str]) -> Obj:
    return {
        "gpus": [{"name": f"gpu{i}", "deviceName": d} for i, d in enumerate(gpus, 1)],
        "hostDevices": [{"name": f"hd{i}", "deviceName": d} for i, d in enumerate(host_devices, 1)],
    }


def vm(
    name: str,
    *,
    gpus: Sequence[str] = (),
    host_devices: Sequence[str] = (),
    run_strategy: str | None = "Always",
    running: bool | None = None,
    namespace: str = "vms",
    unschedulable_since: str | None = None,
    eviction_strategy: str | None = None,
    instancetype: Obj | None = None,
) -> Obj:
    """A VirtualMachine; ``instancetype`` is its spec.instancetype ({kind, name, ...})."""
    spec: Obj = {
        "template": {"spec": {"domain": {"devices": _devices(gpus, host_devices)}}},
    }
    if instancetype is not None:
        spec["instancetype"] = instancetype
    if eviction_strategy:
        spec["template"]["spec"]["evictionStrategy"] = eviction_strategy
    if run_strategy is not None:
        spec["runStrategy"] = run_strategy
    if running is not None:
        spec["running"] = running
    status: Obj = {}
    if unschedulable_since:
        status = {
            "printableStatus": "ErrorUnschedulable",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": unschedulable_since,
                },
            ],
        }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": status,
    }


def vmi(
    name: str,
    *,
    node_name: str = "",
    gpus: Sequence[str] = (),
    host_devices: Sequence[str] = (),
    phase: str = "Running",
    namespace: str = "vms",
    owner: str = "",
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [
            {"kind": "VirtualMachine", "name": owner, "apiVersion": "kubevirt.io/v1"}
        ]
    status: Obj = {"phase": phase}
    if node_name:
        status["nodeName"] = node_name
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": {"domain": {"devices": _devices(gpus, host_devices)}},
        "status": status,
    }


def kubevirt(
    pci: Sequence[tuple[str, str]] = (),
    *,
    mdevs: Sequence[tuple[str, str]] = (),
    usb: Sequence[tuple[str, str]] = (),
    external: bool = True,
    feature_gates: Sequence[str] = ("HostDevices",),
    disabled_gates: Sequence[str] = (),
    version: str = "",
    eviction_strategy: str | None = None,
) -> Obj:
    """``pci`` (selector, resourceName), ``mdevs`` (mdevNameSelector, resourceName) and ``usb``
    ("vendor:product", resourceName) entries of permittedHostDevices; ``version`` the
    status.observedKubeVirtVersion (none: the CR reports no version)."""
    developer: Obj = {"featureGates": list(feature_gates)}
    if disabled_gates:
        developer["disabledFeatureGates"] = list(disabled_gates)
    configuration: Obj = {
        "developerConfiguration": developer,
        "permittedHostDevices": {
            "pciHostDevices": [
                {
                    "pciVendorSelector": sel,
                    "resourceName": res,
                    "externalResourceProvider": external,
                }
                for sel, res in pci
            ],
            "mediatedDevices": [
                {"mdevNameSelector": sel, "resourceName": res} for sel, res in mdevs
            ],
        },
    }
    if usb:
        configuration["permittedHostDevices"]["usb"] = [
            {
                "resourceName": res,
                "selectors": [dict(zip(("vendor", "product"), sel.split(":"), strict=True))],
            }
            for sel, res in usb
        ]
    if eviction_strategy:
        configuration["evictionStrategy"] = eviction_strategy
    cr: Obj = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": configuration},
    }
    if version:
        cr["status"] = {"observedKubeVirtVersion": version, "operatorVersion": version}
    return cr


def cluster_policy(sandbox: bool = True, default_workload: str = "container") -> Obj:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"sandboxWorkloads": {"enabled": sandbox, "defaultWorkload": default_workload}},
    }


def nvidia_driver(
    name: str,
    version: str = "570.172.08",
    *,
    default: bool = False,
    node_selector: Mapping[str, str] | None = None,
    **upgrade: Any,
) -> Obj:
    """A GPU Operator NVIDIADriver; ``upgrade`` is its spec.upgradePolicy, when given."""
    spec: Obj = {
        "driverType": "gpu",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": version,
    }
    if default:
        spec["default"] = True
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if upgrade:
        spec["upgradePolicy"] = upgrade
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": spec,
    }


def node_feature(node_name: str, devices: Sequence[tuple[str, str, str]]) -> Obj:
    """An NFD NodeFeature listing PCI devices as (class, vendor, device)."""
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": node_name,
            "namespace": "node-feature-discovery",
            "labels": {"nfd.node.kubernetes.io/node-name": node_name},
        },
        "spec": {
            "features": {
                "instances": {
                    "pci.device": {
                        "elements": [
                            {"attributes": {"class": c, "vendor": v, "device": d}}
                            for c, v, d in devices
                        ]
                    }
                }
            }
        },
    }


def state_of(*objects: Obj, pci_database: PciDatabase | None = None) -> ClusterState:
    """A state holding ``objects``, built as the guard builds one: its pci.ids is the machine's
    (the seam's) unless given."""
    state = new_state(pci_database)
    for obj in objects:
        state.upsert(obj)
    return state


def request(
    operation: str,
    obj: Obj | None,
    old: Obj | None = None,
    *,
    user: str = "kubernetes-admin",
    dry_run: bool = False,
    sub_resource: str = "",
    groups: Sequence[str] | None = None,
) -> AdmissionRequest:
    """The AdmissionRequest the API server would send for this change. ``groups`` default to
    what the authenticator gives ``user``: a kubelet's certificate system:nodes, a ServiceAccount
    token its namespace's group."""
    current = obj if obj is not None else old
    assert current is not None
    kind = group_kind_of(current)
    meta = current["metadata"]
    return AdmissionRequest(
        uid="00000000-0000-0000-0000-000000000001",
        group=kind.group,
        version="v1",
        kind=kind.kind,
        operation=operation,
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        obj=obj,
        old=old,
        sub_resource=sub_resource,
        user=UserInfo(user, (*(authenticated_groups(user) if groups is None else groups),)),
        dry_run=dry_run,
    )


def authenticated_groups(user: str) -> tuple[str, ...]:
    """The groups the API server's authenticators give ``user`` (besides none it was given)."""
    if user.startswith("system:node:"):
        return ("system:nodes", "system:authenticated")
    if user.startswith("system:serviceaccount:"):
        namespace = user.split(":")[2]
        accounts = "system:serviceaccounts"
        return (accounts, f"{accounts}:{namespace}", "system:authenticated")
    return ("system:authenticated",)


def always_deny(
    kind: GroupKind, *owners: Owner[ClusterView], operation: str = UPDATE
) -> Policy[ClusterView]:
    """A policy denying every ``operation`` of ``kind`` ("[always] no"): what the engine does
    around a policy, apart from what any real one judges."""
    return Policy(
        "always",
        "",
        {kind: frozenset({operation})},
        Action.DENY,
        "",
        Action.WARN,
        lambda r, v: [Finding("no")],
        owners=owners,
    )


def judged_by(policy: Policy[ClusterView], review: AdmissionRequest) -> bool:
    """Whether the engine runs ``policy`` on ``review``: its scope, as the engine indexes it."""
    return policy in Engine(policies=(policy,)).policies_for(review)


# --- appended for the policy catalogue ------------------------------------------------------------


def with_spec(obj: Obj, changes: Mapping[str, Any | None]) -> Obj:
    """A copy of ``obj`` with spec fields set, or removed where the value is None."""
    spec = dict(obj.get("spec", {}))
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return {**obj, "spec": spec}


def cordoned(obj: Obj) -> Obj:
    """A copy of a node with spec.unschedulable: true, as kubectl cordon leaves it."""
    return with_spec(obj, {"unschedulable": True})


def tainted(obj: Obj, key: str, effect: str = "NoSchedule", value: str = "") -> Obj:
    """A copy of a node with one more taint, as kubectl taint leaves it."""
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return with_spec(obj, {"taints": [*obj.get("spec", {}).get("taints", []), taint]})


def affinity_term(
    expressions: Sequence[tuple[str, str, Sequence[str]]] = (),
    fields: Sequence[tuple[str, str, Sequence[str]]] = (),
) -> Obj:
    """One nodeSelectorTerm: matchExpressions and matchFields as (key, operator, values)."""
    term: Obj = {}
    if expressions:
        term["matchExpressions"] = [
            {"key": k, "operator": op, "values": list(values)} for k, op, values in expressions
        ]
    if fields:
        term["matchFields"] = [
            {"key": k, "operator": op, "values": list(values)} for k, op, values in fields
        ]
    return term


def node_affinity(*terms: Obj) -> Obj:
    """spec.affinity requiring one of ``terms`` (requiredDuringSchedulingIgnoredDuringExecution)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def new_pod(
    name: str,
    *,
    limits: Mapping[str, str] | None = None,
    node_name: str = "",
    node_selector: Mapping[str, str] | None = None,
    affinity: Obj | None = None,
    namespace: str = "ml",
) -> Obj:
    """A Pod as a CREATE carries it: no status yet, placement constraints in its spec."""
    obj = pod(name, node_name, namespace=namespace, limits=limits)
    obj.pop("status")
    spec: dict[str, Any] = {}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    return with_spec(obj, spec)


def owned_vmi(name: str, node_name: str, **kwargs: Any) -> Obj:
    """The running VMI of VM ``name`` (same name, owned by it) on ``node_name``."""
    return vmi(name, node_name=node_name, owner=name, **kwargs)


#: A field value meaning "remove this field" for ``edited``.
DROP = object()


def edited(review: Mapping[str, Any], request_fields: bool, **fields: Any) -> bytes:
    """A copy of an AdmissionReview with fields replaced, or removed where the value is DROP:
    in ``request`` when ``request_fields``, else at the top level. The body, serialised."""
    copy_ = orjson.loads(orjson.dumps(review))
    target = copy_["request"] if request_fields else copy_
    for key, value in fields.items():
        if value is DROP:
            del target[key]
        else:
            target[key] = value
    return orjson.dumps(copy_)


#: The workload controllers and their apiVersions, as kubectl writes them.
CONTROLLER_API_VERSIONS = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
}


def controller(kind: str, pod_obj: Obj, name: str = "trainer", **spec: Any) -> Obj:
    """A workload controller of ``kind`` in the pod's namespace whose pods are ``pod_obj`` (its
    metadata.labels and spec): a CronJob's under spec.jobTemplate.spec.template."""
    template: Obj = {
        "metadata": {"labels": dict(pod_obj["metadata"].get("labels", {"app": name}))},
        "spec": pod_obj["spec"],
    }
    body: Obj = {**spec, "template": template}
    if kind == "CronJob":
        body = {"schedule": "@daily", **spec, "jobTemplate": {"spec": {"template": template}}}
    made: Obj = orjson.loads(
        orjson.dumps(
            {
                "apiVersion": CONTROLLER_API_VERSIONS[kind],
                "kind": kind,
                "metadata": {"name": name, "namespace": pod_obj["metadata"]["namespace"]},
                "spec": body,
            }
        )
    )
    return made


def env_pod(
    name: str, node_name: str, value: str = "all", runtime_class: str = "nvidia", **kwargs: Any
) -> Obj:
    """A pod run the "legacy" way: no GPU request, ``NVIDIA_VISIBLE_DEVICES`` and a runtime
    class ('' for none) hand it the node's GPUs."""
    obj = pod(name, node_name, **kwargs)
    obj["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]
    if runtime_class:
        obj["spec"]["runtimeClassName"] = runtime_class
    return obj


def dev_mount_pod(
    name: str, node_name: str, path: str = "/dev/nvidia0", privileged: bool = True, **kwargs: Any
) -> Obj:
    """A pod whose container mounts ``path`` from the host, privileged or not."""
    obj = pod(name, node_name, **kwargs)
    obj["spec"]["volumes"] = [{"name": "gpu", "hostPath": {"path": path}}]
    container = obj["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "gpu", "mountPath": path}]
    container["securityContext"] = {"privileged": privileged}
    return obj


def kata_pod(
    name: str,
    node_name: str,
    limits: Mapping[str, str] | None = None,
    runtime_class: str = "kata-qemu-nvidia-gpu-snp",
    **kwargs: Any,
) -> Obj:
    """A confidential container: a Kata VM with a passthrough GPU (``nvidia.com/pgpu``)."""
    obj = pod(name, node_name, limits=limits or {"nvidia.com/pgpu": "1"}, **kwargs)
    if runtime_class:
        obj["spec"]["runtimeClassName"] = runtime_class
    return obj


def owned_by_daemonset(obj: Obj, name: str = "gpu-agent") -> Obj:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "controller": True}
    ]
    return obj


def instancetype(
    name: str,
    *,
    gpus: Sequence[str] = (),
    host_devices: Sequence[str] = (),
    namespace: str | None = None,
) -> Obj:
    """A VirtualMachineClusterInstancetype, or with ``namespace`` a VirtualMachineInstancetype."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    kind = (
        "VirtualMachineInstancetype"
        if namespace is not None
        else "VirtualMachineClusterInstancetype"
    )
    return {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": kind,
        "metadata": meta,
        "spec": {"cpu": {"guest": 4}, "memory": {"guest": "16Gi"}, **_devices(gpus, host_devices)},
    }


def vm_replica_set(
    name: str, *, gpus: Sequence[str] = (), replicas: int | None = 1, namespace: str = "vms"
) -> Obj:
    """A VirtualMachineInstanceReplicaSet (``replicas`` None: unset, which KubeVirt reads as 1)."""
    spec: Obj = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"spec": {"domain": {"devices": _devices(gpus, ())}}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def vm_pool(
    name: str,
    *,
    gpus: Sequence[str] = (),
    replicas: int | None = 1,
    run_strategy: str = "Always",
    instancetype: Obj | None = None,
    namespace: str = "vms",
    version: str = "v1beta1",
) -> Obj:
    """A VirtualMachinePool whose VM template is ``vm``'s spec."""
    spec: Obj = {
        "selector": {"matchLabels": {"app": name}},
        "virtualMachineTemplate": {
            "spec": vm(name, gpus=gpus, run_strategy=run_strategy, instancetype=instancetype)[
                "spec"
            ]
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": f"pool.kubevirt.io/{version}",
        "kind": "VirtualMachinePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
