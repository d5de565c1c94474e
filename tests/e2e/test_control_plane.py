"""The tier's own ground: the control plane the fixtures start is what the other tests assume,
and what a bare kube-apiserver does where a full cluster would differ (restarts, compaction)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from policies.cluster.kinds import (
    DEVICE_TAINT_RULE,
    OPENREPORTS_GROUP,
    RESOURCE_OF,
    REVIEWED,
    WATCHED,
    WRITTEN,
)
from tests.e2e.controlplane import ControlPlane
from tests.e2e.objects import HOLD, load
from tests.test_cli import STATE


def _answers(plane: ControlPlane) -> dict[str, int]:
    """What ``plane`` answers a list of every kind gpu-guard reads, judges and writes."""
    answers = {r.path: plane.request("GET", f"{r.path}?limit=1")[0] for r in WATCHED}
    answers |= {r.path: plane.request("GET", f"{r.path}?limit=1")[0] for r in REVIEWED}
    # OpenReports' CRDs only where a test installs them (tests/e2e/test_openreports.py): served,
    # they would move every other test's reports there (--report-format auto).
    written = [r for r in WRITTEN if r.kind.group != OPENREPORTS_GROUP]
    answers |= {r.path: plane.request("GET", f"{r.path}?limit=1")[0] for r in written}
    return answers


def test_the_every_kind_control_plane_serves_every_kind_gpu_guard_reads_judges_and_writes(
    every_kind_control_plane: ControlPlane,
) -> None:
    answers = _answers(every_kind_control_plane)
    assert RESOURCE_OF[DEVICE_TAINT_RULE].path in answers
    assert answers == dict.fromkeys(answers, 200)


def test_the_shared_control_plane_serves_every_kind_but_those_of_an_optional_api_version(
    control_plane: ControlPlane,
) -> None:
    # DeviceTaintRules are served by 1.36 only under resource.k8s.io/v1beta2, switched on by
    # DRA_TAINT_ARGS (every_kind_control_plane). The shared plane runs without them, as most
    # 1.36 clusters do: its tests see the kind as not installed (404), which the live reader
    # counts as none.
    optional = RESOURCE_OF[DEVICE_TAINT_RULE].path
    answers = _answers(control_plane)
    assert answers == dict.fromkeys(answers, 200) | {optional: 404}


def test_a_test_namespace_is_new_and_takes_pods_at_once(
    control_plane: ControlPlane, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }
    created = control_plane.create(pod)
    assert created["status"]["phase"] == "Running"  # set through the status subresource
    assert created["spec"]["serviceAccountName"] == "default"
    listed = control_plane.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout
    assert listed.split() == ["pod/p"]


def test_helm_reads_the_same_kubeconfig_as_kubectl(
    control_plane: ControlPlane, namespace: str
) -> None:
    listed = control_plane.helm("list", "-n", namespace).stdout
    assert listed.split()[:2] == ["NAME", "NAMESPACE"]


def test_the_home_lab_loads_as_its_state_file_holds_it(own_control_plane: ControlPlane) -> None:
    recorded = yaml.safe_load(Path(STATE).read_text())["items"]
    created = load(own_control_plane, recorded)

    def key(obj: dict[str, Any]) -> tuple[str, str, str]:
        return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

    held = {key(obj): obj for obj in created}
    for obj in recorded:
        mine = held[key(obj)]
        if "status" in obj:
            assert mine.get("status") == obj["status"] or obj["kind"] == "Pod", key(obj)
        if obj["kind"] == "Node":
            assert mine["spec"].get("taints") == obj["spec"].get("taints"), key(obj)
        if obj["kind"] == "Pod":
            for field in ("phase", "containerStatuses"):
                assert mine["status"].get(field) == obj["status"].get(field), key(obj)
            assert ("deletionTimestamp" in mine["metadata"]) == (
                "deletionTimestamp" in obj["metadata"]
            ), key(obj)
    uids = {key(obj): obj["metadata"]["uid"] for obj in created}
    for obj in created:
        for ref in obj["metadata"].get("ownerReferences", []):
            owner = (ref["kind"], obj["metadata"].get("namespace", ""), ref["name"])
            if owner in uids:
                assert ref["uid"] == uids[owner], key(obj)
    terminating = [o for o in created if "deletionTimestamp" in o["metadata"]]
    assert terminating and all(HOLD in o["metadata"]["finalizers"] for o in terminating)


def test_a_restarted_api_server_keeps_its_data_and_tokens_and_forgets_its_watch_history(
    own_control_plane: ControlPlane, tmp_path: Path
) -> None:
    plane = own_control_plane
    plane.create_namespace("kept")
    plane.kubectl("create", "serviceaccount", "reader", "-n", "kept")
    # Not the aggregated `view`: without the controller-manager it aggregates nothing.
    plane.kubectl("create", "role", "reader", "-n", "kept", "--verb=list", "--resource=configmaps")
    plane.kubectl(
        "create",
        "rolebinding",
        "reader",
        "-n",
        "kept",
        "--role=reader",
        "--serviceaccount=kept:reader",
    )
    token = plane.kubeconfig_for(plane.token("kept", "reader"), tmp_path / "reader")
    accounts = "/api/v1/namespaces/kept/serviceaccounts"
    version = plane.call("GET", accounts)["metadata"]["resourceVersion"]
    watch = f"{accounts}?watch=1&timeoutSeconds=1&resourceVersion={version}"
    plane.kubectl("create", "configmap", "later", "-n", "kept")  # etcd moves on past it

    # etcd compacted: a list at the older version is gone, a watch from it is still served
    # from the API server's watch cache.
    plane.compact()
    exact = f"{accounts}?resourceVersion={version}&resourceVersionMatch=Exact"
    assert plane.request("GET", exact)[0] == 410
    status, body = plane.request("GET", watch)
    assert status == 200 and "ERROR" not in str(body), body

    plane.restart_api_server()
    assert plane.readyz() == 200
    got = plane.kubectl("get", "configmaps", "-n", "kept", "-o", "name", kubeconfig=token)
    assert got.stdout.split() == ["configmap/later"]
    # The restarted API server's watch cache starts after that version: 410 in the stream.
    status, body = plane.request("GET", watch)
    assert status == 200 and isinstance(body, dict), body
    assert body["type"] == "ERROR" and body["object"]["code"] == 410, body
