"""The CustomResourceDefinitions the e2e tier installs.

The real ones the repository keeps (tests/fixtures/crds: PolicyReport, ClusterPolicyReport,
HyperConverged, ClusterPolicy, GPUCluster, NVIDIADriver), so the API server prunes and validates
as a real cluster would; and, for KubeVirt and NFD, whose CRDs the repository does not keep,
open schemas (``x-kubernetes-preserve-unknown-fields``) as the recordings in tests/fixtures used,
with the names, scope and status subresource of the real ones. Group, version, plural and scope
come from ``policies.cluster.kinds``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from policies.cluster.kinds import (
    KUBEVIRT,
    NODE_FEATURE,
    RESOURCE_OF,
    VIRTUAL_MACHINE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
    VM_POOL,
    VM_REPLICA_SET,
)
from policies.cluster.kinds import VIRTUAL_MACHINE_INSTANCE as VMI
from policies.vocabulary.requests import GroupKind
from tests import FIXTURES

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

CRDS = FIXTURES / "crds"
REAL_CRD_FILES = (
    CRDS / "wgpolicyk8s.io_policyreports.yaml",
    CRDS / "wgpolicyk8s.io_clusterpolicyreports.yaml",
    CRDS / "platform" / "hco.kubevirt.io_hyperconvergeds.yaml",
    CRDS / "platform" / "nvidia.com_clusterpolicies.yaml",
    CRDS / "platform" / "nvidia.com_gpuclusters.yaml",
    CRDS / "platform" / "nvidia.com_nvidiadrivers.yaml",
)
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OPENREPORTS_CRD_FILES = (
    CRDS / "openreports" / "openreports.io_reports.yaml",
    CRDS / "openreports" / "openreports.io_clusterreports.yaml",
)
"""Not among the real CRDs every plane gets: with them served, ``--report-format auto``
writes OpenReports, so only the tests about that install them."""


@dataclass(frozen=True)
class OpenCrd:
    """A kind the project serves with an open schema: what the real CRD names and has."""

    kind: GroupKind
    short_names: tuple[str, ...]
    status: bool
    """Whether the real CRD has the status subresource (KubeVirt's VM and KubeVirt CR do, the
    VMI and NFD's NodeFeature do not)."""
    scale: bool = False
    """Whether the real CRD has the scale subresource (KubeVirt's crds.go: the replica set and
    the pool, spec.replicas, status.replicas, status.labelSelector)."""

    def definition(self) -> dict[str, Any]:
        resource = RESOURCE_OF[self.kind]
        version: dict[str, Any] = {
            "name": resource.version,
            "served": True,
            "storage": True,
            "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            },
        }
        if self.status:
            version["subresources"] = {"status": {}}
        if self.scale:
            version.setdefault("subresources", {})["scale"] = {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.labelSelector",
            }
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{resource.plural}.{self.kind.group}"},
            "spec": {
                "group": self.kind.group,
                "scope": "Namespaced" if resource.namespaced else "Cluster",
                "names": {
                    "kind": self.kind.kind,
                    "listKind": f"{self.kind.kind}List",
                    "plural": resource.plural,
                    "singular": self.kind.kind.lower(),
                    "shortNames": list(self.short_names),
                },
                "versions": [version],
            },
        }


OPEN_CRDS = (
    OpenCrd(VIRTUAL_MACHINE, ("vm", "vms"), status=True),
    OpenCrd(VMI, ("vmi", "vmis"), status=False),
    OpenCrd(KUBEVIRT, ("kv", "kvs"), status=True),
    OpenCrd(NODE_FEATURE, (), status=False),
    OpenCrd(VM_REPLICA_SET, ("vmirs", "vmirss"), status=True, scale=True),
    OpenCrd(VM_POOL, ("vmpool", "vmpools"), status=True, scale=True),
    OpenCrd(VM_INSTANCETYPE, ("vminstancetype", "vminstancetypes", "vmf", "vmfs"), status=False),
    OpenCrd(
        VM_CLUSTER_INSTANCETYPE,
        ("vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"),
        status=False,
    ),
)


@functools.cache
def _read(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if doc)


def real_crds() -> list[dict[str, Any]]:
    """The repository's CRDs (read once a run: the HyperConverged CRD alone is 11,000 lines)."""
    return [doc for path in REAL_CRD_FILES for doc in _read(path)]


def openreports_crds() -> list[dict[str, Any]]:
    """OpenReports' Report and ClusterReport CRDs, as the project publishes them."""
    return [doc for path in OPENREPORTS_CRD_FILES for doc in _read(path)]


def every_crd() -> list[dict[str, Any]]:
    """Every CRD the tier installs: the repository's real ones, then the open ones."""
    return [*real_crds(), *(crd.definition() for crd in OPEN_CRDS)]


def install(plane: ControlPlane, crds: Iterable[dict[str, Any]], timeout: float = 60) -> None:
    """Creates the CRDs (one already there is left as it is) and waits until each is
    Established and served."""
    names = []
    for crd in crds:
        status, answer = plane.request("POST", CRD_PATH, crd)
        if status not in (201, 409):
            raise AssertionError(f"CRD {crd['metadata']['name']}: {status} {answer}")
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(plane, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established within {timeout:.0f} s")
            time.sleep(0.02)


def _established(plane: ControlPlane, name: str) -> bool:
    status, crd = plane.request("GET", f"{CRD_PATH}/{name}")
    if status != 200:
        return False
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
        return False
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    served, _ = plane.request("GET", f"/apis/{spec['group']}/{version}/{spec['names']['plural']}")
    return served == 200
