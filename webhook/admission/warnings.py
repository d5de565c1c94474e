"""Warnings fitted to what the API server passes on: 256 characters each, 4,096 bytes in all.

Past those limits kubectl would show truncated or no text, so a longer warning is split into
parts with its instruction (a message's last sentence) in the first part, the one kubectl users
read, and what does not fit in all is counted in a note. Text only: no review, no HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

WARNING_MAX_CHARS = 256
WARNINGS_MAX_BYTES = 4096
ELLIPSIS = "…"
_TAG = re.compile(r"(\[[^\]\s]+\]) ")
INSTRUCTION_JOINER = " — "
_LEAST_WHAT = 40
"""The shortest "what" worth putting before the instruction in a first warning."""


def _sentences(text: str) -> list[str]:
    """``text`` cut after each ``.``, ``?`` or ``!`` that ends a sentence (never inside
    parentheses, where "(Kubelet stopped posting node status.)" keeps its full stop)."""
    out: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        ends = char in ".?!" and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " ")
        if ends:
            out.append(text[start : i + 1].strip())
            start = i + 1
    rest = text[start:].strip()
    return [*out, rest] if rest else out


_CLAUSE_ENDS = frozenset(".?!:;,")


def _cut(text: str, room: int) -> tuple[str, str]:
    """The head of ``text`` within ``room`` characters and the rest: cut after its last sentence
    or clause end (``.?!:;,`` and a space) outside parentheses; at a word boundary only when no
    such end leaves the head at least half full (a clause longer than that), then at a space
    outside parentheses when one does. Never a parenthesis cut open while a cut outside one fits."""
    if len(text) <= room:
        return text, ""
    depth, clause, outside, inside = 0, -1, -1, -1
    for i, char in enumerate(text[: room + 1]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == " ":
            inside = i
            outside = i if depth <= 0 else outside
        elif char in _CLAUSE_ENDS and depth <= 0 and i < room and text[i + 1 : i + 2] == " ":
            clause = i
    if clause >= room // 2:
        return text[: clause + 1], text[clause + 2 :].strip()
    at = outside if outside >= room // 2 else inside
    if at <= 0:  # one word longer than a warning: cut inside it
        return text[: room - 1] + ELLIPSIS, text[room - 1 :]
    return text[:at], text[at + 1 :].strip()


def _pieces(text: str, room: int) -> list[str]:
    pieces: list[str] = []
    while text:
        piece, text = _cut(text, room)
        pieces.append(piece)
    return pieces


def split_warning(text: str) -> list[str]:
    """One warning as the API server passes it on: each part within 256 characters (it cuts
    longer ones), none of the text lost. A message that does not fit becomes
    ``[id] <what> — <what to do>`` (its last sentence, the instruction, in the first part,
    the one kubectl users read) and continuations ``[id] (2/3) ...`` with the rest in order."""
    flat = " ".join(text.split())
    if len(flat) <= WARNING_MAX_CHARS:
        return [flat]
    tagged = _TAG.match(flat)
    tag = tagged.group(1) + " " if tagged else ""
    body = flat[len(tag) :]
    sentences = _sentences(body)
    instruction = sentences[-1] if len(sentences) > 1 else ""
    room = WARNING_MAX_CHARS - len(tag) - len(INSTRUCTION_JOINER) - len(instruction)
    if instruction and room >= _LEAST_WHAT:
        what, rest = _cut(" ".join(sentences[:-1]), room)
        first = [f"{tag}{what.rstrip(':;,')}{INSTRUCTION_JOINER}{instruction}"]
    else:
        first, rest = [], body
    count = len(first) + 1
    while True:  # the numbering's width depends on the count it numbers
        label = f"({count}/{count}) "
        pieces = _pieces(rest, WARNING_MAX_CHARS - len(tag) - len(label))
        if len(first) + len(pieces) <= count:
            break
        count = len(first) + len(pieces)
    total = len(first) + len(pieces)
    numbered = [f"{tag}({n}/{total}) {p}" for n, p in enumerate(pieces, len(first) + 1)]
    return first + numbered


def fit_warnings(texts: Sequence[str]) -> list[str]:
    """Every warning split to fit 256 characters, all within 4,096 bytes. When not all fit,
    the first parts (each with its instruction) come before any continuation, in order, and a
    note counts what is left out."""
    groups = [split_warning(t) for t in texts]
    total = sum(len(g) for g in groups)
    if sum(len(p.encode()) for g in groups for p in g) <= WARNINGS_MAX_BYTES:
        return [p for g in groups for p in g]
    budget = WARNINGS_MAX_BYTES - len(_left_out_note(total).encode())
    kept: list[list[str]] = []
    for group in groups:  # first parts, until one does not fit
        if len(group[0].encode()) > budget:
            break
        kept.append([group[0]])
        budget -= len(group[0].encode())
    every_lead_kept = len(kept) == len(groups)
    for group, parts in zip(groups, kept, strict=False):  # then continuations, in order
        for part in group[1:] if every_lead_kept else ():
            if len(part.encode()) > budget:
                break
            parts.append(part)
            budget -= len(part.encode())
    out = [p for parts in kept for p in parts]
    return [*out, _left_out_note(total - len(out))]


def _left_out_note(count: int) -> str:
    noun = "warning" if count == 1 else "warnings"
    return f"[gpu-guard] {count} more {noun} left out; gpu-guard check shows them all"
