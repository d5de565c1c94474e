"""Device health in pod status (KEP-4680, beta in 1.36; docs/dra.md, [health]): the kubelet
reports, per container, each allocated device's health under
``status.containerStatuses[].allocatedResourcesStatus[]``: ``name`` is ``claim:<claim>/<request>``
(``claim:<claim>`` for a container whose claim entry names no request) for DRA devices, or the
extended resource's name for a device plugin's; ``resources[]`` holds ``resourceID`` (a DRA
device as ``<driver>/<pool>/<device>``) and ``health``: Healthy, Unhealthy or Unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.vocabulary.fields import as_maps, get_list, get_str
from policies.vocabulary.requests import JSONObject

HEALTHY = "Healthy"


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    container: str
    source: str
    """``claim:<claim>/<request>`` or a resource name, as the kubelet writes it."""
    device: str
    """``resourceID``: for DRA, ``<driver>/<pool>/<device>``."""
    health: str

    @property
    def claim_entry(self) -> str:
        """The pod's ``spec.resourceClaims[]`` entry a DRA device came through, '' otherwise."""
        if not self.source.startswith("claim:"):
            return ""
        return self.source.removeprefix("claim:").partition("/")[0]


def project_device_health(status: JSONObject) -> tuple[DeviceHealth, ...]:
    """Every device not reported Healthy (an absent health reads as Unknown, as the API says)."""
    out = []
    statuses = as_maps(get_list(status, "containerStatuses", "status"), "status.containerStatuses")
    for where, container in statuses:
        name = get_str(container, "name", where)
        allocated = as_maps(
            get_list(container, "allocatedResourcesStatus", where),
            f"{where}.allocatedResourcesStatus",
        )
        for w, entry in allocated:
            source = get_str(entry, "name", w)
            for rw, resource in as_maps(get_list(entry, "resources", w), f"{w}.resources"):
                health = get_str(resource, "health", rw, "Unknown")
                if health != HEALTHY:
                    device = get_str(resource, "resourceID", rw)
                    out.append(DeviceHealth(name, source, device, health))
    return tuple(out)
