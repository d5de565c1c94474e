"""Why no healthy node provides a VM's device, and what KubeVirt's permissions add: the one answer
the passthrough-without-ready-provider policy and the audit's vm-unschedulable diagnosis (through
``policies.diagnoses.workloads``) both tell, so it lives below both.

A provider advertises the device AND is healthy (``policies.cluster.health``); when none does, the
answer names who advertises it and in what health, or the names that may have been meant (case,
pci.ids, or a vGPU profile spelt short) with the vGPU profiles nodes offer, and whether the
KubeVirt CR permits the device and turns its feature gate on.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.cluster.feature_gates import gate_off, turn_on_steps
from policies.cluster.health import NodeHealth, node_health
from policies.cluster.kubevirt import DeviceRequest, KubeVirtInfo
from policies.cluster.vgpu import ProfileHint, permitted_mdevs, profile_hint
from policies.cluster.view import ClusterView

SHOWN_PROVIDERS = 3


def did_you_mean(name: str, view: ClusterView, kubevirt: KubeVirtInfo | None) -> list[str]:
    """Names that differ only in case, or that pci.ids maps to the same device (raw id vs name)."""
    candidates = set(view.advertised_like(name))
    if kubevirt is not None:
        folded = name.casefold()
        candidates.update(r for r in kubevirt.permitted_resource_names if r.casefold() == folded)
    for pci in view.pci_database.ids_for_resource_name(name):
        candidates.update(view.advertised_for_pci(pci))
    candidates.discard(name)
    return sorted(candidates)


def permission_problems(device: DeviceRequest, kubevirt: KubeVirtInfo | None) -> list[str]:
    if kubevirt is None:
        return []
    problems = []
    if not kubevirt.permits(device):
        problems.append("not in permittedHostDevices, so KubeVirt will refuse to start it")
    gate = kubevirt.lacks_gate_for(device)
    if gate is not None:
        problems.append(
            f"hostDevices need the {gate.gate} feature gate, which KubeVirt {gate_off(gate)}"
        )
    return problems


def permission_steps(device: DeviceRequest, kubevirt: KubeVirtInfo | None) -> list[str]:
    """The remediation of ``permission_problems``: permit the device, turn its gate on."""
    if kubevirt is None:
        return []
    steps = []
    if not kubevirt.permits(device):
        steps.append(f"permit {device.device_name} in the KubeVirt CR's permittedHostDevices")
    gate = kubevirt.lacks_gate_for(device)
    if gate is not None:
        steps.extend(turn_on_steps([gate], f"KubeVirt {kubevirt.namespace}/{kubevirt.name}"))
    return steps


@dataclass(frozen=True, slots=True)
class DeviceProblem:
    """Why no healthy node provides a device: what the policy's message and the audit's
    vm-unschedulable diagnosis both tell, computed once by ``device_problem``."""

    device: DeviceRequest
    providers: tuple[str, ...]
    """Every node that advertises it (none is a healthy provider)."""
    shown: tuple[tuple[str, NodeHealth], ...]
    """The first ``SHOWN_PROVIDERS`` of them, with their health."""
    suggestions: tuple[str, ...]
    """When none advertises it: names it may have meant (case, or pci.ids)."""
    permission: tuple[str, ...]
    profiles: ProfileHint | None = None
    """When none advertises a vGPU (or a near miss of one): the profiles nodes offer."""

    @property
    def name(self) -> str:
        return self.device.device_name

    @property
    def more(self) -> int:
        """Providers beyond the shown ones."""
        return max(0, len(self.providers) - SHOWN_PROVIDERS)


def device_problem(
    device: DeviceRequest, view: ClusterView, kubevirt: KubeVirtInfo | None
) -> DeviceProblem | None:
    """None when a healthy node provides ``device``; else who advertises it and in what health."""
    name = device.device_name
    if view.healthy_provider_count(name) > 0:
        return None
    providers = tuple(view.providers_of(name))
    shown = []
    for provider in providers[:SHOWN_PROVIDERS]:
        node = view.node(provider)
        if node is not None:
            shown.append((provider, node_health(node)))
    suggestions: tuple[str, ...] = ()
    profiles = None
    if not providers:
        profiles = profile_hint(name, view, name in permitted_mdevs(kubevirt))
        meant = profiles.meant if profiles is not None else ()
        others = [n for n in did_you_mean(name, view, kubevirt) if n not in meant]
        suggestions = (*meant, *others)
    permission = tuple(permission_problems(device, kubevirt))
    return DeviceProblem(device, providers, tuple(shown), suggestions, permission, profiles)
