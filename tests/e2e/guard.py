"""``gpu-guard serve`` as a real process against a test control plane, and the rendered manifests
it is installed with.

The API server calls a webhook registered by ``url`` on 127.0.0.1 for real, so the guard serves a
certificate the test makes for 127.0.0.1, and the overlay's webhook configurations are registered
as rendered (rules, matchConditions, namespaceSelector, failurePolicy, timeouts) with only their
``clientConfig.service`` replaced by that url and the test CA's caBundle.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import signal
import ssl
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.controlplane import ControlPlane, binary
from tests.test_serve_live import start_serve
from tests.tls import Bundle, make_bundle
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.admission.pipeline import OVERLOADED

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def render(overlay: str) -> list[dict[str, Any]]:
    """``kubectl kustomize manifests/overlays/<overlay>``, with the kubectl of the assets."""
    done = subprocess.run(
        [str(binary("kubectl")), "kustomize", str(MANIFESTS / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(rendered: Sequence[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [copy.deepcopy(obj) for obj in rendered if obj["kind"] in kinds]


def guard_configuration(rendered: Sequence[dict[str, Any]]) -> str:
    """The guard.yaml the overlay's ConfigMap carries (what ``serve --config`` reads)."""
    (config_map,) = [c for c in of_kind(rendered, "ConfigMap") if "guard.yaml" in c.get("data", {})]
    text: str = config_map["data"]["guard.yaml"]
    return text


LEFT_TO_THE_TEST = frozenset({"--port", "--tls-cert", "--tls-key"})
"""Deployment flags ``start_guard`` sets itself: a free port, files under the test's tmp."""


def deployment_args(rendered: Sequence[dict[str, Any]], config: Path) -> list[str]:
    """The Deployment's ``serve`` flags as rendered, but ``--config`` at ``config`` and without
    those ``start_guard`` sets (``LEFT_TO_THE_TEST``)."""
    (deployment,) = of_kind(rendered, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command, *args = container["args"]
    assert command == "serve", container["args"]
    kept: list[str] = []
    flags = iter(args)
    for flag in flags:
        if flag in LEFT_TO_THE_TEST:
            next(flags)
        elif flag == "--config":
            next(flags)
            kept += [flag, str(config)]
        else:
            kept.append(flag)
    return kept


def by_url(
    rendered: Sequence[dict[str, Any]], base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """The overlay's webhook configurations, each entry calling ``base_url`` + its Service
    path instead of the Service, trusting ``ca_pem``; everything else as rendered."""
    configurations = of_kind(rendered, *WEBHOOK_KINDS)
    bundle = base64.b64encode(ca_pem).decode()
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": f"{base_url}{service['path']}", "caBundle": bundle}
    return configurations


RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ([A-Z]+) (\S+) (.*)$")
"""A line of serve's log (webhook/logs.py's FORMAT): time, level, logger, message."""


class LogRecord(NamedTuple):
    level: str
    logger: str
    message: str


@dataclass
class Guard:
    """One ``gpu-guard serve`` process, its log in a file."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    tls: Bundle
    args: tuple[str, ...] = field(default=())
    server_name: str | None = None
    """The name its certificate is checked for (None: 127.0.0.1); with --manage-certs the
    Service's, e.g. gpu-guard.gpu-guard.svc, and ``tls.ca_cert`` the Secret's CA."""

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self.tls.ca_cert.read_bytes()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_offset(self) -> int:
        """Where the log ends now, for ``records(since=...)``."""
        return self.log.stat().st_size if self.log.exists() else 0

    def records(self, since: int = 0) -> list[LogRecord]:
        """The log's lines from byte ``since`` on, as (level, logger, message); a line that is
        not a record's (a traceback's) is kept as level ``""``."""
        with self.log.open("rb") as handle:
            handle.seek(since)
            text = handle.read().decode(errors="replace")
        records = []
        for line in text.splitlines():
            match = RECORD.match(line)
            records.append(LogRecord(*match.groups()) if match else LogRecord("", "", line))
        return records

    def decisions(self) -> list[str]:
        """The decision lines of the log, one per review answered (``decision <subject> ...``)."""
        return [line for line in self.log_text().splitlines() if " decision " in line]

    async def get(self, path: str) -> tuple[int, str]:
        """The status and text of a GET; 0 when nothing answers."""
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        try:
            async with (
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
                session.get(f"{self.base}{path}", server_hostname=self.server_name) as response,
            ):
                return response.status, await response.text()
        except aiohttp.ClientError:
            return 0, ""

    async def wait_ready(self, timeout: float = 60) -> None:
        """Until /readyz answers 200, every kind synced (AssertionError with its log on exit)."""
        async with asyncio.timeout(timeout):
            while (await self.get("/readyz"))[0] != 200:
                assert self.process.poll() is None, f"serve exited:\n{self.log_text()[-3000:]}"
                await asyncio.sleep(0.05)

    async def validate(
        self, change: dict[str, Any], existing: dict[str, Any] | None, timeout: float = 30
    ) -> dict[str, Any]:
        """The ``response`` of the AdmissionReview the API server would send /validate for
        ``change`` (an update of ``existing``; None: a create), posted straight to the guard, so
        it can be asked while the API server is down. A review shed under load is sent again."""
        body = json.dumps(review_of(proposed_request(change, existing, dry_run=False)))
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        async with (
            asyncio.timeout(timeout),
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        ):
            while True:
                async with session.post(
                    f"{self.base}/validate",
                    data=body,
                    headers={"Content-Type": "application/json"},
                    server_hostname=self.server_name,
                ) as response:
                    assert response.status == 200, await response.text()
                    answer: dict[str, Any] = (await response.json())["response"]
                if not any(OVERLOADED in w for w in answer.get("warnings", [])):
                    return answer
                await asyncio.sleep(0.1)

    async def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """The samples of metric ``name`` (a sample name, e.g. ``..._total``) with their labels."""
        status, text = await self.get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return [
            (sample.labels, sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name
        ]

    async def reviews(self, **labels: str) -> float:
        """AdmissionReviews answered whose labels include ``labels`` (endpoint, kind,
        operation, allowed), from /metrics."""
        return sum(
            value
            for sample_labels, value in await self.samples("gpu_guard_admission_reviews_total")
            if all(sample_labels.get(key) == wanted for key, wanted in labels.items())
        )

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stops the process (SIGTERM: a graceful drain) and returns its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return await asyncio.to_thread(self.process.wait, 30)


async def start_guard(
    plane: ControlPlane,
    directory: Path,
    *args: str,
    kubeconfig: Path | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
) -> Guard:
    """``gpu-guard serve --kubeconfig`` (the admin's unless given) on 127.0.0.1 with a serving
    certificate for it made in ``directory``; ``args`` are added to the command line."""
    directory.mkdir(parents=True, exist_ok=True)
    _, bundle = make_bundle(directory / "tls", hosts=("127.0.0.1",))
    log = directory / "serve.log"
    with log.open("ab") as stderr:
        process, port = await start_serve(
            "--kubeconfig",
            str(kubeconfig or plane.kubeconfig),
            "--tls-cert",
            str(bundle.cert),
            "--tls-key",
            str(bundle.key),
            *args,
            stderr=stderr,
            env=env,
            log_level=log_level,
        )
    return Guard(process, port, log, bundle, args)
