"""The audit on a DRA cluster: DRA GPU nodes in the overview; the DRA diagnoses carried by JSON,
PolicyReports, Markdown (Mermaid), the table and text without renderer changes; and the contract
with claim-without-ready-device (the verdict it explains is enriched, not duplicated)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cache

import pytest

from policies.diagnoses.claims import (
    CLAIM_ON_NOT_READY_NODE,
    CLAIM_WITHOUT_READY_DEVICE,
    claim_device,
)
from policies.diagnoses.managed_twice import GPU_MANAGED_TWICE
from policies.diagnoses.nodes import GPU_NODE_NOT_READY
from policies.dra_claims import project_resource_claim
from policies.model import Action, Finding, ObjectRef, Policy
from policies.pciids import bundled_database
from policies.registry import ALL_DIAGNOSES
from policies.view import ClusterView
from tests.builders import Obj, dead_node, node, state_of
from tests.dra_builders import claim_pod, gpu, resource_claim, resource_slice
from tests.test_audit_outputs import homelab, validate_reports
from tests.test_diagnosis_claims import pod_on_dead_omen2, train_claim
from webhook.audit.report import AuditReport, run_audit
from webhook.engine import Engine
from webhook.render.markdown import render_markdown
from webhook.render.policyreport import policy_reports
from webhook.render.table import render_table
from webhook.render.text import render_text

NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)


def dra_cluster() -> list[Obj]:
    """omen2 dead (swap on at kubelet's last report) holding ml/train-0's claim; n1 Ready with
    the device plugin and the DRA driver both offering its GPU; n2 a DRA-only GPU node."""
    omen2 = dead_node("omen2")
    omen2["status"]["nodeInfo"]["swap"] = {"capacity": 34359738368}
    return [
        omen2,
        resource_slice("omen2-gpu.nvidia.com-7x2kq", "omen2", [gpu()]),
        resource_claim(
            "train-gpu", allocated=("omen2", "omen2", "gpu-0"), reserved_for=["train-0"]
        ),
        claim_pod("train-0", "omen2", claim="train-gpu"),
        node("n1", allocatable={"nvidia.com/gpu": "1"}),
        resource_slice("n1-gpu.nvidia.com-p2x9d", "n1", [gpu(product="NVIDIA H100 NVL")]),
        node("n2"),
        resource_slice("n2-gpu.nvidia.com-h7c4q", "n2", [gpu("gpu-0"), gpu("gpu-1")]),
        node("cpu1"),
    ]


@cache
def dra_report() -> AuditReport:
    """Cached for the module, so on the committed pci.ids: tests read device names in it."""
    return run_audit(Engine(), state_of(*dra_cluster(), pci_database=bundled_database()), NOW)


def test_a_node_with_nvidia_dra_devices_is_a_gpu_node_and_the_overview_lists_them() -> None:
    overview = {n.name: n for n in dra_report().gpu_nodes}
    assert sorted(overview) == ["n1", "n2", "omen2"]
    assert overview["n2"].dra_devices == (
        "gpu-0 (gpu, NVIDIA GeForce RTX 5090)",
        "gpu-1 (gpu, NVIDIA GeForce RTX 5090)",
    )
    assert overview["n1"].resources == (("nvidia.com/gpu", 1),)
    json_nodes = {n["name"]: n for n in dra_report().to_json()["gpuNodes"]}
    assert json_nodes["n2"]["draDevices"] == list(overview["n2"].dra_devices)
    assert json_nodes["omen2"]["health"] == "NotReady"


def test_the_home_lab_overview_has_no_dra_devices_and_reads_as_before() -> None:
    assert all("draDevices" not in n for n in homelab().to_json()["gpuNodes"])


def test_a_notready_dra_node_is_a_notready_gpu_node_whose_slices_are_stale() -> None:
    (finding,) = [f for f in dra_report().findings if f.verdict.policy == GPU_NODE_NOT_READY]
    assert finding.verdict.resource.name == "omen2"
    assert (
        "ResourceSlices of gpu.nvidia.com still publish gpu-0 (gpu, NVIDIA GeForce RTX 5090): "
        "no provider while the node is NotReady"
    ) in finding.verdict.chain


def test_json_carries_both_dra_findings_with_their_chains_and_durations() -> None:
    findings = {(f["policy"], f["resource"]["name"]): f for f in dra_report().to_json()["findings"]}
    held = findings[(CLAIM_ON_NOT_READY_NODE, "train-0")]
    assert (held["action"], held["severity"], held["resource"]["kind"]) == ("warn", "high", "Pod")
    assert held["duration"] == "112 days"
    assert "omen2: swap is on: kubelet reports 32.0 GiB of swap" in held["chain"]
    twice = findings[(GPU_MANAGED_TWICE, "n1")]
    assert (twice["action"], twice["severity"], twice["resource"]["kind"]) == (
        "warn",
        "high",
        "Node",
    )
    assert twice["remediation"][1].startswith("to keep DRA (it replaces the device plugin)")


def test_policyreports_carry_the_dra_findings_in_their_scopes() -> None:
    docs = policy_reports(dra_report())
    validate_reports(docs)
    by_scope = {d["metadata"].get("namespace", ""): d for d in docs}
    cluster_results = {(r["policy"], r["resources"][0]["name"]) for r in by_scope[""]["results"]}
    assert (GPU_MANAGED_TWICE, "n1") in cluster_results
    (held,) = by_scope["ml"]["results"]
    assert (held["policy"], held["result"], held["severity"]) == (
        CLAIM_ON_NOT_READY_NODE,
        "warn",
        "high",
    )
    assert held["resources"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "train-0", "namespace": "ml"}
    ]
    assert "omen2: swap is on" in held["properties"]["chain"]


def test_markdown_draws_the_claims_chain_and_lists_the_dra_gpu_nodes() -> None:
    out = render_markdown(dra_report())
    assert f"`{CLAIM_ON_NOT_READY_NODE}` Pod ml/train-0" in out
    assert f"`{GPU_MANAGED_TWICE}` Node n1" in out
    blocks = re.findall(r"```mermaid\n(.*?)```", out, flags=re.S)
    (claim_chart,) = [b for b in blocks if "uses claim ml/train-gpu" in b]
    assert "omen2: swap is on: kubelet reports 32.0 GiB of swap" in claim_chart
    # a node whose GPU only the DRA driver publishes is listed with that GPU's PCI id and name
    assert (
        "| n2 | container (no valid label) | Ready |  | 10de:2b85 GB202 \\[GeForce RTX 5090\\] |"
        in out
    )


@pytest.mark.parametrize("render", [render_text, render_table], ids=["text", "table"])
def test_text_and_table_carry_the_dra_findings(render: Callable[[AuditReport], str]) -> None:
    out = render(dra_report())
    for policy in (CLAIM_ON_NOT_READY_NODE, GPU_MANAGED_TWICE):
        assert policy in out
    assert "uses claim ml/train-gpu" in out


# --- the contract with claim-without-ready-device ------------------------------------------------


def claim_policy(device: str) -> Policy:
    """A stand-in for D2's claim-without-ready-device that flags train-0's claim request."""

    def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
        ref = ObjectRef("v1", "Pod", "ml", "train-0")
        yield ref, Finding("no Ready node has a device for ml/train-gpu", device=device)

    return Policy(
        id=CLAIM_WITHOUT_READY_DEVICE,
        summary="stand-in",
        scope={},
        default_action=Action.WARN,
        default_reason="stand-in",
        failure_action=Action.WARN,
        check=lambda request, view: (),
        audit=audit,
    )


@pytest.mark.parametrize(
    ("policies", "chained"),
    [
        pytest.param([], {CLAIM_ON_NOT_READY_NODE: True}, id="alone: under its own id"),
        pytest.param(
            [claim_policy("ml/train-gpu:gpu")],
            {CLAIM_WITHOUT_READY_DEVICE: True},
            id="the policy flags the same request: its verdict carries the chain",
        ),
        pytest.param(
            [claim_policy("ml/other:gpu")],
            {CLAIM_WITHOUT_READY_DEVICE: False, CLAIM_ON_NOT_READY_NODE: True},
            id="another claim: both stand, each with its own chain",
        ),
    ],
)
def test_a_claim_without_ready_device_verdict_is_enriched_not_duplicated(
    policies: list[Policy], chained: dict[str, bool]
) -> None:
    """``chained``: which findings the audit reports about the pod, and whether each carries
    the chain to the node."""
    engine = Engine(policies=policies, diagnoses=ALL_DIAGNOSES)
    report = run_audit(engine, state_of(*pod_on_dead_omen2()), NOW)
    about_pod = {
        f.verdict.policy: any("omen2: swap is on" in link for link in f.verdict.chain)
        for f in report.findings
        if f.verdict.resource.kind == "Pod"
    }
    assert about_pod == chained


@pytest.mark.parametrize(
    ("requests", "device"),
    [
        pytest.param(["gpu"], "ml/train-gpu:gpu", id="one request: its name"),
        pytest.param(["gpu", "nic"], "ml/train-gpu:", id="several: the whole claim"),
    ],
)
def test_the_finding_names_its_claim_request_as_the_contract_spells_it(
    requests: list[str], device: str
) -> None:
    obj = train_claim()
    template = obj["spec"]["devices"]["requests"][0]
    obj["spec"]["devices"]["requests"] = [{**template, "name": name} for name in requests]
    assert claim_device("ml", project_resource_claim(obj)) == device
