"""``gpu-guard check``: proposed objects evaluated as admission would, against files or the cluster.

Each object of the change files is judged in order, as ``kubectl apply -f`` would send them: an
UPDATE when the state holds the object already (its version there is the old object), else a
CREATE; an object allowed is in the state the next one is judged against, so a later document
naming the same object is an UPDATE of the earlier result. A CREATE that reads as a change (see
``reads_as_a_change``) carries a note that it was judged against nothing. Each answer says which
policies judged the object, or why none did. Exit: 2 on a file's problem, else 1 on a deny, else 3
when a policy did not judge for want of a kind the state never saw (``--allow-partial``: 0).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any

from policies.diagnoses.operator import check_note
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import CREATE, AdmissionRequest, JSONObject
from webhook.admission.changes import (
    ObjectKey,
    index_objects,
    object_key,
    proposed_request,
    read_change_files,
    reads_as_a_change,
)
from webhook.admission.response import decision_response
from webhook.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_NOT_JUDGED,
    EXIT_OK,
    UsageError,
    follow_configuration,
    print_json,
    state_files_read,
)
from webhook.config import load_config
from webhook.coverage import StateCoverage
from webhook.engine import Decision, Engine
from webhook.render.kubectl import kubectl_lines, kubectl_name
from webhook.state.files import LoadedObject, load_state_objects


@dataclass(frozen=True, slots=True)
class Checked:
    """One object's answer, and the note that comes with it when it was judged against nothing."""

    item: LoadedObject
    request: AdmissionRequest
    decision: Decision
    note: str | None = None


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.device_taint_rules)
    changes = read_change_files(args.file, args.namespace, args.recursive)
    for problem in changes.problems:
        print(f"gpu-guard: {problem}", file=sys.stderr)
    if not changes.objects:
        return EXIT_BAD_INPUT
    coverage: StateCoverage | None = None
    if args.state:
        state, state_items = load_state_objects(args.state)
        state_files_read(state, args.state)
        existing, where = index_objects(state_items), "state"
        coverage = StateCoverage(state.seen_kinds())
    else:
        (state, existing), where = _live_state_and_existing(args, changes.objects), "cluster"
    engine = Engine(config)
    follow_configuration(state, engine)
    several = check_note(state)  # before the changes: the ClusterPolicies they were judged by
    results = judge_in_order(engine, state, existing, changes.objects, where, coverage)
    problems = [str(problem) for problem in changes.problems]
    if args.output == "json":
        out = as_json(results, problems)
        if several:
            out["notes"] = [several]
        print_json(out)
    else:
        if several:
            print(f"Note: {several}")
        for checked in results:
            response = decision_response(checked.request.uid, checked.decision)
            notes = [checked.note] if checked.note else []
            for line in kubectl_lines(response, checked.request, checked.item.path, notes):
                print(line)
            print(f"  gpu-guard: {accounted_for(checked.request, checked.decision)}")
    if problems:
        return EXIT_BAD_INPUT
    return exit_code(results, args.allow_partial)


def exit_code(results: list[Checked], allow_partial: bool = False) -> int:
    """1 on any deny; else 3 when a policy did not judge for want of a kind (unless
    ``allow_partial``); else 0."""
    if not all(checked.decision.allowed for checked in results):
        return EXIT_FINDINGS
    partial = any(v.unseen for checked in results for v in checked.decision.verdicts)
    return EXIT_NOT_JUDGED if partial and not allow_partial else EXIT_OK


def accounted_for(request: AdmissionRequest, decision: Decision) -> str:
    """Who judged this object: the policies, or why none did (exempt, a kind none reads)."""
    if decision.exempt:
        return f"not judged: exempt ({decision.exempt})"
    parts = [f"judged by {', '.join(decision.judged)}"] if decision.judged else []
    parts += [f"exempt from {'; '.join(decision.exempted)}"] if decision.exempted else []
    return "; ".join(parts) or f"no gpu-guard policy judges a {request.operation} of {request.kind}"


def judge_in_order(
    engine: Engine,
    state: ClusterState,
    existing: dict[ObjectKey, JSONObject],
    changes: list[LoadedObject],
    where: str,
    coverage: StateCoverage | None = None,
) -> list[Checked]:
    """Each change judged against what the earlier ones, where allowed, left behind; what
    ``coverage`` did not see is "not judged" where an answer needs it."""
    current = dict(existing)
    results = []
    for item in changes:
        key = object_key(item.obj)
        request = proposed_request(item.obj, current.get(key))
        decision = engine.evaluate(request, state, coverage)
        note = None
        if request.operation == CREATE and reads_as_a_change(item.obj):
            note = (
                f"{kubectl_name(request)} is not in the {where}: "
                "judged as a CREATE of exactly what the file holds"
            )
        results.append(Checked(item, request, decision, note))
        if decision.allowed and request.obj is not None:
            current[key] = request.obj
            try:
                state.upsert(request.obj)
            except ObjectError as exc:
                raise item.error(exc.path, f"{exc.problem} (once applied)") from None
    return results


def as_json(results: list[Checked], problems: list[str] | None = None) -> dict[str, Any]:
    """``check -o json``: one result per object, in the order judged, and whether all of them
    were allowed; ``errors`` (only when there are any) the files or objects that could not be
    judged, which make ``allowed`` false; ``note`` on a result judged against nothing."""
    out: dict[str, Any] = {
        "allowed": not problems and all(checked.decision.allowed for checked in results),
        "results": [_result_json(checked) for checked in results],
    }
    if problems:
        out["errors"] = problems
    return out


def _result_json(checked: Checked) -> dict[str, Any]:
    result = {
        "file": checked.item.path,
        "operation": checked.request.operation,
        "resource": checked.request.ref.to_json(),
        "allowed": checked.decision.allowed,
        "verdicts": [v.to_json() for v in checked.decision.verdicts],
        "judgedBy": checked.decision.judged,
    }
    if not checked.decision.judged:
        result["notJudged"] = accounted_for(checked.request, checked.decision)
    if checked.note:
        result["note"] = checked.note
    return result


def _live_state_and_existing(
    args: argparse.Namespace, changes: list[LoadedObject]
) -> tuple[ClusterState, dict[ObjectKey, JSONObject]]:
    """The live state, and the live version of each object the change files name."""
    from webhook.state.live import RESOURCE_OF
    from webhook.state.snapshot import LiveStateError, close, synced

    async def read() -> tuple[ClusterState, dict[ObjectKey, JSONObject]]:
        live = await synced(args.kubeconfig, args.context, args.sync_timeout)
        try:
            existing = {}
            for item in changes:
                key = object_key(item.obj)
                resource = RESOURCE_OF.get(key[0])
                if resource is not None:
                    obj = await live.get_object(resource, key[1], key[2])
                    if obj is not None:
                        existing[key] = obj
            return live.state, existing
        finally:
            await close(live)

    try:
        return asyncio.run(read())
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None
