"""What gpu-guard answers, as one JSON document: the yardstick for refactors that must not change
behaviour (issue 12: "the same verdicts, messages and JSON before and after").

It records, in process:
- every recorded AdmissionReview in tests/fixtures (validate and mutate, as the server
  answers them) against the home-lab state, with the mutation enabled;
- ``check`` of every home-lab change file, in text and JSON;
- ``audit`` of the home-lab state in every output format, at the demo's fixed ``--now``;
- ``audit`` of small synthetic clusters (many nodes, VMs and failure shapes) in JSON.

``python -m tools.behaviour -o tests/data/behaviour.json`` writes it; the test
``tests/test_behaviour.py`` recomputes it and compares, so a refactor that changes an answer
fails with the name of the case that changed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from tests import FIXTURES
from webhook.cli import main as cli_main
from webhook.state.pciids import PCI_IDS_ENV

ROOT = Path(__file__).resolve().parent.parent
OPENSHIFT = ROOT / "examples" / "openshift"
HOMELAB = ROOT / "examples" / "homelab"
NOW = "2026-10-30T12:00:00Z"
AUDIT_FORMATS = ("json", "yaml", "text", "table", "markdown", "policyreport")


def run_cli(argv: Sequence[str]) -> dict[str, Any]:
    """One ``gpu-guard`` command: its exit code and what it printed (stderr's last line)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def review_answers(state: Path, folders: Sequence[Path] | None = None) -> dict[str, Any]:
    """Each recorded review as /validate or /mutate answers it (mutation enabled)."""
    from policies.registry import ALL_MUTATIONS
    from webhook.admission.response import decision_response, make_response
    from webhook.admission.review import parse_review
    from webhook.config import GuardConfig
    from webhook.engine import Engine
    from webhook.state.files import load_state

    view = load_state([str(state)])
    config = GuardConfig(mutations=frozenset(m.id for m in ALL_MUTATIONS))
    engine = Engine(config)
    out: dict[str, Any] = {}
    if folders is None:
        folders = [FIXTURES / "admission-reviews", FIXTURES / "dra" / "admission-reviews"]
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            name = f"{folder.parent.name}/{path.name}"
            try:
                request = parse_review(path.read_bytes())
            except ValueError as exc:
                out[name] = {"rejected": str(exc)}
                continue
            if "-mutate-" in path.name:
                result = engine.mutate(request, view)
                out[name] = make_response(request.uid, True, "", result.warnings, result.patch)
            else:
                out[name] = decision_response(request.uid, engine.evaluate(request, view))
    return out


def synthetic_states(folder: Path) -> list[Path]:
    """Small generated clusters: every generator shape, at a size a test can afford."""
    from bench.synthetic import write_list

    paths = []
    for seed in (1, 2, 3):
        path = folder / f"synthetic-{seed}.json"
        write_list(path, "json", scale=0.004, seed=seed)
        paths.append(path)
    return paths


def capture(workdir: Path) -> dict[str, Any]:
    """Every answer, from the repository alone: the committed pci.ids, not the machine's (its
    names would otherwise reach the messages, and the freeze would hold on one machine only)."""
    with mock.patch.dict(os.environ, {PCI_IDS_ENV: ""}):
        return _capture(workdir)


def _capture(workdir: Path) -> dict[str, Any]:
    state = HOMELAB / "cluster.yaml"
    out: dict[str, Any] = {"reviews": review_answers(state), "check": {}, "audit": {}}
    for change in sorted((HOMELAB / "changes").glob("*.yaml")):
        for fmt in ("text", "json"):
            argv = ["check", "-f", str(change), "--state", str(state), "-o", fmt]
            out["check"][f"{change.name} -o {fmt}"] = run_cli(argv)
    for fmt in AUDIT_FORMATS:
        argv = ["audit", "--state", str(state), "--now", NOW, "-o", fmt]
        out["audit"][f"homelab -o {fmt}"] = run_cli(argv)
    # OpenShift Virtualization: HCO's recorded reviews and the example's changes, on its state.
    openshift = OPENSHIFT / "cluster.yaml"
    out["reviews"].update(review_answers(openshift, [FIXTURES / "hco" / "admission-reviews"]))
    for change in sorted((OPENSHIFT / "changes").glob("*.yaml")):
        argv = ["check", "-f", str(change), "--state", str(openshift), "-o", "json"]
        out["check"][f"openshift/{change.name} -o json"] = run_cli(argv)
    argv = ["audit", "--state", str(openshift), "--now", NOW, "-o", "json"]
    out["audit"]["openshift -o json"] = run_cli(argv)
    for config in sorted((ROOT / "tests" / "data").glob("behaviour-*.yaml")):
        argv = ["audit", "--state", str(state), "--now", NOW, "--config", str(config)]
        out["audit"][f"homelab --config {config.name} -o json"] = run_cli([*argv, "-o", "json"])
    for path in synthetic_states(workdir):
        for fmt in ("json", "policyreport"):
            argv = ["audit", "--state", str(path), "--now", NOW, "-o", fmt]
            out["audit"][f"{path.stem} -o {fmt}"] = run_cli(argv)
    # Paths differ between checkouts: record them relative to the repository.
    text = json.dumps(out, indent=1, sort_keys=True).replace(str(ROOT) + "/", "")
    text = text.replace(str(workdir) + "/", "")
    result: dict[str, Any] = json.loads(text)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="-")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = capture(Path(tmp))
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
