"""--device-taint-rules / --no-device-taint-rules: whether DeviceTaintRules act, told on the
command line of serve, check, audit and inventory; the flag wins over guard.yaml's
dra.deviceTaintRules, at start and at every reload of the file; without either, rules do not
act."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import orjson
import pytest

from policies.cluster.kinds import WATCHED_KINDS
from policies.diagnoses.tainted_devices import WORKLOAD_ON_TAINTED_DEVICE
from tests.builders import node
from tests.dra_builders import claim_pod, gpu, resource_claim, resource_slice
from tests.test_cli import run
from tests.test_device_taints import rule
from webhook.cli import build_parser
from webhook.config import load_config
from webhook.engine import Engine
from webhook.reload import reload_config
from webhook.state.snapshot import write_state_file

ON, OFF = "dra: {deviceTaintRules: true}\n", "dra: {deviceTaintRules: false}\n"
#: A pod on dgx-1's gpu-0, and a NoExecute rule over dgx-1's pool: evicted when rules act.
CLUSTER = [
    node("dgx-1"),
    resource_slice("dgx-1-gpus", "dgx-1", [gpu("gpu-0")]),
    resource_claim("train-gpu", allocated=("dgx-1", "dgx-1", "gpu-0"), reserved_for=["train-0"]),
    claim_pod("train-0", "dgx-1", claim="train-gpu"),
    rule("drain", pool="dgx-1"),
]
CASES = [
    pytest.param(None, [], False, id="neither: rules do not act"),
    pytest.param(ON, [], True, id="the file's true"),
    pytest.param(None, ["--device-taint-rules"], True, id="the flag alone"),
    pytest.param(ON, ["--no-device-taint-rules"], False, id="--no- wins over the file's true"),
    pytest.param(OFF, ["--device-taint-rules"], True, id="the flag wins over the file's false"),
]


def flag_of(argv: list[str]) -> bool | None:
    flag: bool | None = (
        build_parser().parse_args(["audit", "--state", "s", *argv]).device_taint_rules
    )
    return flag


@pytest.mark.parametrize(("file", "argv", "act"), CASES)
def test_the_flag_wins_over_the_file(
    tmp_path: Path, file: str | None, argv: list[str], act: bool
) -> None:
    path = None
    if file is not None:
        path = tmp_path / "guard.yaml"
        path.write_text(file)
    config = load_config(None if path is None else str(path), flag_of(argv))
    assert config.device_taint_rules is act


@pytest.mark.parametrize(("file", "argv", "act"), CASES)
def test_the_audit_reports_a_pod_under_a_noexecute_rule_only_where_rules_act(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str | None, argv: list[str], act: bool
) -> None:
    state = tmp_path / "cluster.yaml"  # as gpu-guard snapshot writes it: every kind listed
    write_state_file(CLUSTER, str(state), WATCHED_KINDS)
    config = []
    if file is not None:
        (tmp_path / "guard.yaml").write_text(file)
        config = ["--config", str(tmp_path / "guard.yaml")]
    _, out, err = run(capsys, "audit", "--state", str(state), "-o", "json", *config, *argv)
    found = {f["policy"] for f in orjson.loads(out)["findings"]}
    assert (WORKLOAD_ON_TAINTED_DEVICE in found) is act, err


@pytest.mark.parametrize("command", ["serve", "check", "audit", "inventory"])
def test_every_command_that_judges_takes_the_flag_and_leaves_it_unset_by_default(
    command: str,
) -> None:
    required = {"serve": ["--tls-cert", "c", "--tls-key", "k"], "check": ["-f", "x.yaml"]}
    argv = [command, *required.get(command, [])]
    parse = build_parser().parse_args
    assert parse(argv).device_taint_rules is None
    assert parse([*argv, "--device-taint-rules"]).device_taint_rules is True
    assert parse([*argv, "--no-device-taint-rules"]).device_taint_rules is False


async def test_a_reload_of_the_file_keeps_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "guard.yaml"
    path.write_text(ON)
    load = partial(load_config, device_taint_rules=False)
    engine = Engine(load(str(path)))
    task = asyncio.create_task(reload_config(engine, str(path), 0.01, load=load))
    await asyncio.sleep(0.05)  # the watcher has read the file's first version
    try:
        path.write_text(ON + "policies: {workload-switch-with-gpu-pods: {action: warn}}\n")
        async with asyncio.timeout(5):
            while "workload-switch-with-gpu-pods" not in engine.config.actions:
                await asyncio.sleep(0.01)
        assert engine.config.device_taint_rules is False
    finally:
        task.cancel()
