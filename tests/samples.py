"""The policy samples: for each policy, change files it must allow and changes it must flag.

``policies/samples/<policy-id>/`` holds ``state.yaml`` (the small cluster the samples run
against, only the objects the policy reads), ``allowed/*.yaml`` and ``disallowed/*.yaml``: change
files as ``gpu-guard check -f`` reads them, each with a comment saying what it tries and why the
policy answers as it does. A policy whose answer hangs on the cluster (KubeVirt's version, say)
adds further states: ``<policy-id>/<state-name>/state.yaml``, read after the policy's own
``state.yaml`` (an object named in both is the further state's), with its own ``allowed/`` and/or
``disallowed/``. CONTRIBUTING.md describes the convention; the tests that run them are in
tests/test_policy_samples.py (the verdicts) and tests/test_manifests.py (the routing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policies.cluster.view import ClusterView
from policies.vocabulary.requests import DELETE, AdmissionRequest
from policies.vocabulary.verdicts import Policy
from webhook.admission.changes import index_objects, object_key, proposed_request
from webhook.state.files import read_objects

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "policies" / "samples"
STATE = "state.yaml"
ALLOWED = "allowed"
DISALLOWED = "disallowed"


@dataclass(frozen=True)
class Sample:
    policy_id: str
    expectation: str
    """``allowed`` or ``disallowed``: the folder it sits in."""
    change: Path

    @property
    def states(self) -> tuple[Path, ...]:
        """The state files it runs against, in order: the policy's, then its further state's."""
        base = SAMPLES / self.policy_id / STATE
        own = self.change.parent.parent / STATE
        return (base,) if own == base else (base, own)

    @property
    def state_args(self) -> list[str]:
        return [str(path) for path in self.states]

    @property
    def name(self) -> str:
        return str(self.change.relative_to(SAMPLES))

    def requests(self) -> list[AdmissionRequest]:
        """The AdmissionRequests ``gpu-guard check`` builds from this change file."""
        existing = index_objects([o for path in self.state_args for o in read_objects(path)])
        return [
            proposed_request(item.obj, existing.get(object_key(item.obj)))
            for item in read_objects(str(self.change))
        ]


def judges_only_deletes(policy: Policy[ClusterView]) -> bool:
    """``gpu-guard check`` proposes creates and updates (a change file holds objects): a policy
    that judges only deletes has no change file to show, and is tested on requests instead."""
    return set().union(*policy.scope.values()) == {DELETE}


def state_folders(policy_id: str) -> list[Path]:
    """The policy's own sample folder, then its further states' folders, in path order."""
    folder = SAMPLES / policy_id
    return [folder, *sorted(p.parent for p in folder.glob(f"*/{STATE}"))]


def all_samples(expectation: str | None = None) -> list[Sample]:
    """Every sample under policies/samples, or those in one folder kind, in path order."""
    kinds = (expectation,) if expectation else (ALLOWED, DISALLOWED)
    return [
        Sample(folder.relative_to(SAMPLES).parts[0], kind, path)
        for policy in sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
        for folder in state_folders(policy)
        for kind in kinds
        for path in sorted((folder / kind).glob("*.yaml"))
    ]
