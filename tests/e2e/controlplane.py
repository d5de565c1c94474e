"""A real Kubernetes control plane for tests: etcd and kube-apiserver from ``KUBEBUILDER_ASSETS``
on free loopback ports, with certificates made for the run (``tests.e2e.pki``).

No kubelet, scheduler or controllers run: what a test needs of them it does itself (bind pods
with ``spec.nodeName``, set status through the status subresource, create the ``default``
ServiceAccount). ``ControlPlane`` starts, stops and restarts the API server on the same etcd,
compacts etcd, runs kubectl (as the admin or impersonating), and writes kubeconfigs with
everything embedded, which kubectl, helm and kubernetes-asyncio all read.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.pki import Pki, make_pki
from tests.e2e.rest import ControlPlaneError, Rest
from tests.test_serve_live import free_port

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kubectl")
"""Without these no e2e test runs; ``etcdctl`` and ``helm`` only the tests that use them."""
HOW_TO_GET = (
    "get them with `setup-envtest use 1.36 -p path` (kube-apiserver, etcd, kubectl; helm and "
    f"etcdctl from their releases) and set {ASSETS_VARIABLE} to that folder"
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


#: Every request but the API server's own, once, when answered; no bodies (Metadata).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "None", "users": ["system:apiserver"]}, {"level": "Metadata"}],
}


def assets() -> Path | None:
    """The folder ``KUBEBUILDER_ASSETS`` names, or None when it is not set."""
    value = os.environ.get(ASSETS_VARIABLE, "")
    return Path(value) if value else None


def missing_binaries(
    folder: Path | None, names: Sequence[str] = CONTROL_PLANE_BINARIES
) -> list[str]:
    if folder is None:
        return list(names)
    return [name for name in names if not os.access(folder / name, os.X_OK)]


def binary(name: str, folder: Path | None = None) -> Path:
    """``name`` from ``folder`` (default ``KUBEBUILDER_ASSETS``); the test is skipped (failed
    under GPU_GUARD_REQUIRE_E2E=1) when it is not there."""
    folder = folder or assets()
    if missing_binaries(folder, [name]):
        pytest.skip(f"{name} is not in {ASSETS_VARIABLE} ({folder}): {HOW_TO_GET}")
    assert folder is not None
    return folder / name


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _terminate(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


class ControlPlane(Rest):
    """etcd and kube-apiserver in ``directory`` (data, certificates, logs, kubeconfig)."""

    def __init__(
        self, directory: Path, folder: Path | None = None, node_authorizer: bool = False
    ) -> None:
        super().__init__()
        self.node_authorizer = node_authorizer
        """``--authorization-mode=Node,RBAC`` and the NodeRestriction admission plugin, as
        clusters run: a kubelet may write only its own Node (RBAC alone by default)."""
        self.assets = folder or assets() or Path("/nonexistent")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pki: Pki = make_pki(directory / "pki")
        self.etcd_log = directory / "etcd.log"
        self.apiserver_log = directory / "kube-apiserver.log"
        self.audit_log = directory / "audit.log"
        """The API server's audit log: every request, who sent it and what it was answered
        (level Metadata; ``audit_events``)."""
        self.kubeconfig = directory / "kubeconfig"
        self.port = 0
        self.etcd_port = 0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0
        """How long the last ``start`` took, etcd's first byte to /readyz 200."""
        self.extra_args: tuple[str, ...] = ()
        """Added to the API server's command line (feature gates, runtime config), set before
        ``start``."""

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def start(self) -> ControlPlane:
        """etcd, then the API server; returns once /readyz answers 200. A port taken between
        choosing and binding it is chosen again."""
        started = time.monotonic()
        self._on_free_ports(self._start_etcd, self.etcd_log)
        self._on_free_ports(self._start_api_server_on_a_free_port, self.apiserver_log)
        self.start_seconds = time.monotonic() - started
        self._write_kubeconfig()
        return self

    @staticmethod
    def _on_free_ports(start: Callable[[], None], log: Path, attempts: int = 3) -> None:
        """``start()``, again (it picks new ports) when a port was taken between choosing and
        binding it."""
        for attempt in range(attempts):
            try:
                start()
                return
            except ControlPlaneError:
                if attempt == attempts - 1 or "address already in use" not in _log_tail(log):
                    raise

    def _start_api_server_on_a_free_port(self) -> None:
        self.port = free_port()
        self.start_api_server()

    def stop(self) -> None:
        _terminate(self._apiserver)
        _terminate(self._etcd)

    def _start_etcd(self) -> None:
        self.etcd_port, peer, metrics = free_port(), free_port(), free_port()
        data = self.directory / "etcd-data"
        shutil.rmtree(data, ignore_errors=True)  # a start that lost its port left a member here
        data.mkdir(mode=0o700)
        peer_url = f"http://127.0.0.1:{peer}"
        with self.etcd_log.open("ab") as log:
            self._etcd = subprocess.Popen(
                [
                    str(self.assets / "etcd"),
                    "--name=default",
                    f"--data-dir={data}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=default={peer_url}",
                    f"--listen-metrics-urls=http://127.0.0.1:{metrics}",
                    "--unsafe-no-fsync",  # a test's data need not survive a power cut
                    # One member: no peer to lose, so the first election need not wait 1 s.
                    "--heartbeat-interval=10",
                    "--election-timeout=100",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        self._wait(self._etcd, self.etcd_log, self._etcd_healthy, "etcd")

    def _etcd_healthy(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=2)
        try:
            connection.request("GET", "/health")
            return b'"true"' in connection.getresponse().read()
        except OSError:
            return False
        finally:
            connection.close()

    def start_api_server(self, wait: bool = True) -> None:
        """The API server on ``port`` against the running etcd (again, after ``stop_api_server``:
        the data and the tokens it issued survive)."""
        if self._apiserver is not None and self._apiserver.poll() is None:
            raise ControlPlaneError("the API server is running already")
        pki = self.pki
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        with self.apiserver_log.open("ab") as log:
            self._apiserver = subprocess.Popen(
                [
                    str(self.assets / "kube-apiserver"),
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.port}",
                    "--advertise-address=127.0.0.1",
                    f"--etcd-servers={self.etcd_url}",
                    f"--cert-dir={self.directory / 'apiserver-certs'}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                    f"--service-account-key-file={pki.sa_public}",
                    f"--service-account-signing-key-file={pki.sa_private}",
                    f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
                    f"--authorization-mode={'Node,RBAC' if self.node_authorizer else 'RBAC'}",
                    "--anonymous-auth=false",
                    "--enable-admission-plugins="
                    + ("NodeRestriction," if self.node_authorizer else "")
                    + "MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                    "--service-cluster-ip-range=10.96.0.0/12",
                    "--endpoint-reconciler-type=none",
                    "--profiling=false",
                    "--allow-privileged=true",
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_log}",
                    "--audit-log-mode=blocking",  # written before the answer: a test reads it next
                    *self.extra_args,
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until /readyz answers 200 (ControlPlaneError with the log's tail if the API server
        exits or the time runs out)."""
        assert self._apiserver is not None
        self._wait(self._apiserver, self.apiserver_log, self._serving, "kube-apiserver", timeout)

    def _serving(self) -> bool:
        return self.readyz() == 200

    def stop_api_server(self, sig: int = signal.SIGTERM) -> None:
        """The API server gone (SIGTERM: its graceful shutdown, 1-2 s; while any watch is open it
        stops listening but does not exit: SIGKILL after STOP_TIMEOUT); etcd stays."""
        _terminate(self._apiserver, sig)

    def restart_api_server(self) -> None:
        self.stop_api_server()
        self.start_api_server()

    @property
    def api_server_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.poll() is None

    def _wait(
        self,
        process: subprocess.Popen[bytes],
        log: Path,
        ready: Callable[[], bool],
        name: str,
        timeout: float = START_TIMEOUT,
    ) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {process.returncode}:\n{_log_tail(log)}"
                )
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not ready within {timeout:.0f} s:\n{_log_tail(log)}"
                )
            time.sleep(0.02)

    # --- etcd ------------------------------------------------------------------------------------

    def etcdctl(self, *args: str) -> str:
        """etcdctl against this etcd (the test is skipped without etcdctl in the assets)."""
        done = subprocess.run(
            [str(binary("etcdctl", self.assets)), f"--endpoints={self.etcd_url}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "ETCDCTL_API": "3"},
        )
        if done.returncode != 0:
            raise ControlPlaneError(f"etcdctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def revision(self) -> int:
        """etcd's current revision: every resourceVersion the API server hands out is one."""
        status = json.loads(self.etcdctl("endpoint", "status", "-w", "json"))
        return int(status[0]["Status"]["header"]["revision"])

    def compact(self) -> int:
        """Compacts etcd at its current revision and returns it. A list (or continue token) at
        an older resourceVersion is then answered 410 Gone; a watch from one still is served
        from the API server's watch cache, until that no longer reaches back to it (after the
        API server restarts on an etcd that moved on)."""
        revision = self.revision()
        self.etcdctl("compact", str(revision), "--physical")
        return revision

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log's events (one per request, at ResponseComplete), of ``user`` only
        when given: verb, requestURI, objectRef, responseStatus.code."""
        events = []
        try:
            text = self.audit_log.read_text()
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            event = json.loads(line)
            if user is None or event["user"]["username"] == user:
                events.append(event)
        return events

    def kubectl(
        self,
        *args: str,
        as_user: str | None = None,
        as_groups: Sequence[str] = (),
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as the admin (or ``as_user`` in ``as_groups``, impersonated by the admin);
        ``check``: a non-zero exit raises ControlPlaneError with what kubectl printed."""
        command = [
            str(self.assets / "kubectl"),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.directory / 'kubectl-cache'}",  # ports are reused across planes
        ]
        if as_user is not None:
            command.append(f"--as={as_user}")
        command += [f"--as-group={group}" for group in as_groups]
        done = subprocess.run(
            [*command, *args], input=stdin, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """helm against this cluster (the test is skipped without helm in the assets)."""
        done = subprocess.run(
            [str(binary("helm", self.assets)), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                **os.environ,
                "HELM_CACHE_HOME": str(self.directory / "helm-cache"),
                "HELM_CONFIG_HOME": str(self.directory / "helm-config"),
                "HELM_DATA_HOME": str(self.directory / "helm-data"),
            },
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done

    # --- kubeconfigs and identities --------------------------------------------------------------

    def _kubeconfig(self, user: dict[str, str], namespace: str) -> dict[str, Any]:
        ca = base64.b64encode(self.pki.ca.cert_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "envtest", "user": user}],
            "contexts": [
                {
                    "name": "envtest",
                    "context": {"cluster": "envtest", "user": "envtest", "namespace": namespace},
                }
            ],
            "current-context": "envtest",
        }

    def _write_kubeconfig(self) -> None:
        admin = {
            "client-certificate-data": base64.b64encode(self.pki.admin.cert_pem).decode(),
            "client-key-data": base64.b64encode(self.pki.admin.key_pem).decode(),
        }
        self.kubeconfig.write_text(yaml.safe_dump(self._kubeconfig(admin, "default")))
        self.kubeconfig.chmod(0o600)

    def token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A token of the ServiceAccount (``kubectl create token``; no controller needed)."""
        done = self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={seconds}s"
        )
        return done.stdout.strip()

    def kubeconfig_for(self, token: str, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig at ``path`` that authenticates with ``token`` (0600)."""
        path.write_text(yaml.safe_dump(self._kubeconfig({"token": token}, namespace)))
        path.chmod(0o600)
        return path
