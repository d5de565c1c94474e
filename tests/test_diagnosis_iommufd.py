"""iommufd-missing: with KubeVirt's IOMMUFD gate on, the Ready nodes KubeVirt schedules on that do
not advertise devices.kubevirt.io/iommufd."""

from __future__ import annotations

from datetime import UTC, datetime

from policies.diagnoses.iommufd import IOMMUFD_MISSING
from policies.registry import diagnose_all
from tests.builders import node, state_of
from tests.test_policy_vm_claim_preflight import kv

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_the_audit_names_nodes_without_iommufd_while_the_gate_is_on() -> None:
    labels = {"kubevirt.io/schedulable": "true"}
    plain = node("tower2", labels=labels)
    iommu = node("tower1", labels=labels, allocatable={"devices.kubevirt.io/iommufd": "1k"})
    found = diagnose_all(state_of(kv("v1.9.0", "IOMMUFD"), plain, iommu), NOW)[IOMMUFD_MISSING]
    assert [f.resource.name for f in found] == ["tower2"]
    assert diagnose_all(state_of(kv(), plain), NOW)[IOMMUFD_MISSING] == []
