"""The policy samples: for each policy, change files it must allow and changes it must flag.

``policies/samples/<policy-id>/`` holds ``state.yaml`` (the small cluster the samples run
against, only the objects the policy reads), ``allowed/*.yaml`` and ``disallowed/*.yaml``: change
files as ``gpu-guard check -f`` reads them, each with a comment saying what it tries and why the
policy answers as it does. CONTRIBUTING.md describes the convention; the tests that run them are
in tests/test_policy_samples.py (the verdicts) and tests/test_manifests.py (the routing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policies.model import AdmissionRequest
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
    def state(self) -> Path:
        return SAMPLES / self.policy_id / STATE

    @property
    def name(self) -> str:
        return f"{self.policy_id}/{self.expectation}/{self.change.name}"

    def requests(self) -> list[AdmissionRequest]:
        """The AdmissionRequests ``gpu-guard check`` builds from this change file."""
        existing = index_objects(read_objects(str(self.state)))
        return [
            proposed_request(item.obj, existing.get(object_key(item.obj)))
            for item in read_objects(str(self.change))
        ]


def all_samples(expectation: str | None = None) -> list[Sample]:
    """Every sample under policies/samples, or those in one folder kind, in path order."""
    kinds = (expectation,) if expectation else (ALLOWED, DISALLOWED)
    return [
        Sample(path.parent.parent.name, path.parent.name, path)
        for path in sorted(SAMPLES.glob("*/*/*.yaml"))
        if path.parent.name in kinds
    ]
