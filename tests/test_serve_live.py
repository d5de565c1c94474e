"""``gpu-guard serve`` against a live API, as a real process: readiness, decisions, certificates."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import aiohttp
import orjson

from tests.fakeapi import SECRET, VALIDATING, FakeApi
from tests.kubeapi import KubeApiDouble
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.certs.issue import make_ca, make_serving_cert, write_bundle


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def start_serve(
    *args: str,
    stderr: int | IO[bytes] = subprocess.PIPE,
    env: Mapping[str, str] | None = None,
    log_level: str = "INFO",
) -> tuple[subprocess.Popen[bytes], int]:
    """``gpu-guard serve`` on a free loopback port; its log to ``stderr`` (a pipe, or a file for
    a long run whose log no one reads until the end)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "--log-level",
            log_level,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--drain-delay",
            "0",
            *args,
        ],
        stderr=stderr,
        env=None if env is None else {**os.environ, **env},
    )
    return process, port


async def stop(process: subprocess.Popen[bytes]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, err = await asyncio.to_thread(process.communicate, timeout=30)
    return err.decode()


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url) as response:
            return response.status, await response.text()
    except aiohttp.ClientError:
        return 0, ""


async def poll(session: aiohttp.ClientSession, url: str, status: int, timeout: float = 20) -> str:
    async with asyncio.timeout(timeout):
        while True:
            got, text = await get(session, url)
            if got == status:
                return text
            await asyncio.sleep(0.05)


async def test_live_serve_is_not_ready_until_synced_then_denies_on_live_state(
    homelab_api: KubeApiDouble, tmp_path: Path
) -> None:
    ca = make_ca()
    write_bundle(str(tmp_path), ca, make_serving_cert(ca, ["127.0.0.1"]))
    homelab_api.set_latency(1.5)  # the first lists are slow: readiness must wait for them
    process, port = await start_serve(
        "--kubeconfig",
        str(homelab_api.kubeconfig(tmp_path / "kubeconfig")),
        "--tls-cert",
        str(tmp_path / "tls.crt"),
        "--tls-key",
        str(tmp_path / "tls.key"),
    )
    base = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            waiting = await poll(session, f"{base}/readyz", 503)
            assert waiting.startswith("not ready: waiting for the first sync of")
            assert (await get(session, f"{base}/healthz"))[0] == 200  # alive all along
            homelab_api.set_latency(0)
            await poll(session, f"{base}/readyz", 200)
            change = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": "omen1",
                    "labels": {"nvidia.com/gpu.workload.config": "vm-passthrough"},
                },
            }
            node = homelab_api.get("Node", None, "omen1")
            request = proposed_request(change, node, dry_run=False)
            async with session.post(
                f"{base}/validate", data=orjson.dumps(review_of(request)), headers=REVIEW_HEADERS
            ) as r:
                answer = orjson.loads(await r.read())["response"]
            assert answer["allowed"] is False
            assert answer["status"]["message"].startswith("[workload-switch-with-gpu-pods]")
            metrics = (await get(session, f"{base}/metrics"))[1]
            assert "gpu_guard_api_reachable 1.0" in metrics
            assert "gpu_guard_api_outages_total 0.0" in metrics
    finally:
        err = await stop(process)
    assert process.returncode == 0, err
    assert "Traceback" not in err


async def test_managed_certificates_are_created_served_and_injected(
    fake_api: tuple[FakeApi, str],
    tmp_path: Path,
) -> None:
    fake, kubeconfig = fake_api
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    process, port = await start_serve(
        "--kubeconfig",
        kubeconfig,
        "--manage-certs",
        "--namespace",
        "gpu-guard",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    )
    try:
        async with asyncio.timeout(20):
            while SECRET not in fake.objects or not cert.exists():
                assert process.poll() is None, "serve exited"
                await asyncio.sleep(0.05)
        bundle = base64.b64decode(fake.objects[SECRET]["data"]["ca.crt"])
        hooks = fake.objects[VALIDATING]["webhooks"]
        assert {h["clientConfig"]["caBundle"] for h in hooks} == {base64.b64encode(bundle).decode()}
        assert key.stat().st_mode & 0o777 == 0o600
        # The API server's view: the Service name, verified against the injected caBundle.
        context = ssl.create_default_context(cadata=bundle.decode())
        async with asyncio.timeout(20):
            while True:
                try:
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", port, ssl=context, server_hostname="gpu-guard.gpu-guard.svc"
                    )
                    break
                except OSError:
                    await asyncio.sleep(0.05)
        writer.close()
        await writer.wait_closed()
        del reader
    finally:
        err = await stop(process)
    assert process.returncode == 0, err
