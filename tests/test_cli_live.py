"""The command line against a live cluster (the API double): check, audit, snapshot round trip."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from tests import FIXTURES
from tests.builders import gpu_pod, kubevirt, node, vm
from tests.conftest import require_fixture
from tests.kubeapi import KubeApiDouble
from tests.test_cli import CHANGES, NOW, STATE
from webhook.cli import main
from webhook.state.files import read_objects
from webhook.state.live import LiveState


@pytest.fixture
async def homelab_api(tmp_path: Path) -> AsyncIterator[tuple[KubeApiDouble, str]]:
    """The API double serving the home-lab example, and a kubeconfig that points at it."""
    async with KubeApiDouble() as api:
        for item in read_objects(STATE):
            api.create(item.obj)
        yield api, str(api.kubeconfig(tmp_path / "kubeconfig"))


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_snapshot_reproduces_the_live_audit_offline(
    homelab_api: tuple[KubeApiDouble, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = homelab_api
    live_code, live_out, _ = await run(
        capsys, "audit", "--kubeconfig", kubeconfig, "--now", NOW, "-o", "json"
    )
    snapshot = tmp_path / "dump.json"
    code, _, err = await run(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(snapshot))
    assert code == 0, err
    assert "wrote 45 objects" in err
    for item in orjson.loads(snapshot.read_bytes())["items"]:
        assert "managedFields" not in item["metadata"]
    file_code, file_out, _ = await run(
        capsys, "audit", "--state", str(snapshot), "--now", NOW, "-o", "json"
    )
    assert (live_code, live_out) == (file_code, file_out)
    stuck = [
        f["resource"]["name"]
        for f in orjson.loads(live_out)["findings"]
        if f["policy"] == "passthrough-without-ready-provider"
    ]
    assert stuck == ["gpu-fedora", "rhel9-gpu-vm"]


async def test_check_against_the_live_cluster_judges_updates_against_live_objects(
    homelab_api: tuple[KubeApiDouble, str], capsys: pytest.CaptureFixture[str]
) -> None:
    api, kubeconfig = homelab_api
    change = str(CHANGES / "01-switch-omen1-to-vm-passthrough.yaml")
    code, out, _ = await run(capsys, "check", "-f", change, "--kubeconfig", kubeconfig)
    assert code == 1
    assert "denied the request: [workload-switch-with-gpu-pods]" in out
    for pod_name in ("train-llama-0", "jupyter-alice"):
        api.delete("Pod", "ml", pod_name)
    code, out, _ = await run(capsys, "check", "-f", change, "--kubeconfig", kubeconfig)
    assert code == 0
    assert out.splitlines()[0] == "node/omen1 configured (server dry run)"


async def test_a_snapshot_skips_groups_that_are_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with KubeApiDouble() as api:
        api.create(node("n1", allocatable={"nvidia.com/gpu": "1"}))
        api.create(gpu_pod("p", "n1"))
        api.create(vm("v", gpus=["nvidia.com/x"]))
        api.create(kubevirt())
        api.uninstall("kubevirt.io")
        out_file = tmp_path / "dump.yaml"
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        code, _, err = await run(
            capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(out_file)
        )
    assert code == 0, err
    kinds = sorted(item["kind"] for item in yaml.safe_load(out_file.read_text())["items"])
    assert kinds == ["Node", "Pod"]


async def snapshot_of_loaded(
    state_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Path:
    """``gpu-guard snapshot`` (JSON) of the API double loaded with ``state_file``'s objects."""
    async with KubeApiDouble() as api:
        for item in read_objects(str(state_file)):
            api.create(item.obj)
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        out_file = tmp_path / "dump.json"
        code, _, err = await run(
            capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(out_file)
        )
    assert code == 0, err
    return out_file


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def dead_kubeconfig(path: Path, port: int) -> str:
    """A kubeconfig whose API server is a loopback port nobody listens on."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dead",
                "clusters": [{"name": "dead", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
            }
        )
    )
    return str(path)


@pytest.fixture
def request_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The timeout of every request a LiveState sends, in order."""
    sent: list[Any] = []
    real_get = LiveState._get

    async def get(self: LiveState, path: str, params: dict[str, str], timeout: Any) -> Any:
        sent.append(timeout)
        return await real_get(self, path, params, timeout)

    monkeypatch.setattr(LiveState, "_get", get)
    return sent


@pytest.mark.parametrize(
    "argv",
    [
        ["audit"],
        ["check", "-f", str(CHANGES / "02-new-vm-needs-rtx5090.yaml")],
        ["snapshot", "-o", "-"],
    ],
    ids=["audit", "check", "snapshot"],
)
async def test_an_unreachable_cluster_fails_at_the_first_request_in_one_line_without_warnings(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request_timeouts: list[Any],
    argv: list[str],
) -> None:
    port = closed_port()
    kubeconfig = dead_kubeconfig(tmp_path / "kubeconfig", port)
    code, out, err = await run(capsys, *argv, "--kubeconfig", kubeconfig)
    assert (code, out) == (2, "")
    assert err.startswith(
        f"gpu-guard: cannot reach the API server at http://127.0.0.1:{port} (connection refused)"
    )
    assert err.count("\n") == 1 and "WARNING" not in err
    (timeout,) = request_timeouts  # one request, no retry
    assert isinstance(timeout, aiohttp.ClientTimeout)
    assert timeout.sock_connect is not None and timeout.sock_connect <= 10
    assert timeout.sock_read is not None and timeout.sock_read <= 10


async def test_a_cluster_slower_than_the_sync_timeout_says_what_it_waited_for(
    homelab_api: tuple[KubeApiDouble, str], capsys: pytest.CaptureFixture[str]
) -> None:
    api, kubeconfig = homelab_api
    api.set_latency(2.0)
    code, _, err = await run(capsys, "audit", "--kubeconfig", kubeconfig, "--sync-timeout", "0.5")
    assert code == 2
    assert err.startswith(
        "gpu-guard: the cluster did not sync within 0.5 s: waiting for the first sync of Node, "
    )
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv", [["audit"], ["snapshot", "-o", "-"]], ids=["audit", "snapshot"])
async def test_no_credentials_at_all_names_what_was_tried_and_points_at_state(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = await run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == (
        "gpu-guard: no cluster credentials: tried --kubeconfig (not given), $KUBECONFIG (not "
        f"set), {tmp_path}/.kube/config (none), the in-cluster service account (not in a pod: "
        "$KUBERNETES_SERVICE_HOST not set); give --kubeconfig PATH, or --state FILE to read "
        "saved objects (kubectl get ... -o yaml, or gpu-guard snapshot)\n"
    )


@pytest.mark.parametrize("variable", ["", "KUBECONFIG"], ids=["--kubeconfig", "$KUBECONFIG"])
async def test_a_kubeconfig_that_does_not_exist_is_named_with_where_it_came_from(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    missing = str(tmp_path / "missing")
    if variable:
        monkeypatch.setenv(variable, missing)
        argv = ["audit"]
    else:
        argv = ["audit", "--kubeconfig", missing]
    code, _, err = await run(capsys, *argv)
    assert code == 2
    source = "$KUBECONFIG" if variable else "--kubeconfig"
    assert err == (
        f"gpu-guard: cannot load cluster credentials: {missing} ({source}): no such file\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--sync-timeout", "1"],
        ["snapshot", "-o", "-"],
        ["serve", "--tls-cert", "tls.crt", "--tls-key", "tls.key", "--port", "8443"],
        ["certs", "--apply"],
    ],
    ids=["audit", "snapshot", "serve", "certs --apply"],
)
async def test_a_kubeconfig_that_cannot_be_read_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = await run(capsys, *argv, "--kubeconfig", str(tmp_path / "missing"))
    assert code == 2
    assert err.startswith("gpu-guard: cannot load cluster credentials")


DRA_OBJECTS = FIXTURES / "dra" / "objects.yaml"


async def test_a_snapshot_holds_the_dra_objects_and_reads_back_as_the_saved_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_fixture(DRA_OBJECTS)
    from webhook.state.files import load_state

    out_file = await snapshot_of_loaded(DRA_OBJECTS, tmp_path, capsys)
    kinds = {item["kind"] for item in orjson.loads(out_file.read_bytes())["items"]}
    assert {"DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"} <= kinds
    snapshot, saved = load_state([str(out_file)]), load_state([str(DRA_OBJECTS)])
    assert snapshot.counts() == saved.counts()
    assert snapshot.device_classes() == saved.device_classes()
    assert snapshot.resource_slices() == saved.resource_slices()
    assert snapshot.claims() == saved.claims()
    assert snapshot.claim_templates() == saved.claim_templates()


async def test_a_snapshot_holds_the_gpucluster_and_reads_back_as_the_saved_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.state.files import load_state

    example = Path(__file__).resolve().parents[1] / "examples" / "dra" / "gpucluster.yaml"
    out_file = await snapshot_of_loaded(example, tmp_path, capsys)
    kinds = [item["kind"] for item in orjson.loads(out_file.read_bytes())["items"]]
    assert kinds == ["GPUCluster"]
    snapshot, saved = load_state([str(out_file)]), load_state([str(example)])
    assert snapshot.gpu_clusters() == saved.gpu_clusters()
    assert [c.dra_feature_gates for c in snapshot.gpu_clusters()] == [
        ("DeviceMetadata", "PassthroughSupport")
    ]
