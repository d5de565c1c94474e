"""PolicyReports in the real wgpolicyk8s.io CRDs (tests/fixtures/crds), as the background audit of
``serve`` keeps them and as ``gpu-guard audit -o policyreport`` prints them for kubectl.

The home lab is loaded into the API server; VMs asking for the RTX 5090 whose only provider is
NotReady are added and removed with kubectl, which gives and takes findings in a namespace. The
reports must be created, updated in place (same uid, a new resourceVersion) and deleted when their
namespace's findings vanish, and the API server must refuse or prune none of what is written.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.builders import vm
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.crds import install, real_crds
from tests.e2e.objects import load
from tests.test_cli import STATE
from tests.waits import until
from webhook.render.policyreport import MANAGED_BY_LABEL, MANAGER, REPORT_NAME

REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
"""What vms/gpu-fedora waits for: its only provider, omen2, has been NotReady for months."""
STUCK = "passthrough-without-ready-provider"
Obj = dict[str, Any]
Result = tuple[str, str, tuple[str, ...]]


def gpu_guard(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command line, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def published(plane: ControlPlane) -> dict[tuple[str, str], Obj]:
    """Our reports in the cluster by (kind, namespace)."""
    selector = f"labelSelector={MANAGED_BY_LABEL}%3D{MANAGER}"
    found: dict[tuple[str, str], Obj] = {}
    for plural in ("clusterpolicyreports", "policyreports"):
        for item in plane.call("GET", f"{REPORTS}/{plural}?{selector}")["items"]:
            found[(item["kind"], item["metadata"].get("namespace", ""))] = item
    return found


def results(report: Obj | None) -> list[Result]:
    """What a report says, without the words that depend on the clock: (policy, result,
    resources)."""
    return sorted(
        (
            r["policy"],
            r["result"],
            tuple(f"{x['kind']} {x.get('namespace', '')}/{x['name']}" for x in r["resources"]),
        )
        for r in (report or {}).get("results") or []
    )


def stuck(namespace: str, *names: str) -> list[Result]:
    return [(STUCK, "warn", (f"VirtualMachine {namespace}/{name}",)) for name in names]


def apply_vm(plane: ControlPlane, namespace: str, name: str) -> None:
    manifest = vm(name, gpus=[RTX_5090], namespace=namespace)
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))


def test_what_audit_prints_as_policy_reports_is_taken_by_the_real_crds_as_printed(
    own_control_plane: ControlPlane,
) -> None:
    plane = own_control_plane
    load(plane, yaml.safe_load(Path(STATE).read_text())["items"])
    printed = gpu_guard("audit", "--kubeconfig", str(plane.kubeconfig), "-o", "policyreport")
    assert printed.returncode == 1, printed.stderr  # the recovery trap is a deny
    documents = [d for d in yaml.safe_load_all(printed.stdout) if d]
    assert {(d["kind"], d["metadata"].get("namespace", "")) for d in documents} == {
        ("ClusterPolicyReport", ""),
        ("PolicyReport", "kubevirt"),  # audited and clean: an empty report replaces an old one
        ("PolicyReport", "vms"),
    }

    done = plane.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=printed.stdout)
    answered = yaml.safe_load(done.stdout)["items"]
    assert len(answered) == len(documents)
    for sent, held in zip(documents, answered, strict=True):
        # Nothing pruned: a structural schema drops a field it does not know without a word.
        assert held["results"] == sent["results"], sent["metadata"]
        assert held["summary"] == sent["summary"]
        assert held["metadata"]["labels"] == sent["metadata"]["labels"]
        annotations = held["metadata"]["annotations"]
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration")  # kubectl's own
        assert annotations == sent["metadata"]["annotations"]


async def test_the_background_audit_creates_updates_in_place_and_deletes_its_reports(
    own_control_plane: ControlPlane, serve: ServeGuard
) -> None:
    plane = own_control_plane
    load(plane, yaml.safe_load(Path(STATE).read_text())["items"])
    guard = await serve(plane, "--audit-interval", "0.5")
    await guard.wait_ready()

    def report(kind: str = "PolicyReport", namespace: str = "vms") -> Obj | None:
        return published(plane).get((kind, namespace))

    await until(lambda: report() is not None and report("ClusterPolicyReport", ""), timeout=60)
    # What the command line prints for the same cluster, clean namespaces aside.
    printed = gpu_guard("audit", "--kubeconfig", str(plane.kubeconfig), "-o", "policyreport")
    expected = {
        (d["kind"], d["metadata"].get("namespace", "")): results(d)
        for d in yaml.safe_load_all(printed.stdout)
        if d and d["results"]
    }
    assert {key: results(r) for key, r in published(plane).items()} == expected
    vms_report = report()
    assert vms_report is not None and vms_report["metadata"]["name"] == REPORT_NAME
    first = results(vms_report)
    assert stuck("vms", "gpu-fedora") <= first

    # New findings in a namespace without any: its report is created.
    plane.kubectl("create", "namespace", "lab")
    apply_vm(plane, "lab", "a")
    await until(lambda: results(report(namespace="lab")) == stuck("lab", "a"), timeout=60)
    lab = report(namespace="lab")
    assert lab is not None

    # Findings change: both reports are the same objects, rewritten.
    apply_vm(plane, "lab", "b")
    apply_vm(plane, "vms", "extra")
    await until(lambda: results(report(namespace="lab")) == stuck("lab", "a", "b"), timeout=60)
    await until(lambda: results(report()) == sorted(first + stuck("vms", "extra")), timeout=60)
    for before, kind, namespace in (
        (lab, "PolicyReport", "lab"),
        (vms_report, "PolicyReport", "vms"),
    ):
        after = report(kind, namespace)
        assert after is not None
        assert after["metadata"]["uid"] == before["metadata"]["uid"], namespace
        assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]

    # Findings gone: the namespace's report is deleted; the other one is back to what it said.
    plane.kubectl("delete", "vm", "a", "b", "-n", "lab")
    plane.kubectl("delete", "vm", "extra", "-n", "vms")
    await until(lambda: report(namespace="lab") is None, timeout=60)
    await until(lambda: results(report()) == first, timeout=60)
    kept = report()
    assert kept is not None and kept["metadata"]["uid"] == vms_report["metadata"]["uid"]

    # Nothing was refused: every write of a report answered 2xx, and serve wrote without a failure.
    assert await guard.stop() == 0
    writes = [
        (e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
        for e in plane.audit_events()
        if (e.get("objectRef") or {}).get("apiGroup") == "wgpolicyk8s.io"
        and e["verb"] in ("create", "update", "patch", "delete")
    ]
    assert {verb for verb, _, _ in writes} == {"create", "update", "delete"}
    assert [w for w in writes if not 200 <= w[2] < 300] == []
    log = guard.log_text()
    assert "could not write" not in log and "Traceback" not in log, log
    counts = [line for line in log.splitlines() if "reports {" in line]
    assert counts and all("'failed': 0" in line for line in counts), counts


async def test_without_the_report_crds_serve_says_so_once_audits_on_and_publishes_once_they_come(
    bare_control_plane: ControlPlane, serve: ServeGuard
) -> None:
    plane = bare_control_plane  # no CRD at all: the guard installed before anything else
    guard = await serve(plane, "--audit-interval", "0.3")
    await guard.wait_ready()

    async def audits() -> float:
        return sum(
            v for _, v in await guard.samples("gpu_guard_audit_last_success_timestamp_seconds")
        )

    first = await audits()
    for _ in range(3):  # several audits pass: the absence is said once, not per audit
        seen = await audits()
        async with asyncio.timeout(60):
            while await audits() == seen:
                await asyncio.sleep(0.1)
    assert await audits() > first
    assert sum(v for _, v in await guard.samples("gpu_guard_audit_failures_total")) == 0
    log = guard.log_text()
    unpublished = [line for line in log.splitlines() if "not published" in line]
    assert len(unpublished) == 2, unpublished  # one line per report kind
    assert "Traceback" not in log and "could not write" not in log, log

    install(plane, [c for c in real_crds() if c["spec"]["group"] == "wgpolicyk8s.io"])
    await until(lambda: ("ClusterPolicyReport", "") in published(plane), timeout=60)
    await until(lambda: "ClusterPolicyReports are served again" in guard.log_text(), timeout=60)
    assert "Traceback" not in guard.log_text()
