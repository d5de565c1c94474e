"""The GPU Operator's NVIDIADriver (nvidia.com/v1alpha1, cluster-scoped): one driver image per set
of GPU nodes, and which GPU node each one drives (docs/driver-upgrades.md section 3).

The operator routes every ``nvidia.com/gpu.present=true`` node to one NVIDIADriver with the node
label ``nvidia.com/gpu-operator.driver.owner``: the non-default NVIDIADriver whose
``spec.nodeSelector`` selects it (none given: every GPU node), else the one with
``spec.default: true``; with two defaults, a default that has a nodeSelector, the owner label in a
selector, or a node two non-default ones select, it changes no owner at all (gpu-operator
internal/nvidiadriver/nvidiadriver.go ``AssignOwners``, api/nvidia/v1alpha1
``GetNodeSelector``, ``ValidateNodeSelector``; internal/consts ``NVIDIADriverOwnerLabel``).
Pure: no view, so that the view can name these types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from policies.cluster.gpu_operator import DriverUpgradePolicy, upgrade_policy
from policies.cluster.nodes import NodeInfo
from policies.cluster.workload import GPU_PRESENT_LABEL
from policies.vocabulary.fields import get_bool, get_map, get_str, get_string_map, get_time
from policies.vocabulary.requests import JSONObject

OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
#: What a NVIDIADriver without ``spec.nodeSelector`` selects (``GetNodeSelector``).
EVERY_GPU_NODE: Mapping[str, str] = {GPU_PRESENT_LABEL: "true"}


@dataclass(frozen=True, slots=True)
class NVIDIADriverInfo:
    name: str
    default: bool
    """``spec.default``: drives the GPU nodes no other NVIDIADriver selects."""
    repository_image: str
    """``repository/image``: with the version, the driver image; a change rolls the driver pods."""
    version: str
    node_selector: Mapping[str, str] | None
    """``spec.nodeSelector``; None when not given (every GPU node, ``selector``)."""
    upgrade: DriverUpgradePolicy
    """``spec.upgradePolicy`` with the operator's defaults (``GetUpgradePolicyWithDefaults``:
    none given is autoUpgrade true, one at a time, 25 %)."""
    deleting: bool

    @property
    def selector(self) -> Mapping[str, str]:
        return EVERY_GPU_NODE if self.node_selector is None else self.node_selector

    @property
    def image(self) -> str:
        """The image reference the operator builds: ``@`` before a digest (internal/image
        ``ImagePath``; the OS tag it appends is the same for both sides of a change)."""
        at = "@" if self.version.startswith("sha256:") else ":"
        return f"{self.repository_image}{at}{self.version}"

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())


def project_nvidia_driver(obj: JSONObject) -> NVIDIADriverInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    version = get_str(spec, "version", "spec")
    parts = (get_str(spec, "repository", "spec"), get_str(spec, "image", "spec"))
    return NVIDIADriverInfo(
        name=get_str(meta, "name", "metadata"),
        default=get_bool(spec, "default", "spec"),
        repository_image="/".join(p for p in parts if p),
        version=version,
        node_selector=(
            get_string_map(spec, "nodeSelector", "spec")
            if spec.get("nodeSelector") is not None
            else None
        ),
        upgrade=upgrade_policy(spec, "spec"),
        deleting=get_time(meta, "deletionTimestamp", "metadata") is not None,
    )


def owners(
    drivers: Iterable[NVIDIADriverInfo], gpu_nodes: Sequence[NodeInfo]
) -> Mapping[str, str] | None:
    """Node name -> the NVIDIADriver the operator routes it to ('' for none), as ``AssignOwners``
    decides; None where it refuses and changes no owner (see the module docstring)."""
    live = [d for d in drivers if not d.deleting]
    defaults = [d for d in live if d.default]
    if len(defaults) > 1 or any(
        OWNER_LABEL in (d.node_selector or {}) or (d.default and d.node_selector) for d in live
    ):
        return None
    fallback = defaults[0].name if defaults else ""
    chosen: dict[str, str] = {}
    for node in gpu_nodes:
        matching = [d.name for d in live if not d.default and d.selects(node.labels)]
        if len(matching) > 1:
            return None
        chosen[node.name] = matching[0] if matching else fallback
    return chosen
