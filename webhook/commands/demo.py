"""``gpu-guard demo``: the home-lab incident, caught. What ``make demo`` runs.

It makes a throw-away CA and serving certificate, starts ``gpu-guard serve`` as its own process on
127.0.0.1 against the example state, sends each change file as the AdmissionReview the API
server would send, prints each answer the way kubectl shows it, runs the audit, and stops the
server. Everything stays on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import orjson

from webhook.admission.changes import index_objects, object_key, proposed_request
from webhook.admission.compose import review_of
from webhook.admission.server import READYZ_PATH, VALIDATE_PATH
from webhook.audit.now import check_now_after_state, parse_now
from webhook.audit.report import run_audit
from webhook.certs.issue import make_ca, make_serving_cert, write_bundle
from webhook.commands.common import UsageError
from webhook.engine import Engine
from webhook.render.kubectl import kubectl_lines
from webhook.render.text import render_text
from webhook.state.files import load_state_objects, read_objects

HOST = "127.0.0.1"
SIMULATED = "# simulated: no cluster; the AdmissionReview it would send goes to the guard"
"""After each ``$ kubectl`` line: nothing here runs kubectl or reaches a cluster."""
#: 112 days after omen2 went NotReady on 2026-07-10: when the incident was finally traced.


def run(args: argparse.Namespace) -> int:
    example = Path(args.example)
    if not (example / "cluster.yaml").is_file():
        raise UsageError(f"--example: {example}/cluster.yaml not found (run from the repository)")
    return run_demo(example, args.now)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def describe_change(path: Path) -> str:
    """The first comment line of a change file: what it tries."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


async def wait_ready(
    session: aiohttp.ClientSession, base: str, server: subprocess.Popen[bytes]
) -> None:
    for _ in range(200):
        if server.poll() is not None:
            raise RuntimeError(f"gpu-guard serve exited with {server.returncode}")
        try:
            async with session.get(base + READYZ_PATH) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("gpu-guard serve did not become ready in 20 s")


async def send_changes(
    base: str,
    ca_file: str,
    state_files: Sequence[str],
    change_files: Sequence[Path],
    server: subprocess.Popen[bytes],
) -> None:
    _, items = load_state_objects(state_files)
    existing = index_objects(items)
    context = ssl.create_default_context(cafile=ca_file)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        await wait_ready(session, base, server)
        for path in change_files:
            print(f"\n### {path.name}: {describe_change(path)}")
            print(f"$ kubectl apply -f {path}   {SIMULATED}")
            for item in read_objects(str(path)):
                request = proposed_request(
                    item.obj, existing.get(object_key(item.obj)), dry_run=False
                )
                async with session.post(
                    base + VALIDATE_PATH,
                    data=orjson.dumps(review_of(request)),
                    headers={"Content-Type": "application/json"},
                ) as response:
                    answer = orjson.loads(await response.read())["response"]
                for line in kubectl_lines(answer, request, str(path)):
                    print(line)


def run_demo(example: Path, now: str) -> int:
    state_file = str(example / "cluster.yaml")
    changes = sorted((example / "changes").glob("*.yaml"))
    state, _ = load_state_objects([state_file])
    try:  # before the server starts: a bad --now is the user's, not the demo's
        when = parse_now(now)
        check_now_after_state(when, state)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="gpu-guard-demo-") as tmp:
        ca = make_ca("gpu-guard demo CA")
        write_bundle(tmp, ca, make_serving_cert(ca, [HOST, "localhost"], days=1))
        port = free_port()
        print(f"== gpu-guard serve on https://{HOST}:{port}, state: {state_file}")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook.cli",
                "--log-level",
                "WARNING",
                "serve",
                "--state",
                state_file,
                "--tls-cert",
                f"{tmp}/tls.crt",
                "--tls-key",
                f"{tmp}/tls.key",
                "--host",
                HOST,
                "--port",
                str(port),
                "--drain-delay",
                "0",
            ],
        )
        try:
            asyncio.run(
                send_changes(
                    f"https://{HOST}:{port}", f"{tmp}/ca.crt", [state_file], changes, server
                )
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"\n== gpu-guard audit --state {state_file} --now {now}\n")
    sys.stdout.write(render_text(run_audit(Engine(), state, when)))
    return 0
