"""The two operators' singletons: the KubeVirt CR (which host devices VMs may use) and the GPU
Operator's ClusterPolicy (sandbox workloads on, containers by default)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from bench.synthetic import draw
from bench.synthetic.draw import Obj
from bench.synthetic.layout import VFIO_MODELS, Layout, words
from bench.synthetic.pods import GPU_TOLERATION
from bench.synthetic.vms import KUBEVIRT_API

FEATURE_GATES = words("HostDevices GPU DataVolumes LiveMigration Snapshot ExpandDisks")


def kubevirts(layout: Layout) -> Iterator[Obj]:
    permitted = {
        "pciHostDevices": [
            {
                "pciVendorSelector": f"10de:{model.device}",
                "resourceName": model.resource,
                "externalResourceProvider": True,
            }
            for model in VFIO_MODELS
        ],
        "mediatedDevices": [],
    }
    yield kubevirt_cr(random.Random(f"{layout.seed}:kubevirt"), FEATURE_GATES, permitted)


def kubevirt_cr(rng: random.Random, gates: tuple[str, ...], permitted: Obj | None) -> Obj:
    """The KubeVirt CR with these feature gates and ``permittedHostDevices`` (None: none, as
    with devices from DRA claims, which KubeVirt does not check against it)."""
    configuration: Obj = {
        "developerConfiguration": {"featureGates": list(gates)},
        "evictionStrategy": "LiveMigrate",
    }
    if permitted is not None:
        configuration["permittedHostDevices"] = permitted
    return {
        "apiVersion": KUBEVIRT_API,
        "kind": "KubeVirt",
        "metadata": {
            "name": "kubevirt",
            "namespace": "kubevirt",
            "uid": draw.uid(rng),
            "generation": 9,
            "resourceVersion": draw.resource_version(rng),
            "creationTimestamp": draw.stamp(rng, 400, 300),
            "finalizers": ["foregroundDeleteKubeVirt"],
        },
        "spec": {
            "certificateRotateStrategy": {},
            "configuration": configuration,
            "customizeComponents": {},
            "imagePullPolicy": "IfNotPresent",
            "workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]},
        },
        "status": {
            "phase": "Deployed",
            "observedKubeVirtVersion": "v1.4.0",
            "targetKubeVirtVersion": "v1.4.0",
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                    "lastProbeTime": draw.stamp(rng, 1),
                    "lastTransitionTime": draw.stamp(rng, 30, 1),
                },
            ],
        },
    }


def cluster_policies(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:cluster-policy")

    enabled = {"enabled": True}
    yield {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "uid": draw.uid(rng),
            "generation": 4,
            "resourceVersion": draw.resource_version(rng),
            "creationTimestamp": draw.stamp(rng, 400, 300),
            "labels": {"app.kubernetes.io/component": "gpu-operator"},
        },
        "spec": {
            "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
            "daemonsets": {
                "priorityClassName": "system-node-critical",
                "tolerations": [GPU_TOLERATION],
            },
            "driver": {
                **enabled,
                "version": "550.90.07",
                "repository": "nvcr.io/nvidia",
                "image": "driver",
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1},
            },
            "toolkit": {**enabled, "version": "v1.17.0-ubuntu20.04"},
            "devicePlugin": {**enabled, "version": "v0.17.0"},
            "dcgm": {"enabled": False},
            "dcgmExporter": {**enabled, "version": "3.3.8-3.6.0-ubuntu22.04"},
            "gfd": {**enabled, "version": "v0.17.0"},
            "migManager": {**enabled, "config": {"name": "default-mig-parted-config"}},
            "mig": {"strategy": "mixed"},
            "nodeStatusExporter": enabled,
            "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
            "sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"},
            "sandboxDevicePlugin": {**enabled, "version": "v1.2.10"},
            "vfioManager": {**enabled, "version": "12.6.2-base-ubi9"},
            **{
                off: {"enabled": False}
                for off in words("vgpuManager vgpuDeviceManager kataManager ccManager")
            },
        },
        "status": {
            "state": "ready",
            "namespace": "gpu-operator",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "lastTransitionTime": draw.stamp(rng, 30, 1),
                    "message": "",
                }
            ],
        },
    }
