"""Shared plumbing of the admission benchmarks: the machine, the state files, the review mix,
server processes pinned to a core, the load generators (wrk, else ``bench.loadgen``), /proc.

Nothing here leaves 127.0.0.1; every load has a duration and every wait a timeout.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import importlib.util
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from policies.vocabulary.requests import UserInfo
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.certs.issue import make_ca, make_serving_cert, write_bundle

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SMALL_STATE = ROOT / "examples" / "homelab" / "cluster.yaml"
WORKDIR = Path(os.environ.get("GPU_GUARD_BENCH_DIR", "/tmp/gpu-guard-bench"))
LARGE_STATE = WORKDIR / "big.json"
REALISTIC_STATE = WORKDIR / "big-realistic.json"
WRK_SCRIPT = BENCH / "wrk_rotate.lua"
SERVER_CPU = 0
LOAD_CPU = 1

Obj = dict[str, Any]


# --- the machine ------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def wrk_path() -> str | None:
    return shutil.which("wrk")


def taskset_path() -> str | None:
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return None
    return shutil.which("taskset")


def have_uvloop() -> bool:
    """uvloop is optional: the bench only (``pip install uvloop``)."""
    return importlib.util.find_spec("uvloop") is not None


def machine() -> dict[str, str]:
    wrk = wrk_path()
    wrk_version = "not installed"
    if wrk is not None:
        out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
        wrk_version = (out.stdout + out.stderr).splitlines()[0].split(" Copyright")[0]
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "aiohttp": package_version("aiohttp"),
        "orjson": package_version("orjson"),
        "uvloop": package_version("uvloop"),
        "wrk": wrk_version,
        "taskset": "yes" if taskset_path() else "no",
        "load average (1, 5, 15 min)": load_average(),
    }


def pinned(argv: Sequence[str], cpu: int | None) -> list[str]:
    """``argv`` under ``taskset -c cpu`` when there is a core to pin to, else as is."""
    taskset = taskset_path()
    if cpu is None or taskset is None:
        return list(argv)
    return [taskset, "-c", str(cpu), *argv]


# --- /proc -----------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS) and the like from /proc/<pid>/status, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Vm") and value.strip().endswith("kB"):
            out[key] = int(value.split()[0])
    return out


def rss_mib(pid: int) -> float:
    return proc_status(pid)["VmRSS"] / 1024


def hwm_mib(pid: int) -> float:
    return proc_status(pid)["VmHWM"] / 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# --- TLS ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    ca: Path
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def make_certs(directory: Path) -> Certs:
    ca = make_ca("gpu-guard bench CA")
    write_bundle(str(directory), ca, make_serving_cert(ca, ["127.0.0.1", "localhost"]))
    return Certs(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- server processes ----------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A server on 127.0.0.1 in its own process, pinned, its output in a log file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    certs: Certs
    ready_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, path: str = "") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=timeout, context=self.certs.client_context()
        )
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def post(self, path: str, body: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=timeout, context=self.certs.client_context()
        )
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self, timeout: float = 15.0) -> int | None:
        return stop_process(self.process, timeout)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int | None:
    """SIGTERM (the server drains), then SIGKILL after ``timeout``; the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    return process.returncode


def start_server(
    name: str,
    argv: Sequence[str],
    port: int,
    certs: Certs,
    logdir: Path,
    cpu: int | None = SERVER_CPU,
    timeout: float = 180.0,
    cwd: Path = ROOT,
) -> ServerProcess:
    """Starts ``argv`` and returns once GET /readyz answers 200 (``ready_seconds`` from the
    spawn), or raises with the log when it exits or ``timeout`` passes. ``cwd`` (the tree whose
    code runs: cwd comes first on sys.path) is the repository unless told."""
    log = logdir / f"{name}.log"
    started = time.perf_counter()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            pinned(argv, cpu), cwd=cwd, stdout=sink, stderr=subprocess.STDOUT
        )
    server = ServerProcess(name, process, port, log, certs)
    deadline = started + timeout
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{log.read_text()}")
        try:
            status, _ = server.get("/readyz", timeout=2.0)
        except (OSError, http.client.HTTPException):
            status = 0
        if status == 200:
            server.ready_seconds = time.perf_counter() - started
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"{name} was not ready within {timeout:.0f} s:\n{log.read_text()[-4000:]}")


def _listen_args(port: int, certs: Certs) -> list[str]:
    """TLS on 127.0.0.1:``port``, as both servers take it."""
    return [
        *("--tls-cert", str(certs.cert), "--tls-key", str(certs.key)),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]


def gpu_guard_argv(
    state: Path,
    port: int,
    certs: Certs,
    *,
    uvloop: bool = False,
    log_level: str = "INFO",
    audit: bool = False,
) -> list[str]:
    """``gpu-guard serve --state``; ``audit``: with its background audit (off otherwise, so a
    load run measures admission alone)."""
    module = "bench.uvloop_serve" if uvloop else "webhook.cli"
    argv = [sys.executable, "-m", module, "--log-level", log_level, "serve", "--state", str(state)]
    argv += [*_listen_args(port, certs), "--drain-delay", "0"]
    return argv if audit else [*argv, "--audit-interval", "0"]


def variant_argv(state: Path, port: int, certs: Certs, *extra: str) -> list[str]:
    """``bench.variant_server`` (gpu-guard's server with one thing changed) on ``state``."""
    argv = [sys.executable, "-m", "bench.variant_server", "--state", str(state)]
    return [*argv, *_listen_args(port, certs), *extra]


def baseline_argv(port: int, certs: Certs, *, uvloop: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "bench.baseline_server", *_listen_args(port, certs)]
    return [*argv, "--uvloop"] if uvloop else argv


@contextlib.contextmanager
def stopping(servers: list[ServerProcess]) -> Iterator[list[ServerProcess]]:
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


# --- the review mix ------------------------------------------------------------------------------

GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"
HOSTNAME = "kubernetes.io/hostname"
LARGE_NODE = "gpu-h100-0001"
SMALL_NODE = "omen1"
"""The node the Node UPDATE relabels and the Pod CREATE pins to: a container-mode GPU node with
running GPU pods, in each state."""
GFD_USER = UserInfo(
    "system:serviceaccount:gpu-operator:nvidia-gpu-feature-discovery",
    ("system:serviceaccounts", "system:serviceaccounts:gpu-operator", "system:authenticated"),
)
ADMIN = UserInfo("alice@example.com", ("platform-admins", "system:authenticated"))
CONTROLLER = UserInfo(
    "system:serviceaccount:kube-system:job-controller",
    ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
)


@dataclass(frozen=True)
class Review:
    label: str
    path: str
    body: bytes


def _strip_server_fields(obj: Obj) -> Obj:
    """An object as a client submits it for CREATE: no status, uid, resourceVersion, times."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        meta.pop(key, None)
    return out


def _review(label: str, change: Obj, existing: Obj | None, user: UserInfo) -> Review:
    request = proposed_request(change, existing, user=user, dry_run=False)
    return Review(label, "/validate", orjson.dumps(review_of(request)))


def _synthetic_templates() -> dict[str, Obj]:
    from bench.synthetic import Layout, kubevirts, nodes, pods, virtual_machines

    small = Layout.at(0.01)
    templates: dict[str, Obj] = {"node": next(iter(nodes(Layout.at(1.0))))}
    templates["kubevirt"] = next(iter(kubevirts(Layout.at(1.0))))
    for pod in pods(small):
        resources = pod["spec"]["containers"][0].get("resources") or {}
        if "nvidia.com/gpu" in (resources.get("limits") or {}):
            templates["pod"] = pod
            break
    for vm in virtual_machines(small):
        if vm["spec"]["template"]["spec"]["domain"]["devices"].get("gpus"):
            templates["vm"] = vm
            break
    return templates


def _homelab_kubevirt() -> Obj:
    from webhook.state.files import read_objects

    for item in read_objects(str(SMALL_STATE)):
        if item.obj.get("kind") == "KubeVirt":
            return dict(item.obj)
    raise RuntimeError(f"no KubeVirt CR in {SMALL_STATE}")


def review_mix(target: str) -> list[Review]:
    """The four reviews of the load, for the ``"small"`` (home lab) or ``"large"`` state.

    * Node UPDATE: GFD bumps ``nvidia.com/gfd.timestamp`` on a container-mode GPU node that runs
      GPU pods; the node is the synthetic 20 KB node (107 labels, 7 conditions, 30 images,
      managedFields), so the review carries it twice (object and oldObject), ~41 KB;
    * VirtualMachine CREATE: a running VM with an RTX 3090 in gpus[] (``evictionStrategy:
      None``), a device healthy nodes of both states provide;
    * Pod CREATE: a Job's pod asking for ``nvidia.com/gpu: 1``, pinned by nodeSelector
      ``kubernetes.io/hostname`` to that GPU node;
    * KubeVirt CR UPDATE: an admin adds a feature gate to the state's own KubeVirt CR.

    The bodies are the same for both states except the node they name (and the KubeVirt CR,
    each state's own); each is allowed without warnings, after every applicable policy ran.
    """
    if target not in ("small", "large"):
        raise ValueError(target)
    templates = _synthetic_templates()
    node_name = LARGE_NODE if target == "large" else SMALL_NODE

    node = copy.deepcopy(templates["node"])
    node["metadata"]["name"] = node_name
    node["metadata"]["labels"][HOSTNAME] = node_name
    stamp = int(node["metadata"]["labels"].get(GFD_TIMESTAMP, "1751012224"))
    node_change = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {GFD_TIMESTAMP: str(stamp + 60)}},
    }

    vm = _strip_server_fields(templates["vm"])
    vm["metadata"]["name"] = "bench-gpu-vm"
    vm["spec"]["runStrategy"] = "Always"
    vm["spec"].pop("running", None)
    vm["spec"]["template"]["spec"]["evictionStrategy"] = "None"

    pod = _strip_server_fields(templates["pod"])
    pod["metadata"]["name"] = "bench-train-worker-0"
    pod["spec"].pop("nodeName", None)
    pod["spec"]["nodeSelector"] = {HOSTNAME: node_name}

    kubevirt = templates["kubevirt"] if target == "large" else _homelab_kubevirt()
    gates = (
        kubevirt.get("spec", {})
        .get("configuration", {})
        .get("developerConfiguration", {})
        .get("featureGates", [])
    )
    kubevirt_change = {
        "apiVersion": kubevirt["apiVersion"],
        "kind": "KubeVirt",
        "metadata": {
            "name": kubevirt["metadata"]["name"],
            "namespace": kubevirt["metadata"]["namespace"],
        },
        "spec": {
            "configuration": {"developerConfiguration": {"featureGates": [*gates, "VMExport"]}}
        },
    }
    return [
        _review("Node UPDATE", node_change, node, GFD_USER),
        _review("VirtualMachine CREATE", vm, None, ADMIN),
        _review("Pod CREATE", pod, None, CONTROLLER),
        _review("KubeVirt UPDATE", kubevirt_change, kubevirt, ADMIN),
    ]


def write_bodies(reviews: Sequence[Review], path: Path) -> Path:
    """One ``PATH<TAB>BODY`` line per review: what wrk_rotate.lua and bench.loadgen read."""
    with path.open("wb") as out:
        for review in reviews:
            if b"\n" in review.body or b"\t" in review.body:
                raise ValueError(f"{review.label}: body has a raw newline or tab")
            out.write(review.path.encode() + b"\t" + review.body + b"\n")
    return path


def check_answers(server: ServerProcess, reviews: Sequence[Review]) -> list[str]:
    """Each review once: problems (non-200, not allowed, warnings) as text, [] when all clean."""
    problems = []
    for review in reviews:
        status, body = server.post(review.path, review.body)
        if status != 200:
            problems.append(f"{server.name}: {review.label}: HTTP {status}: {body[:200]!r}")
            continue
        response = orjson.loads(body).get("response", {})
        if not response.get("allowed") or response.get("warnings"):
            problems.append(
                f"{server.name}: {review.label}: allowed={response.get('allowed')} "
                f"warnings={response.get('warnings')} status={response.get('status')}"
            )
    return problems


# --- load generators -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadResult:
    tool: str
    requests: int
    seconds: float
    errors: int
    non_2xx: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    server_cpu: float = 0.0
    """CPU seconds the server process used during the run (from /proc)."""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items()}
        out["rps"] = round(self.rps, 1)
        return out


def _run_load_tool(name: str, argv: list[str], cpu: int | None, duration: float) -> Obj:
    """Runs a load generator pinned to ``cpu``; the JSON summary line it prints last (wrk's
    script and bench.loadgen both print one), or raises with its output."""
    out = subprocess.run(
        pinned(argv, cpu), capture_output=True, text=True, timeout=duration + 60, cwd=ROOT
    )
    lines = [s for s in out.stdout.splitlines() if s.startswith("{") and '"requests"' in s]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    summary: Obj = orjson.loads(lines[-1])
    return summary


def run_wrk(
    url: str,
    bodies: Path,
    *,
    connections: int,
    duration: float,
    threads: int = 1,
    cpu: int | None = LOAD_CPU,
) -> LoadResult:
    wrk = wrk_path()
    if wrk is None:
        raise RuntimeError("wrk is not installed")
    argv = [
        wrk,
        "-t",
        str(threads),
        "-c",
        str(connections),
        "-d",
        f"{max(1, round(duration))}s",
        "--timeout",
        "5s",
        "-s",
        str(WRK_SCRIPT),
        url,
        "--",
        str(bodies),
    ]
    summary = _run_load_tool("wrk", argv, cpu, duration)
    lat = summary["latency_us"]
    errors = summary["errors"]
    return LoadResult(
        tool="wrk",
        requests=int(summary["requests"]),
        seconds=summary["duration_us"] / 1e6,
        errors=int(errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]),
        non_2xx=int(errors["status"]),
        p50_ms=lat["p50"] / 1000,
        p90_ms=lat["p90"] / 1000,
        p99_ms=lat["p99"] / 1000,
        max_ms=lat["max"] / 1000,
        mean_ms=lat["mean"] / 1000,
    )


def run_loadgen(
    url: str,
    bodies: Path,
    ca: Path,
    *,
    connections: int,
    duration: float,
    rate: float = 0.0,
    cpu: int | None = LOAD_CPU,
) -> LoadResult:
    argv = [
        sys.executable,
        "-m",
        "bench.loadgen",
        url,
        "--bodies",
        str(bodies),
        "--cafile",
        str(ca),
        "--connections",
        str(connections),
        "--duration",
        str(duration),
        "--rate",
        str(rate),
    ]
    summary = _run_load_tool("loadgen", argv, cpu, duration)
    return LoadResult(
        tool="loadgen" + (f"@{rate:g}/s" if rate else ""),
        requests=int(summary["requests"]),
        seconds=float(summary["seconds"]),
        errors=int(summary["errors"]),
        non_2xx=int(summary["non_2xx"]),
        p50_ms=float(summary["p50_ms"]),
        p90_ms=float(summary["p90_ms"]),
        p99_ms=float(summary["p99_ms"]),
        max_ms=float(summary["max_ms"]),
        mean_ms=float(summary["mean_ms"]),
    )


def run_load(
    tool: str,
    server: ServerProcess,
    bodies: Path,
    *,
    connections: int,
    duration: float,
) -> LoadResult:
    """``tool`` "wrk" or "loadgen" against ``server``, with its CPU seconds over the run."""
    before = cpu_seconds(server.pid)
    if tool == "wrk":
        result = run_wrk(server.url("/"), bodies, connections=connections, duration=duration)
    else:
        result = run_loadgen(
            server.url("/"), bodies, server.certs.ca, connections=connections, duration=duration
        )
    used = cpu_seconds(server.pid) - before
    return LoadResult(**{**vars(result), "server_cpu": used})


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def ensure_large_state(path: Path = LARGE_STATE, scale: float = 1.0) -> Path:
    """The compact large state file, written by ``bench.synthetic`` if it is not there yet."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.synthetic",
                "--compact",
                "-o",
                str(path),
                "--scale",
                str(scale),
            ],
            cwd=ROOT,
            check=True,
            timeout=900,
        )
    return path
