"""The command line: exit codes, what kubectl would print, JSON contracts, bad input exits 2."""

from __future__ import annotations

import asyncio
import base64
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from tests.fakeapi import SECRET, VALIDATING, FakeApi
from webhook.admission.slow_clients import ClientTimeouts
from webhook.certs.sync import decode_secret
from webhook.cli import build_parser, main
from webhook.commands.policies import policy_reference
from webhook.commands.serve import client_timeouts
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.files import read_objects

ROOT = Path(__file__).resolve().parents[1]
HOMELAB = ROOT / "examples" / "homelab"
STATE = str(HOMELAB / "cluster.yaml")
CHANGES = HOMELAB / "changes"
NOW = "2026-10-30T12:00:00Z"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "change, code, expected",
    [
        (
            "01-switch-omen1-to-vm-passthrough.yaml",
            1,
            'admission webhook "validate.gpu-guard.io" denied the request: '
            "[workload-switch-with-gpu-pods]",
        ),
        (
            "02-new-vm-needs-rtx5090.yaml",
            0,
            "Warning: [passthrough-without-ready-provider] nvidia.com/GB202_GEFORCE_RTX_5090",
        ),
        (
            "03-permit-h100-without-hardware.yaml",
            0,
            "Warning: [permitted-device-without-hardware] pciHostDevices[2] 10de:2330",
        ),
        ("04-vm-with-miscased-device.yaml", 0, "did you mean nvidia.com/GA102_GEFORCE_RTX_3090?"),
        ("05-safe-relabel-omen2-container.yaml", 0, "node/omen2 configured (server dry run)"),
    ],
    ids=[
        "switching a node with CUDA pods is denied",
        "a VM whose only provider is dead is warned",
        "permitting an H100 nobody has is warned",
        "a miscased deviceName gets a did-you-mean",
        "relabelling the dead node to container is allowed",
    ],
)
def test_check_prints_what_kubectl_would_show_and_exits_by_verdict(
    capsys: pytest.CaptureFixture[str], change: str, code: int, expected: str
) -> None:
    got, out, err = run(capsys, "check", "-f", str(CHANGES / change), "--state", STATE)
    assert got == code, err
    assert expected in out


def test_check_json_carries_policy_action_resource_and_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = [
        str(CHANGES / "01-switch-omen1-to-vm-passthrough.yaml"),
        str(CHANGES / "02-new-vm-needs-rtx5090.yaml"),
    ]
    code, out, _ = run(capsys, "check", "-o", "json", "-f", *files, "--state", STATE)
    assert code == 1
    report = orjson.loads(out)
    assert report["allowed"] is False
    first, second = report["results"]
    assert first["operation"] == "UPDATE" and first["allowed"] is False
    verdict = first["verdicts"][0]
    assert verdict["policy"] == "workload-switch-with-gpu-pods"
    assert verdict["action"] == "deny"
    assert verdict["resource"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "namespace": "",
        "name": "omen1",
    }
    assert "ml/train-llama-0" in verdict["message"]
    assert second["operation"] == "CREATE" and second["allowed"] is True
    assert second["verdicts"][0]["action"] == "warn"


def test_audit_finds_both_vms_stuck_for_112_days(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", "json")
    assert code == 1  # deny level: the recovery trap on omen2
    findings = orjson.loads(out)["findings"]
    stuck = {
        f["resource"]["name"]: f
        for f in findings
        if f["policy"] == "passthrough-without-ready-provider"
    }
    assert set(stuck) == {"gpu-fedora", "rhel9-gpu-vm"}
    for finding in stuck.values():
        assert finding["duration"] == "112 days"
        assert finding["since"].startswith("2026-07-10")
        assert any("omen2: NotReady since 2026-07-10" in link for link in finding["chain"])


def test_audit_table_reads_as_a_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW)
    assert code == 1
    assert "VirtualMachine vms/gpu-fedora  for 112 days (since 2026-07-10)" in out


def test_audit_lists_dead_permitted_entries_and_exits_1_at_deny_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubevirt = yaml.safe_load((CHANGES / "03-permit-h100-without-hardware.yaml").read_text())
    kubevirt["metadata"]["namespace"] = "kubevirt"
    state = tmp_path / "kv.yaml"
    state.write_text(yaml.safe_dump(kubevirt))
    config = tmp_path / "guard.yaml"
    config.write_text("policies:\n  permitted-device-without-hardware: {action: deny}\n")
    code, out, _ = run(
        capsys,
        "audit",
        "--state",
        STATE,
        str(state),
        "--config",
        str(config),
        "--now",
        NOW,
        "-o",
        "yaml",
    )
    assert code == 1
    report = yaml.safe_load(out)
    dead = [f for f in report["findings"] if f["policy"] == "permitted-device-without-hardware"]
    assert [f["action"] for f in dead] == ["deny"]
    assert "10de:2330" in dead[0]["message"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["audit", "--state", "/nonexistent.yaml"], "/nonexistent.yaml: cannot read"),
        (["audit", "--state", STATE, "--now", "yesterday"], "--now: not an RFC 3339 time"),
        (["audit", "--state", STATE, "--now", "2026-10-30T12:00:00"], "--now: give a zone"),
        (["check", "-f", "/nonexistent.yaml", "--state", STATE], "/nonexistent.yaml: cannot read"),
        (["audit", "--state", STATE, "--config", "/nonexistent.yaml"], "cannot read"),
    ],
    ids=[
        "a missing state file",
        "a --now that is not a time",
        "a --now without a zone",
        "a missing change file",
        "a missing config file",
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_a_change_with_a_malformed_field_is_named_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "vm.yaml"
    change.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "metadata": {"name": "broken", "namespace": "vms"},
                "spec": {
                    "runStrategy": "Always",
                    "template": {"spec": {"domain": {"devices": {"gpus": "nvidia.com/x"}}}},
                },
            }
        )
    )
    code, _, err = run(capsys, "check", "-f", str(change), "--state", STATE)
    assert code == 2
    assert err.strip() == (
        f"gpu-guard: {change}: VirtualMachine vms/broken: "
        "spec.template.spec.domain.devices.gpus: expected a list, got string"
    )


VGPU_SAMPLES = ROOT / "policies" / "samples" / "vgpu-reconfig-with-live-vms"


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({"nvidia.com/vgpu.config": None}, id="a null alone"),
        pytest.param({"nvidia.com/vgpu.config": None, "team": "a"}, id="beside a label set"),
    ],
)
def test_a_change_file_removes_a_label_with_null_as_a_merge_patch_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: dict[str, str | None]
) -> None:
    change = tmp_path / "node.yaml"
    change.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-a10-1", "labels": labels},
            }
        )
    )
    state = str(VGPU_SAMPLES / "state.yaml")
    code, out, err = run(capsys, "check", "-f", str(change), "--state", state, "-o", "json")
    assert (code, err) == (0, "")
    (result,) = orjson.loads(out)["results"]
    assert result["operation"] == "UPDATE"
    (verdict,) = result["verdicts"]
    assert verdict["policy"] == "vgpu-reconfig-with-live-vms"
    assert verdict["action"] == "warn"
    assert "nvidia.com/vgpu.config removed on gpu-a10-1 (was A10-12Q)" in verdict["message"]


def test_a_null_in_a_created_object_is_dropped_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change = tmp_path / "node.yaml"
    change.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "new", "labels": {"a": None}}}
        )
    )
    state = str(VGPU_SAMPLES / "state.yaml")
    code, out, err = run(capsys, "check", "-f", str(change), "--state", state, "-o", "json")
    assert (code, err) == (0, "")
    (result,) = orjson.loads(out)["results"]
    assert (result["operation"], result["verdicts"]) == ("CREATE", [])


def test_an_unknown_flag_exits_2() -> None:
    with pytest.raises(SystemExit) as caught:
        main(["audit", "--frobnicate"])
    assert caught.value.code == 2


@pytest.mark.parametrize(
    "value, reason", [("0", "must be at least 1, not 0"), ("many", "not a whole number: 'many'")]
)
def test_a_max_connections_that_is_not_a_positive_count_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    argv = ["serve", "--tls-cert", "c", "--tls-key", "k", "--max-connections", value]
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert f"argument --max-connections: {reason}" in capsys.readouterr().err


SERVE = ["serve", "--tls-cert", "c", "--tls-key", "k"]
SLOW_CLIENT_FLAGS = ["--headers-timeout", "--body-timeout", "--idle-timeout"]


@pytest.mark.parametrize("flag", SLOW_CLIENT_FLAGS)
@pytest.mark.parametrize(
    "value, reason",
    [
        ("0", "must be a positive number of seconds, not 0"),
        ("-1", "must be a positive number of seconds, not -1"),
        ("nan", "must be a positive number of seconds, not nan"),
        ("soon", "not a number of seconds: 'soon'"),
    ],
)
def test_a_slow_client_limit_that_is_not_a_positive_time_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, reason: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*SERVE, flag, value])
    assert caught.value.code == 2
    assert f"argument {flag}: {reason}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, reason",
    [
        ("-1", "must be 0 or a positive number of seconds, not -1"),
        ("nan", "must be 0 or a positive number of seconds, not nan"),
        ("inf", "must be 0 or a positive number of seconds, not inf"),
        ("a while", "not a number of seconds: 'a while'"),
    ],
)
def test_a_stale_after_that_is_not_a_time_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*SERVE, "--stale-after", value])
    assert caught.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the usage, one line
    assert last == f"gpu-guard serve: error: argument --stale-after: {reason}"


@pytest.mark.parametrize("value, seconds", [("0", 0.0), ("12.5", 12.5)])
def test_a_stale_after_of_zero_or_more_reaches_the_live_state(value: str, seconds: float) -> None:
    assert build_parser().parse_args([*SERVE, "--stale-after", value]).stale_after == seconds
    assert build_parser().parse_args(SERVE).stale_after == DEFAULT_STALE_AFTER


def test_the_slow_client_limits_reach_the_server_and_help_shows_their_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert client_timeouts(parser.parse_args(SERVE)) == ClientTimeouts()
    given = parser.parse_args([*SERVE, "--headers-timeout", "0.5", "--idle-timeout", "20"])
    assert client_timeouts(given) == ClientTimeouts(headers=0.5, idle=20)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    defaults = ClientTimeouts()
    for flag, default in zip(
        SLOW_CLIENT_FLAGS, (defaults.headers, defaults.body, defaults.idle), strict=True
    ):
        assert re.search(rf"{flag} SECONDS [^-]*\(default {default}\)", usage), flag


def test_policies_prints_every_policy_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "policies")
    assert code == 0
    assert out == policy_reference()
    for policy_id, action in [
        ("workload-switch-with-gpu-pods", "deny"),
        ("passthrough-without-ready-provider", "warn"),
        ("permitted-device-without-hardware", "warn"),
    ]:
        assert f"## `{policy_id}`" in out
        section = out.split(f"## `{policy_id}`")[1].split("## ")[0]
        assert f"default action: **{action}**" in section


def test_certs_writes_a_ca_and_a_serving_pair_with_private_keys_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(capsys, "certs", "--out", str(tmp_path), "--host", "127.0.0.1")
    assert code == 0
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml", "ca-bundle.b64"):
        assert (tmp_path / name).is_file()
    for secret in ("tls.key", "ca.key", "secret.yaml"):
        assert (tmp_path / secret).stat().st_mode & 0o777 == 0o600
    # The Secret is the one `serve --manage-certs` reads, so it adopts and renews it.
    material = decode_secret(yaml.safe_load((tmp_path / "secret.yaml").read_text()))
    assert material is not None
    assert material.serving.cert_pem == (tmp_path / "tls.crt").read_bytes()
    bundle = (tmp_path / "ca-bundle.b64").read_text().strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()


async def test_certs_apply_writes_the_secret_and_both_cabundles_in_the_cluster(
    fake_api: tuple[FakeApi, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = fake_api
    code = await asyncio.to_thread(main, ["certs", "--apply", "--kubeconfig", kubeconfig])
    out = capsys.readouterr().out
    assert code == 0
    assert "no certificates yet" in out
    assert "a webhook configuration is missing" in out  # the fake has no mutating one
    assert SECRET in fake.objects
    hooks = fake.objects[VALIDATING]["webhooks"]
    assert all(h["clientConfig"]["caBundle"] for h in hooks)


def cluster_client_imported(script: str) -> bool:
    """Runs ``script`` in a fresh interpreter; whether kubernetes_asyncio got imported."""
    probe = f"{script}\nimport sys\nprint('kubernetes_asyncio' in sys.modules, file=sys.stderr)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1] == "True"


def test_importing_the_cli_leaves_the_cluster_client_unimported() -> None:
    # 0.5 s and 60 MiB that `serve --state`, `check --state` and `audit --state` never use.
    assert not cluster_client_imported("import webhook.cli")


def test_commands_on_state_files_never_import_the_cluster_client(tmp_path: Path) -> None:
    listed = tmp_path / "cluster.json"  # a JSON List takes the streaming loader
    items = [item.obj for item in read_objects(STATE)]
    listed.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    change = CHANGES / "01-switch-omen1-to-vm-passthrough.yaml"
    runs = [
        ["audit", "--state", STATE, "-o", "json", "--now", NOW],
        ["audit", "--state", str(listed), "-o", "json", "--now", NOW],
        ["check", "-f", str(change), "--state", STATE, "-o", "json"],
    ]
    script = (
        "import contextlib, io\n"
        "from webhook.cli import main\n"
        f"for argv in {runs!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(argv) in (0, 1), argv\n"
    )
    assert not cluster_client_imported(script)
