"""The examples loaded into a real API server read as their state files do: the live audit equals
the file audit, finding for finding, and ``snapshot`` gives back the state it was loaded from as
the policies read it (every object's projection, the state's counts, the audit).

What had to be set aside, each for its reason (nothing else differs):

- ``ClusterPolicyInfo.created``: the ClusterPolicy's creationTimestamp, which the API server sets
  when the object is created in this run (the file's is when the operator was installed).
- ``ResourceClaimInfo.reserved_for[].uid``: the uid of the pod a claim is reserved for is the
  one that pod got in this run (the loader points it there, as the scheduler would); mapped back
  to the recorded pod's uid.

None were needed for defaults (the projections assume what the API server fills in: a pod's
ServiceAccount and tolerations, a claim's allocationMode and count) or for the not-ready taint
(``ControlPlane.create`` gives a new Node its own taints in place of the one the API server adds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from policies.cluster.dra_claims import ResourceClaimInfo
from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.kinds import group_kind_of
from policies.cluster.projections import PROJECTIONS
from tests.e2e.controlplane import ControlPlane
from tests.e2e.objects import load
from webhook.cli import main
from webhook.state.files import load_state_objects

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Example:
    name: str
    now: str
    """The ``--now`` of its README's audit."""

    @property
    def state(self) -> Path:
        return EXAMPLES / self.name / "cluster.yaml"


CASES = [
    Example("homelab", "2026-10-30T12:00:00Z"),
    Example("homelab-before", "2026-07-09T12:00:00Z"),
    Example("dra", "2026-10-30T12:00:00Z"),
    Example("openshift", "2026-10-30T12:00:00Z"),
    Example("confidential", "2026-10-30T12:00:00Z"),
]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``gpu-guard`` in this process: its exit code and standard output."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, out


def read_back(path: Path) -> tuple[dict[Key, Any], dict[str, int]]:
    """A state file read as the policies read it, through ``webhook.state.files`` into a
    ClusterState: every object's projection by kind, namespace and name, and the state's counts."""
    state, items = load_state_objects([str(path)])
    projected: dict[Key, Any] = {}
    for item in items:
        kind, meta = group_kind_of(item.obj), item.obj["metadata"]
        projection = PROJECTIONS.get(kind)
        key = (str(kind), meta.get("namespace") or "", meta["name"])
        projected[key] = projection(item.obj) if projection is not None else item.obj
    return projected, state.counts()


def as_recorded(info: Any, recorded_uid: Mapping[str, str]) -> Any:
    """``info`` read from the snapshot with what the API server set in this run put as the
    state file had it (the module's docstring says which and why)."""
    if isinstance(info, ClusterPolicyInfo):
        return replace(info, created=None)
    if isinstance(info, ResourceClaimInfo):
        consumers = tuple(replace(c, uid=recorded_uid.get(c.uid, c.uid)) for c in info.reserved_for)
        return replace(info, reserved_for=consumers)
    return info


@pytest.mark.parametrize("example", CASES, ids=lambda e: e.name)
def test_an_example_loaded_into_the_api_server_audits_and_snapshots_as_its_state_file(
    example: Example,
    own_control_plane: ControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plane = own_control_plane
    # a kubectl List (the home lab) or one document per object (examples/openshift)
    recorded = [
        o for d in yaml.safe_load_all(example.state.read_text()) for o in d.get("items", [d])
    ]
    held = load(plane, recorded)
    recorded_uid = {
        mine["metadata"]["uid"]: obj["metadata"]["uid"]
        for obj, mine in zip(recorded, held, strict=True)
    }
    kubeconfig = str(plane.kubeconfig)

    # The live audit is the file audit, finding for finding (and the GPU nodes' overview).
    from_file = cli(
        capsys, "audit", "--state", str(example.state), "--now", example.now, "-o", "json"
    )
    live = cli(capsys, "audit", "--kubeconfig", kubeconfig, "--now", example.now, "-o", "json")
    assert live[0] == from_file[0]
    assert orjson.loads(live[1])["findings"] == orjson.loads(from_file[1])["findings"]
    assert orjson.loads(live[1]) == orjson.loads(from_file[1])

    # A snapshot (YAML, and JSON: read by the streaming decoder) gives the state back.
    original, original_counts = read_back(example.state)
    for name in ("snapshot.yaml", "snapshot.json"):
        snapshot = tmp_path / name
        assert cli(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(snapshot))[0] == 0
        projected, counts = read_back(snapshot)
        # Namespaces are the API server's own and those ``load`` made: the examples' state
        # files hold none, the snapshot every one (admin access reads their labels).
        if not original_counts.get("Namespace"):
            projected = {k: v for k, v in projected.items() if k[0] != "Namespace"}
            counts = {**counts, "Namespace": original_counts.get("Namespace", 0)}
        assert counts == original_counts, name
        assert sorted(projected) == sorted(original), name
        for key, info in projected.items():
            assert as_recorded(info, recorded_uid) == as_recorded(original[key], {}), (name, key)
        audited = cli(capsys, "audit", "--state", str(snapshot), "--now", example.now, "-o", "json")
        assert audited == from_file, name


SWAP = "metadata.nodeSwapStatus.capacity: Invalid value: 0: must be greater than zero"


def test_a_node_reporting_a_swap_capacity_of_0_is_refused_but_through_its_status(
    own_control_plane: ControlPlane,
) -> None:
    """Every node of the examples says ``status.nodeInfo.swap.capacity: 0``. The API server
    refuses that when a Node is created with its status (as a kubelet registers, so a kubelet
    never writes it) and on every later update of the Node but through its status: it loads
    (``ControlPlane.create`` writes status through the subresource) and audits as its file, but
    a person's ``kubectl label`` of it is refused before any webhook sees it."""
    plane = own_control_plane
    (omen1,) = [
        o
        for o in yaml.safe_load((EXAMPLES / "dra" / "cluster.yaml").read_text())["items"]
        if o["kind"] == "Node" and o["metadata"]["name"] == "omen1"
    ]
    assert omen1["status"]["nodeInfo"]["swap"] == {"capacity": 0}
    status, answer = plane.request("POST", "/api/v1/nodes", omen1)
    assert (status, answer["message"]) == (422, f'Node "omen1" is invalid: {SWAP}')

    load(plane, [omen1])
    assert plane.call("GET", "/api/v1/nodes/omen1")["status"]["nodeInfo"]["swap"] == {"capacity": 0}
    done = plane.kubectl("label", "node", "omen1", "team=ml", check=False)
    assert (done.returncode, done.stderr.strip()) == (1, f'The Node "omen1" is invalid: {SWAP}')
