"""Coverage is part of every answer (issue 34): what a policy or diagnosis needs and the state
never saw makes its answer "not judged", never an all-clear; what it reads, it declares."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from policies.cluster.claim_fit import claim_fit
from policies.cluster.coverage import (
    CLAIM_FIT_READS,
    DEVICE_HOLDERS_READS,
    GPU_USERS_READS,
    MAY_BE_ABSENT,
    READS_OF,
    VM_USERS_READS,
    VMS_TO_RUN_READS,
    Recording,
)
from policies.cluster.gpu_users import gpu_users_on, pod_workload, vm_users_on
from policies.cluster.kinds import (
    NODE,
    POD,
    RESOURCE_CLAIM,
    VIRTUAL_MACHINE_INSTANCE,
    WATCHED_KINDS,
)
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.vms_to_run import vms_to_run
from policies.diagnoses.device_health import WORKLOAD_ON_UNHEALTHY_DEVICE_DIAGNOSIS
from policies.diagnoses.facts import NODE_FACTS_READS, node_facts_of
from policies.diagnoses.iommufd import IOMMUFD_MISSING_DIAGNOSIS
from policies.diagnoses.tainted_devices import WORKLOAD_ON_TAINTED_DEVICE_DIAGNOSIS
from policies.diagnoses.vgpu import VGPU_CONFIG_FAILED_DIAGNOSIS
from policies.diagnoses.workloads import WORKLOADS_READS, workloads_of
from policies.registry import ALL_DIAGNOSES, ALL_POLICIES
from policies.rules.device_taint_rule_blast_radius import POLICY as BLAST_RADIUS
from policies.rules.vm_claim_preflight import POLICY as VM_CLAIM_PREFLIGHT
from policies.vocabulary.audit import Diagnosis
from policies.vocabulary.requests import AdmissionRequest, GroupKind
from policies.vocabulary.verdicts import Policy
from tests.builders import node, state_of, vm, vmi
from tests.builders import request as build_request
from tests.dra_builders import claim_pod, claim_vm, gpu, resource_claim, resource_slice
from tests.samples import all_samples
from tests.test_claim_fit import CLASSES
from tests.test_device_health import reporting
from tests.test_device_taints import LOST, held
from tests.test_device_taints import rule as taint_rule
from tests.test_policy_vm_claim_preflight import kv
from webhook.cli import main
from webhook.commands.common import EXIT_NOT_JUDGED
from webhook.coverage import StateCoverage, export_command, left_out
from webhook.state.files import LISTED_ANNOTATION, listed_in, load_state, load_state_objects
from webhook.state.snapshot import write_state_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*/cluster.yaml"))
HOMELAB = ROOT / "examples" / "homelab" / "cluster.yaml"
SWITCH = ROOT / "examples" / "homelab" / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
NOW = "2026-10-30T12:00:00Z"
NOT_JUDGED_PODS = "not judged: the state has no Pods (add them: kubectl get pods -A -o yaml, or "


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out


def homelab_items() -> list[dict[str, Any]]:
    document: dict[str, Any] = yaml.safe_load(HOMELAB.read_text())
    return list(document["items"])


@pytest.fixture
def nodes_only(tmp_path: Path) -> str:
    """The home lab's Nodes alone, as ``kubectl get nodes -o yaml`` gives them."""
    path = tmp_path / "nodes-only.yaml"
    nodes = [o for o in homelab_items() if o["kind"] == "Node"]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    return str(path)


# --- what is read is declared ---------------------------------------------------------------------


def test_every_question_a_policy_may_ask_of_the_view_says_which_kinds_it_reads() -> None:
    questions = {
        name
        for name, _ in inspect.getmembers(ClusterView)
        if not name.startswith("_") and name in ClusterView.__dict__
    }
    assert questions == set(READS_OF), (
        f"give each ClusterView method a row in policies/cluster/coverage.py READS_OF: "
        f"missing {sorted(questions - set(READS_OF))}, gone {sorted(set(READS_OF) - questions)}"
    )


def _asked_by_policies() -> dict[str, set[GroupKind]]:
    """Per policy, the kinds it asked about over every sample and every example's audit."""
    asked: dict[str, set[GroupKind]] = {p.id: set() for p in ALL_POLICIES}
    for sample in all_samples():
        state = load_state(sample.state_args)
        for request in sample.requests():
            for policy in ALL_POLICIES:
                if request.operation in policy.scope.get(request.group_kind, ()):
                    recording = Recording(state)
                    policy.check(request, recording.view)
                    asked[policy.id] |= recording.kinds
    for example in EXAMPLES:
        state = load_state([str(example)])
        for policy in ALL_POLICIES:
            if policy.audit is not None:
                recording = Recording(state)
                list(policy.audit(recording.view))
                asked[policy.id] |= recording.kinds
    return asked


def test_a_policy_reads_no_kind_it_did_not_declare() -> None:
    asked = _asked_by_policies()
    for policy in ALL_POLICIES:
        undeclared = sorted(map(str, asked[policy.id] - policy.reads))
        assert not undeclared, f"{policy.id} asks about {undeclared}: add them to its reads="


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_a_diagnosis_reads_no_kind_it_did_not_declare(example: Path) -> None:
    state = load_state([str(example)])
    now = datetime(2026, 10, 30, 12, tzinfo=UTC)
    for diagnosis in ALL_DIAGNOSES:
        recording = Recording(state)  # a fresh AuditView: nothing another diagnosis computed
        list(diagnosis.diagnose(AuditView(recording.view), now))
        undeclared = sorted(map(str, recording.kinds - diagnosis.reads))
        assert not undeclared, f"{diagnosis.id} asks about {undeclared}: add them to its reads="


@pytest.mark.parametrize("item", [*ALL_POLICIES, *ALL_DIAGNOSES], ids=lambda item: str(item.id))
def test_an_answer_needs_only_the_kinds_it_reads_that_may_not_be_absent(item: Any) -> None:
    """Absence means none for a kind, whoever reads it (MAY_BE_ABSENT): with every other kind
    it reads seen, nothing is left out; without any one of those, that kind is."""
    needed = frozenset(item.reads - MAY_BE_ABSENT)
    assert left_out([item], StateCoverage(needed)) == {}
    for kind in needed:
        assert left_out([item], StateCoverage(needed - {kind})) == {kind: (item.id,)}


def test_a_cluster_without_the_kinds_that_may_be_absent_is_judged_as_having_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The home lab without its NodeFeatures and ClusterPolicy (no NFD, no GPU Operator
    installed): the switch is still judged and denied, and the audit leaves nothing out."""
    state = tmp_path / "no-optional-kinds.yaml"
    kept = [o for o in homelab_items() if _group_kind(o) not in MAY_BE_ABSENT]
    assert len(kept) < len(homelab_items())  # the home lab has some to leave out
    state.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": kept}))
    code, out = run(capsys, "check", "--state", str(state), "-f", str(SWITCH))
    assert code == 1, out
    assert "not judged" not in out
    code, out = run(capsys, "audit", "--state", str(state), "--now", NOW, "-o", "json")
    report = orjson.loads(out)
    assert "notJudged" not in report and report["findings"], out[:400]


def _group_kind(obj: dict[str, Any]) -> GroupKind:
    group, _, _ = str(obj["apiVersion"]).rpartition("/")
    return GroupKind(group, str(obj["kind"]))


#: VMs whose devices come from instancetypes (the examples and samples name none in a state).
VMS_NAMING_INSTANCETYPES = state_of(
    vm("typed", instancetype={"name": "gpu-5090"}),
    vm("own-typed", instancetype={"kind": "VirtualMachineInstancetype", "name": "gpu-5090"}),
)

Ask = Callable[[ClusterView, ClusterView], object]
"""A shared helper asked everything it can be asked of a state: (the state, the recorder)."""


def _on_every_node(helper: Callable[[str, ClusterView], object]) -> Ask:
    return lambda state, view: [helper(node.name, view) for node in state.nodes()]


@pytest.mark.parametrize(
    ("declared", "ask"),
    [
        pytest.param(GPU_USERS_READS, _on_every_node(gpu_users_on), id="gpu_users_on"),
        pytest.param(VM_USERS_READS, _on_every_node(vm_users_on), id="vm_users_on"),
        pytest.param(VMS_TO_RUN_READS, lambda _, view: list(vms_to_run(view)), id="vms_to_run"),
        pytest.param(
            DEVICE_HOLDERS_READS,
            lambda state, view: [
                pod_workload(view, held.claim.namespace, pod.name, node.name)
                for node in state.nodes()
                for held in view.claims_allocated_on(node.name)
                for pod in held.pods
            ],
            id="claims_allocated_on, pod_workload",
        ),
        pytest.param(
            CLAIM_FIT_READS,
            lambda state, view: [claim_fit(c.requests, view) for c in state.claims()],
            id="claim_fit",
        ),
        pytest.param(
            NODE_FACTS_READS, lambda _, view: node_facts_of(AuditView(view)), id="node_facts_of"
        ),
        pytest.param(
            WORKLOADS_READS, lambda _, view: workloads_of(AuditView(view)), id="workloads_of"
        ),
    ],
)
def test_what_a_shared_helper_is_declared_to_read_is_what_it_asks(
    declared: frozenset[GroupKind], ask: Ask
) -> None:
    """Policies declare their reads as the helpers they ask: each set says no more and no less
    than its helper asks over the examples and the samples' states (``test_a_policy_reads_...``
    holds the unions)."""
    asked: set[GroupKind] = set()
    files = [[str(example)] for example in EXAMPLES] + [s.state_args for s in all_samples()]
    for state in [*map(load_state, files), VMS_NAMING_INSTANCETYPES]:
        recording = Recording(state)
        ask(state, recording.view)
        asked |= recording.kinds
    assert sorted(map(str, asked)) == sorted(map(str, declared))


VGPU_FAILED = {"nvidia.com/vgpu.config": "A10-12Q", "nvidia.com/vgpu.config.state": "failed"}
LAUNCHER = "virt-launcher-win11-x7k2p"


@pytest.mark.parametrize(
    ("diagnosis", "objects"),
    [
        pytest.param(
            WORKLOAD_ON_UNHEALTHY_DEVICE_DIAGNOSIS,
            lambda: [
                node("dgx-1"),
                vmi("win11", node_name="dgx-1", owner="win11"),
                reporting(claim_pod(LAUNCHER, "dgx-1", claim="c", namespace="vms"), "Unhealthy"),
            ],
            id="workload-on-unhealthy-device: a VM's launcher",
        ),
        pytest.param(
            IOMMUFD_MISSING_DIAGNOSIS,
            lambda: [
                kv("v1.9.0", "IOMMUFD"),
                node("tower2", labels={"kubevirt.io/schedulable": "true"}),
            ],
            id="iommufd-missing: the gate on",
        ),
        pytest.param(
            WORKLOAD_ON_TAINTED_DEVICE_DIAGNOSIS,
            lambda: [*CLASSES, *held(LOST), vmi("train", node_name="dgx-1")],
            id="workload-on-tainted-device: a pod on a lost GPU",
        ),
        pytest.param(
            VGPU_CONFIG_FAILED_DIAGNOSIS,
            lambda: [node("vg-1", labels=VGPU_FAILED), vmi("desktop", node_name="vg-1")],
            id="vgpu-config-failed: under a VM",
        ),
    ],
)
def test_a_diagnosis_where_the_examples_never_reach_reads_no_kind_it_did_not_declare(
    diagnosis: Diagnosis[AuditView], objects: Callable[[], list[dict[str, Any]]]
) -> None:
    """The examples hold no such node, so the coverage test above never sees these ask: here
    each finds something (its questions asked) and asks only kinds it declares."""
    recording = Recording(state_of(*objects()))
    assert list(diagnosis.diagnose(AuditView(recording.view), datetime(2026, 12, 5, tzinfo=UTC)))
    undeclared = sorted(map(str, recording.kinds - diagnosis.reads))
    assert not undeclared, f"{diagnosis.id} asks about {undeclared}: add them to its reads="


@pytest.mark.parametrize(
    ("policy", "review", "objects"),
    [
        pytest.param(
            BLAST_RADIUS,
            lambda: build_request("CREATE", taint_rule("drain", pool="dgx-1")),
            lambda: [
                node("dgx-1"),
                resource_slice("dgx-1-slice", "dgx-1", [gpu("gpu-0")]),
                resource_claim(
                    "c", "ml", allocated=("dgx-1", "dgx-1", "gpu-0"), reserved_for=["p"]
                ),
                claim_pod("p", "dgx-1", claim="c", namespace="ml"),
                vmi("win11", node_name="dgx-1"),
            ],
            id="device-taint-rule-blast-radius: a rule over a pod's GPU",
        ),
        pytest.param(
            VM_CLAIM_PREFLIGHT,
            lambda: build_request("CREATE", claim_vm("any", claim="one", namespace="vms")),
            lambda: [kv("v1.9.0", "IOMMUFD"), node("tower1")],
            id="vm-claim-preflight: iommufd on, nowhere advertised",
        ),
    ],
)
def test_a_policy_where_the_samples_never_reach_reads_no_kind_it_did_not_declare(
    policy: Policy[ClusterView],
    review: Callable[[], AdmissionRequest],
    objects: Callable[[], list[dict[str, Any]]],
) -> None:
    """As for the diagnoses above: each answers something, asking only kinds it declares."""
    recording = Recording(state_of(*objects()))
    assert policy.check(review(), recording.view)
    undeclared = sorted(map(str, recording.kinds - policy.reads))
    assert not undeclared, f"{policy.id} asks about {undeclared}: add them to its reads="


def test_a_question_without_a_row_is_refused_rather_than_guessed() -> None:
    with pytest.raises(AttributeError, match="no row in READS_OF"):
        Recording(load_state([str(HOMELAB)])).view.nodes_everywhere()  # type: ignore[attr-defined]


# --- check ----------------------------------------------------------------------------------------


def test_a_switch_checked_against_nodes_alone_is_not_judged_and_exits_3(
    nodes_only: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "check", "--state", nodes_only, "-f", str(SWITCH))
    assert code == EXIT_NOT_JUDGED
    assert f"Warning: [workload-switch-with-gpu-pods] {NOT_JUDGED_PODS}" in out
    code, _ = run(capsys, "check", "--state", str(HOMELAB), "-f", str(SWITCH))
    assert code == 1  # the whole state denies the same change


def test_allow_partial_turns_not_judged_into_exit_0_and_still_says_so(
    nodes_only: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("check", "--state", nodes_only, "-f", str(SWITCH), "-o", "json", "--allow-partial")
    code, out = run(capsys, *argv)
    assert code == 0
    (result,) = orjson.loads(out)["results"]
    (verdict,) = result["verdicts"]
    assert verdict["notJudged"] == {"unseen": ["Pod"]}
    assert verdict["message"].startswith(NOT_JUDGED_PODS)


def test_a_kind_snapshot_listed_with_no_object_is_seen_as_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """omen1 without its pods, but Pods listed: an idle node, judged (and allowed)."""
    state = tmp_path / "snapshot.json"
    objects = [o for o in homelab_items() if o["kind"] != "Pod"]
    write_state_file(objects, str(state), WATCHED_KINDS)
    code, out = run(capsys, "check", "--state", str(state), "-f", str(SWITCH))
    assert code == 0, out
    assert "not judged" not in out


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_snapshots_record_of_listed_kinds_is_read_back_by_both_loaders(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"state{suffix}"
    nodes = [o for o in homelab_items() if o["kind"] == "Node"]
    write_state_file(nodes, str(path), [NODE, POD, VIRTUAL_MACHINE_INSTANCE])
    expected = frozenset({NODE, POD, VIRTUAL_MACHINE_INSTANCE})
    assert load_state([str(path)]).listed == expected  # JSON: the streamed loader
    assert load_state_objects([str(path)])[0].listed == expected
    assert len(load_state_objects([str(path)])[1]) == len(nodes)  # the record is no object


def test_a_record_naming_kinds_this_version_does_not_know_keeps_the_ones_it_knows() -> None:
    record = {"metadata": {"annotations": {LISTED_ANNOTATION: "pods, widgets.example.com,"}}}
    assert listed_in(record) == {POD}
    assert listed_in({"metadata": {"annotations": {LISTED_ANNOTATION: 7}}}) == frozenset()


def test_the_export_command_names_exactly_the_missing_kinds() -> None:
    assert export_command([POD]) == "kubectl get pods -A -o yaml"
    assert export_command([NODE]) == "kubectl get nodes -o yaml"
    coverage = StateCoverage(frozenset({NODE}))
    assert coverage.unseen([NODE, POD, RESOURCE_CLAIM, VIRTUAL_MACHINE_INSTANCE]) == [
        POD,
        VIRTUAL_MACHINE_INSTANCE,
    ]


def test_check_says_for_each_object_who_judged_it_or_that_no_policy_reads_its_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "change.yaml"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    change.write_text(yaml.safe_dump_all([config_map]) + "---\n" + SWITCH.read_text())
    code, out = run(capsys, "check", "--state", str(HOMELAB), "-f", str(change))
    assert code == 1  # the switch
    lines = out.splitlines()
    created = lines.index("configmap/c created (server dry run)")
    assert lines[created + 1] == "  gpu-guard: no gpu-guard policy judges a CREATE of ConfigMap"
    assert lines[-1].startswith("  gpu-guard: judged by workload-switch-with-gpu-pods, ")
    _, out = run(capsys, "check", "--state", str(HOMELAB), "-f", str(change), "-o", "json")
    plain, switch = orjson.loads(out)["results"]
    assert plain["judgedBy"] == [] and "no gpu-guard policy" in plain["notJudged"]
    assert "workload-switch-with-gpu-pods" in switch["judgedBy"] and "notJudged" not in switch


# --- audit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["json", "text", "table", "markdown", "policyreport"])
def test_an_audit_lists_the_unseen_kinds_first_and_finds_nothing_that_needs_them(
    nodes_only: str, output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "audit", "--state", nodes_only, "--now", NOW, "-o", output)
    assert code == 0
    if output == "json":
        report = orjson.loads(out)
        assert next(iter(report)) == "notJudged"
        assert [u["kind"] for u in report["notJudged"]][:2] == ["Pod", "VirtualMachine.kubevirt.io"]
        assert "recovery-trap-vm-passthrough" in report["notJudged"][0]["leftOut"]
        assert report["findings"] == []
    elif output == "policyreport":
        cluster = next(yaml.safe_load_all(out))
        first = cluster["results"][0]
        assert first["result"] == "skip" and first["message"].startswith(NOT_JUDGED_PODS)
        assert cluster["summary"]["skip"] == len(cluster["results"])
    else:
        head = out.lstrip("# ").splitlines()
        text = " ".join(head[:6])
        assert NOT_JUDGED_PODS in text, out[:400]
