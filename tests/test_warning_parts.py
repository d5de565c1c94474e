"""A deny downgraded to a warning keeps its instruction: the API server cuts each warning at 256
characters and drops what passes 4,096 bytes, so review.py splits long ones
(docs/field-guide.md section 4). Every policy's messages are tried on the example clusters and
the policy samples, as warnings (``action: warn``) and as signed overrides of a deny."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from policies.registry import ALL_POLICIES
from policies.vocabulary.overrides import OVERRIDE_ANNOTATION, OVERRIDE_REASON_ANNOTATION
from policies.vocabulary.verdicts import Action, Verdict
from tests.samples import SAMPLES, all_samples, judges_only_deletes
from webhook.admission.changes import index_objects, object_key, proposed_request
from webhook.admission.response import decision_response, make_response
from webhook.admission.warnings import (
    INSTRUCTION_JOINER,
    WARNING_MAX_CHARS,
    WARNINGS_MAX_BYTES,
    fit_warnings,
    split_warning,
)
from webhook.config import GuardConfig
from webhook.engine import Engine
from webhook.state.files import load_state, read_objects

ROOT = Path(__file__).resolve().parent.parent
#: (change file, its state files): both example clusters and every policy's disallowed samples.
CASES: list[tuple[Path, tuple[Path, ...]]] = [
    (change, (ROOT / "examples" / example / "cluster.yaml",))
    for example in ("homelab", "dra")
    for change in sorted((ROOT / "examples" / example / "changes").glob("*.yaml"))
] + [(s.change, s.states) for s in all_samples("disallowed")]
ALL_WARN = GuardConfig(actions={p.id: Action.WARN for p in ALL_POLICIES})
REASON = "approved in the change review of the maintenance window on Saturday night"


def case_id(case: tuple[Path, tuple[Path, ...]]) -> str:
    change = case[0]
    return str(change.relative_to(SAMPLES if SAMPLES in change.parents else ROOT / "examples"))


def judged(
    change: Path, state: tuple[Path, ...], config: GuardConfig, override: bool
) -> list[tuple[list[Verdict], dict[str, Any]]]:
    """Each document's verdicts and the answer the webhook sends for it; with ``override``,
    every object names each registered policy in a signed override."""
    view = load_state([str(path) for path in state])
    existing = index_objects([o for path in state for o in read_objects(str(path))])
    engine = Engine(config)
    out = []
    for item in read_objects(str(change)):
        obj: dict[str, Any] = copy.deepcopy(dict(item.obj))
        if override:
            annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[OVERRIDE_ANNOTATION] = ",".join(p.id for p in ALL_POLICIES)
            annotations[OVERRIDE_REASON_ANNOTATION] = REASON
        request = proposed_request(obj, existing.get(object_key(obj)))
        decision = engine.evaluate(request, view)
        out.append((decision.verdicts, decision_response(request.uid, decision)))
    return out


def words(text: str) -> set[str]:
    return {word.rstrip(":;,") for word in text.split()}


def last_sentence(message: str) -> str:
    """What a policy tells the user to do: its message's last sentence, when it has several."""
    head, dot, tail = message[:-1].rpartition(". ")
    return tail + message[-1] if dot and head else ""


@pytest.mark.parametrize(("change", "state"), CASES, ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize(
    ("config", "override"),
    [(ALL_WARN, False), (GuardConfig(), True)],
    ids=["action warn", "signed override"],
)
def test_every_warning_fits_256_characters_and_keeps_its_instruction_first(
    change: Path, state: tuple[Path, ...], config: GuardConfig, override: bool
) -> None:
    for verdicts, response in judged(change, state, config, override):
        assert response["allowed"] is True
        warnings = response.get("warnings", [])
        assert isinstance(warnings, list)
        assert all(len(w) <= WARNING_MAX_CHARS for w in warnings), warnings
        assert sum(len(w.encode()) for w in warnings) <= WARNINGS_MAX_BYTES
        for verdict in verdicts:
            parts = [w for w in warnings if w.startswith(f"[{verdict.policy}] ")]
            assert words(verdict.text) <= words(" ".join(parts)), "words lost"
            instruction = last_sentence(verdict.message)
            if instruction:
                assert instruction in parts[0]


def test_the_cases_draw_a_warning_from_every_policy() -> None:
    drawn = {
        v.policy
        for change, state in CASES
        for vs, _ in judged(change, state, ALL_WARN, False)
        for v in vs
    }
    # A change file proposes creates and updates: the delete-only policies' warnings are held to
    # 256 characters in their own tests.
    assert drawn >= {p.id for p in ALL_POLICIES if not judges_only_deletes(p)}


def test_the_switch_under_gpu_pods_keeps_cordon_and_drain_in_its_first_warning() -> None:
    change = ROOT / "examples" / "homelab" / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    ((verdicts, response),) = judged(
        change, (change.parents[1] / "cluster.yaml",), GuardConfig(), True
    )
    assert len(verdicts[0].text) > WARNING_MAX_CHARS  # today's cut would lose the instruction
    first, *continued = response["warnings"]
    assert first.startswith("[workload-switch-with-gpu-pods] overridden by ")
    assert f"{INSTRUCTION_JOINER}First cordon omen1 (kubectl cordon omen1), drain" in first
    assert [w.split(" ", 2)[1] for w in continued] == [
        f"({n}/{len(continued) + 1})" for n in range(2, len(continued) + 2)
    ]


LONG = (
    "[p] node n1 would move from container to vm-passthrough while 2 pods use its GPUs: "
    + ", ".join(f"ml/pod-{i}" for i in range(30))
    + ". vfio-manager kills them. First cordon n1, then change the label."
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("[p] short", ["[p] short"]),
        ("a" * WARNING_MAX_CHARS, ["a" * WARNING_MAX_CHARS]),
        ("two\nlines,\t and  spaces ", ["two lines, and spaces"]),
        (
            "[p] " + "word " * 60,
            ["[p] (1/2) " + "word " * 48 + "word", "[p] (2/2) " + "word " * 10 + "word"],
        ),
    ],
    ids=["short", "exactly 256", "whitespace", "one long sentence at word boundaries"],
)
def test_a_warning_is_split_only_when_it_is_longer_than_256(text: str, parts: list[str]) -> None:
    assert split_warning(text) == parts


PAREN = "(seen: 10de:2236, 10de:2204)"


@pytest.mark.parametrize(
    ("text", "first_ends"),
    [
        ("[p] " + "x" * 150 + f" {PAREN}; " + "y " * 60, f"{PAREN};"),
        ("[p] " + "a, " * 45 + "x" * 150 + f" {PAREN} and more " + "y " * 40, "a,"),
        ("[p] cause: " + "word " * 60, "word"),
        ("[p] " + "word " * 30 + "(" + "in parens, " * 20 + ")", "word word"),
        ("[p] (" + "in parens, " * 30 + ")", "parens, in"),
    ],
    ids=[
        "at the clause end after a parenthesis, not inside it",
        "at the last clause end that fits, before a clause too long to follow it",
        "past a clause end that would leave the part nearly empty, at a space",
        "at a space before a parenthesis rather than inside it",
        "at a space inside a parenthesis only when it alone is longer than the room",
    ],
)
def test_a_warning_splits_at_its_last_sentence_or_clause_end_within_256(
    text: str, first_ends: str
) -> None:
    first, *rest = split_warning(text)
    assert first.endswith(first_ends), first
    assert rest and all(len(part) <= WARNING_MAX_CHARS for part in [first, *rest])
    balanced = first.count("(") == first.count(")")
    assert balanced or first_ends == "parens, in", (
        first
    )  # cut inside a parenthesis only when forced


def test_a_long_warning_leads_with_what_and_what_to_do_then_numbered_continuations() -> None:
    first, *rest = split_warning(LONG)
    assert first.startswith("[p] node n1 would move from container to vm-passthrough")
    assert first.endswith(f"{INSTRUCTION_JOINER}First cordon n1, then change the label.")
    assert [part.split(" ", 2)[1] for part in rest] == [
        f"({n}/{len(rest) + 1})" for n in range(2, len(rest) + 2)
    ]
    assert rest[-1].endswith("vfio-manager kills them.")
    assert all(len(part) <= WARNING_MAX_CHARS for part in [first, *rest])


@pytest.mark.parametrize("char", ["é", "x", "𝄞"])
def test_a_word_longer_than_a_warning_is_cut_inside_and_kept_whole_across_parts(
    char: str,
) -> None:
    parts = split_warning("[p] " + char * 1000)
    assert all(len(p) <= WARNING_MAX_CHARS for p in parts)
    assert "".join(p.split(" ", 2)[2].rstrip("…") for p in parts) == char * 1000


def note_count(note: str) -> int:
    prefix = "[gpu-guard] "
    assert note.startswith(prefix)
    count = int(note[len(prefix) :].split(" ", 1)[0])
    noun = "warning" if count == 1 else "warnings"
    assert note.endswith(f" more {noun} left out; gpu-guard check shows them all")
    return count


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (16, "a" * 252),
        (17, "a" * 252),
        (40, "w" * 250),
        (40, "é" * 300),
        (200, "[p] short"),
        (5, "𝄞" * 256),
        (12, LONG),
    ],
    ids=[
        "16 full warnings fit exactly",
        "17 full warnings",
        "40 long warnings",
        "40 long two-byte warnings",
        "200 short warnings",
        "5 four-byte warnings",
        "12 split warnings",
    ],
)
def test_warnings_stay_within_4096_bytes_first_parts_first_and_count_the_left_out(
    count: int, text: str
) -> None:
    texts = [f"{i:03d} {text}" for i in range(count)]
    groups = [split_warning(t) for t in texts]
    fitted = fit_warnings(texts)
    assert sum(len(w.encode()) for w in fitted) <= WARNINGS_MAX_BYTES
    assert all(len(w) <= WARNING_MAX_CHARS for w in fitted)
    every = [part for group in groups for part in group]
    if sum(len(w.encode()) for w in every) <= WARNINGS_MAX_BYTES:
        assert fitted == every
        return
    *kept, note = fitted
    firsts = [group[0] for group in groups]
    assert [w for w in kept if w in firsts] == firsts[: len([w for w in kept if w in firsts])]
    if len(kept) > len([w for w in kept if w in firsts]):  # a continuation only after all leads
        assert all(first in kept for first in firsts)
    assert note_count(note) == len(every) - len(kept)


def test_a_denial_stays_whole_however_long() -> None:
    message = "[p] " + "because " * 200 + "cordon and drain first."
    response = make_response("uid", False, message, warnings=[message])
    assert response["status"]["message"] == message
    assert len(response["warnings"][0]) <= WARNING_MAX_CHARS
