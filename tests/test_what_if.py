"""``audit --what-if``: hypothetical events on copies of the home lab, against its real audit."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from policies.cluster.kinds import VIRTUAL_MACHINE_INSTANCE, group_kind_of
from policies.prediction.what_if import WhatIfError, apply_events, parse_event
from policies.vocabulary.requests import JSONObject
from tests.kubeapi import KubeApiDouble
from tests.test_cli_live import homelab_api  # noqa: F401  (the fixture)
from tests.test_cli_live import run as run_live
from webhook.audit.report import run_audit
from webhook.cli import main
from webhook.commands.what_if import WhatIf, state_of, what_if
from webhook.config import GuardConfig
from webhook.engine import Engine
from webhook.state.files import load_state, load_state_objects
from webhook.state.snapshot import write_state_file

HOMELAB = Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml"
NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
NOW_TEXT = "2026-10-30T12:00:00Z"
PASSTHROUGH_LABEL = "label=omen1:nvidia.com/gpu.workload.config=vm-passthrough"


@pytest.fixture(scope="module")
def homelab() -> list[JSONObject]:
    return [item.obj for item in load_state_objects([str(HOMELAB)])[1]]


def ask(objects: list[JSONObject], *events: str) -> WhatIf:
    return what_if(Engine(GuardConfig()), objects, [parse_event(e) for e in events], NOW)


def subjects(findings: Any) -> set[tuple[str, str]]:
    return {
        (f.verdict.policy, f"{f.verdict.resource.kind} {f.verdict.resource.name}") for f in findings
    }


@pytest.mark.parametrize(
    ("event", "appear", "disappear"),
    [
        (
            "node-down=tower1",
            {("passthrough-without-ready-provider", "VirtualMachine win11-gaming")},
            {("sole-provider", "Node tower1")},
        ),
        ("cordon=omen1", set(), {("sole-provider", "Node omen1")}),
        (
            "drain=tower1",
            {("passthrough-without-ready-provider", "VirtualMachine win11-gaming")},
            {("sole-provider", "Node tower1")},
        ),
        (
            PASSTHROUGH_LABEL,
            {
                ("gpu-pod-on-passthrough-node", "Pod jupyter-alice"),
                ("gpu-pod-on-passthrough-node", "Pod train-llama-0"),
            },
            set(),
        ),
    ],
)
def test_an_event_on_the_home_lab_makes_the_expected_findings_appear_and_disappear(
    homelab: list[JSONObject],
    event: str,
    appear: set[tuple[str, str]],
    disappear: set[tuple[str, str]],
) -> None:
    result = ask(homelab, event)
    assert appear <= subjects(result.appears)
    assert disappear <= subjects(result.disappears)
    assert not subjects(result.appears) & subjects(result.real.findings)


def test_relabelling_omen1_to_vm_passthrough_shows_the_deny_admission_would_give(
    homelab: list[JSONObject],
) -> None:
    result = ask(homelab, PASSTHROUGH_LABEL)
    (admission,) = result.admission
    assert not admission.decision.allowed
    assert "workload-switch-with-gpu-pods" in {v.policy for v in admission.decision.denials}


def test_a_relabel_after_draining_the_node_is_judged_on_the_drained_state(
    homelab: list[JSONObject],
) -> None:
    (admission,) = ask(homelab, "drain=omen1", PASSTHROUGH_LABEL).admission
    assert "workload-switch-with-gpu-pods" not in {v.policy for v in admission.decision.denials}


def with_eviction_strategy(objects: list[JSONObject], strategy: str) -> list[JSONObject]:
    edited = copy.deepcopy(objects)
    for obj in edited:
        if group_kind_of(obj) == VIRTUAL_MACHINE_INSTANCE:
            obj["spec"]["evictionStrategy"] = strategy
    return edited


@pytest.mark.parametrize(
    ("strategy", "said", "vmi_stays"),
    [
        ("LiveMigrate", "drain of tower1 hangs", True),
        ("None", "drain of tower1 stops VirtualMachineInstance vms/win11-gaming", False),
        ("LiveMigrateIfPossible", "it must start elsewhere", False),
    ],
)
def test_draining_a_node_with_a_passthrough_vm_says_what_its_eviction_strategy_does(
    homelab: list[JSONObject], strategy: str, said: str, vmi_stays: bool
) -> None:
    objects = with_eviction_strategy(homelab, strategy)
    outcome = apply_events(objects, [parse_event("drain=tower1")], NOW)
    assert any(said in note and strategy in note for note in outcome.notes), outcome.notes
    vmis = {
        o["metadata"]["name"]
        for o in outcome.objects
        if group_kind_of(o) == VIRTUAL_MACHINE_INSTANCE
    }
    assert ("win11-gaming" in vmis) is vmi_stays


@pytest.mark.parametrize(
    "events",
    [
        ("node-down=tower1",),
        ("cordon=omen1",),
        ("drain=tower1",),
        (PASSTHROUGH_LABEL, "drain=omen1"),
    ],
)
def test_a_what_if_audit_equals_auditing_the_edited_state_file_directly(
    homelab: list[JSONObject], tmp_path: Path, events: tuple[str, ...]
) -> None:
    edited = apply_events(homelab, [parse_event(e) for e in events], NOW).objects
    path = tmp_path / "edited.yaml"
    write_state_file(edited, str(path))
    engine = Engine(GuardConfig())
    direct = run_audit(engine, load_state([str(path)]), NOW).to_json()
    assert ask(homelab, *events).hypothetical.to_json() == direct
    assert run_audit(engine, state_of(homelab), NOW).to_json() != direct


def test_the_snapshot_a_what_if_reads_is_never_modified(homelab: list[JSONObject]) -> None:
    before = copy.deepcopy(homelab)
    ask(homelab, "node-down=omen1", "drain=tower1", PASSTHROUGH_LABEL)
    assert homelab == before


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--state", str(HOMELAB), "--now", NOW_TEXT, *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("event", "said"),
    [
        ("reboot=omen1", "unknown event 'reboot'"),
        ("node-down=nosuchnode", "no Node 'nosuchnode'"),
        ("node-down", "expected KIND=NODE"),
        ("label=omen1:nokeyvalue", "expected label=NODE:KEY=VALUE or label=NODE:KEY-"),
    ],
)
def test_a_bad_event_exits_2_with_one_line(event: str, said: str) -> None:
    code, out, err = run_cli("-o", "text", "--what-if", event)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and said in err, err


def test_json_lists_what_appears_and_disappears_as_audit_findings_and_the_admission_verdicts() -> (
    None
):
    code, out, _ = run_cli(
        "-o", "json", "--what-if", "node-down=tower1", "--what-if", PASSTHROUGH_LABEL
    )
    document = json.loads(out)
    audit = json.loads(run_cli("-o", "json")[1])
    assert code == 1
    assert document["events"] == ["node-down=tower1", PASSTHROUGH_LABEL]
    shape = set(audit["findings"][0])
    for entry in document["appears"] + document["disappears"]:
        assert (
            set(entry) - {"since", "chain", "remediation", "durationSeconds", "duration"} <= shape
        )
    assert {"policy": "sole-provider", "resource": "tower1"} in [
        {"policy": e["policy"], "resource": e["resource"]["name"]} for e in document["disappears"]
    ]
    assert set(audit) <= set(document)
    (admission,) = document["admission"]
    assert admission["allowed"] is False
    assert admission["event"] == PASSTHROUGH_LABEL


def test_text_names_the_events_then_what_appears_and_what_disappears() -> None:
    code, out, _ = run_cli("-o", "text", "--what-if", "drain=tower1")
    lines = out.splitlines()
    assert lines[0] == "what if: drain=tower1"
    assert lines.index("appears:") < lines.index("disappears:")
    assert "win11-gaming" in out and "sole-provider" in out
    assert code == 1


def test_an_output_a_what_if_cannot_have_exits_2_with_one_line() -> None:
    code, _, err = run_cli("-o", "policyreport", "--what-if", "cordon=omen1")
    assert code == 2 and "text, json or yaml" in err and len(err.strip().splitlines()) == 1


def test_a_parse_error_names_the_event_it_could_not_read() -> None:
    with pytest.raises(WhatIfError, match="cordon"):
        parse_event("cordon=")


async def test_a_live_what_if_reads_the_cluster_and_answers_as_its_state_file_does(
    homelab_api: tuple[KubeApiDouble, str],  # noqa: F811  (the imported fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, kubeconfig = homelab_api
    events = ("--what-if", "drain=tower1", "--what-if", PASSTHROUGH_LABEL)
    live = await run_live(capsys, "audit", "--kubeconfig", kubeconfig, "--now", NOW_TEXT, *events)
    offline = run_cli(*events)
    assert live[0] == offline[0]
    assert live[1] == offline[1] and "appears:" in live[1]
    again = await run_live(capsys, "audit", "--kubeconfig", kubeconfig, "--now", NOW_TEXT)
    assert again[0] == run_cli()[0] and "sole-provider" in again[1]  # nothing was written


VGPU_SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "policies"
    / "samples"
    / "vgpu-reconfig-with-live-vms"
    / "state.yaml"
)


@pytest.mark.parametrize(
    ("event", "policy_action", "label"),
    [
        pytest.param(
            "label=gpu-a10-1:nvidia.com/vgpu.config-",
            "warn",
            None,
            id="a label removed, as kubectl writes it",
        ),
        pytest.param(
            "label=gpu-a10-1:nvidia.com/vgpu.config=A10-4Q", "deny", "A10-4Q", id="a label set"
        ),
    ],
)
def test_a_label_event_may_remove_the_label_and_is_judged_as_that_update(
    event: str, policy_action: str, label: str | None
) -> None:
    objects = [item.obj for item in load_state_objects([str(VGPU_SAMPLE)])[1]]
    parsed = parse_event(event)
    assert str(parsed) == event
    (admission,) = ask(objects, event).admission
    assert admission.update.new["metadata"]["labels"].get("nvidia.com/vgpu.config") == label
    assert [(v.policy, v.action.label) for v in admission.decision.verdicts] == [
        ("vgpu-reconfig-with-live-vms", policy_action)
    ]


@pytest.mark.parametrize(
    ("events", "hypothetical", "added"),
    [
        # omen2 is already a deny-level recovery trap: every what-if of the home lab exits 1
        (("cordon=nuc1",), 1, 0),
        (("drain=tower1",), 1, 0),
        (("node-down=tower1",), 1, 1),  # a second recovery trap appears: tower1's
        ((PASSTHROUGH_LABEL,), 1, 1),  # its admission is denied
    ],
)
def test_exit_on_added_answers_only_for_what_the_events_add(
    events: tuple[str, ...], hypothetical: int, added: int
) -> None:
    asked = [arg for event in events for arg in ("--what-if", event)]
    assert run_cli("-o", "json", *asked)[0] == hypothetical
    assert run_cli("-o", "json", *asked, "--exit-on", "added")[0] == added


DRIVER_SAMPLE = (
    Path(__file__).resolve().parents[1] / "policies" / "samples" / "driver-upgrade-waves"
)


def test_a_driver_upgrade_event_shows_the_waves_the_version_change_would_be_warned_with() -> None:
    objects = [item.obj for item in load_state_objects([str(DRIVER_SAMPLE / "state.yaml")])[1]]
    result = ask(objects, "driver-upgrade=580.95.05")
    (admission,) = result.admission
    assert str(admission.update.event) == "driver-upgrade=580.95.05"
    assert admission.decision.allowed
    (verdict,) = admission.decision.verdicts
    assert verdict.policy == "driver-upgrade-waves"
    assert verdict.message.startswith(
        "driver.version 570.172.08 -> 580.95.05 upgrades 2 nodes, up to 1 at a time in no order: "
        "gpu-1 (deletes ml/train; cannot free mon/gpu-agent-4xk2p (DaemonSet))"
    )
    assert objects[0]["spec"]["driver"]["version"] == "570.172.08"  # the snapshot is untouched
    assert not result.appears and not result.disappears


def test_a_driver_upgrade_without_a_clusterpolicy_exits_2_with_one_line() -> None:
    dra = Path(__file__).resolve().parents[1] / "examples" / "dra" / "cluster.yaml"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--state", str(dra), "--what-if", "driver-upgrade=580.95.05"])
    assert code == 2 and out.getvalue() == ""
    assert err.getvalue().strip() == (
        "gpu-guard: what-if driver-upgrade=580.95.05: no ClusterPolicy nor NVIDIADriver in the "
        "state"
    )


NVIDIA_DRIVER_STATE = [
    str(DRIVER_SAMPLE / "state.yaml"),
    str(DRIVER_SAMPLE / "nvidia-driver" / "state.yaml"),
]


def nvidia_driver_objects(dropped: str = "") -> list[JSONObject]:
    """The sample's two states as one, the later file's object winning (as ``--state`` reads
    them), without the objects of kind or name ``dropped``."""
    merged: dict[tuple[str, str], JSONObject] = {}
    for item in load_state_objects(NVIDIA_DRIVER_STATE)[1]:
        merged[(str(item.obj["kind"]), str(item.obj["metadata"]["name"]))] = item.obj
    return [o for (kind, name), o in merged.items() if dropped not in (kind, name)]


@pytest.mark.parametrize(
    ("event", "said"),
    [
        pytest.param(
            "driver-upgrade=h100:580.95.05",
            "NVIDIADriver h100 version 570.172.08 -> 580.95.05 upgrades 1 node, up to 1 at a time "
            "in no order: gpu-4 (deletes ml/llm)",
            id="an NVIDIADriver by name",
        ),
        pytest.param(
            "driver-upgrade=default:sha256:0f3e",
            "NVIDIADriver default version 570.172.08 -> sha256:0f3e upgrades 2 nodes",
            id="a digest after the name",
        ),
    ],
)
def test_a_driver_upgrade_names_an_nvidiadriver_as_name_colon_version(
    event: str, said: str
) -> None:
    (admission,) = ask(nvidia_driver_objects(), event).admission
    (verdict,) = admission.decision.verdicts
    assert verdict.message.startswith(said), verdict.message


@pytest.mark.parametrize(
    ("drop", "event", "line"),
    [
        pytest.param(
            "",
            "driver-upgrade=580.95.05",
            "NVIDIADrivers run the driver (default, h100): name one, driver-upgrade=NAME:VERSION",
            id="several NVIDIADrivers and no name",
        ),
        pytest.param(
            "",
            "driver-upgrade=a100:580.95.05",
            "no NVIDIADriver 'a100' in the state",
            id="a name not there",
        ),
        pytest.param(
            "NVIDIADriver",
            "driver-upgrade=580.95.05",
            "no NVIDIADriver in the state",
            id="delegated to NVIDIADrivers there are none of",
        ),
    ],
)
def test_a_driver_upgrade_that_names_no_one_driver_says_so_in_one_line(
    drop: str, event: str, line: str
) -> None:
    with pytest.raises(WhatIfError) as caught:
        apply_events(nvidia_driver_objects(drop), [parse_event(event)], NOW)
    assert str(caught.value) == f"what-if {event}: {line}"


def test_a_driver_upgrade_goes_to_the_one_nvidiadriver_when_they_run_the_driver() -> None:
    (admission,) = ask(nvidia_driver_objects("h100"), "driver-upgrade=580.95.05").admission
    assert admission.update.new["kind"] == "NVIDIADriver"
    assert admission.update.new["spec"]["version"] == "580.95.05"
    assert admission.update.old["spec"]["version"] == "570.172.08"
    (verdict,) = admission.decision.verdicts
    assert "NVIDIADriver default version 570.172.08 -> 580.95.05 upgrades" in verdict.message
