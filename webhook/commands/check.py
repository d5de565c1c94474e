"""``gpu-guard check``: proposed objects evaluated as admission would, against files or the cluster.

Each change is judged as the request the API server would send for it: an UPDATE when the state
holds the object already (its version there is the old object), else a CREATE.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from policies.model import AdmissionRequest, JSONObject
from webhook.admission.changes import ObjectKey, index_objects, object_key, proposed_request
from webhook.admission.review import decision_response
from webhook.commands.common import EXIT_FINDINGS, EXIT_OK, UsageError, print_json
from webhook.config import load_config
from webhook.engine import Decision, Engine
from webhook.render.kubectl import kubectl_lines
from webhook.state.cluster import ClusterState
from webhook.state.files import LoadedObject, check_object, load_state_objects, read_objects

Checked = tuple[LoadedObject, AdmissionRequest, Decision]


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    changes = [item for path in args.file for item in read_objects(path)]
    for item in changes:
        check_object(item)
    if args.state:
        state, state_items = load_state_objects(args.state)
        existing = index_objects(state_items)
    else:
        state, existing = _live_state_and_existing(args, changes)
    engine = Engine(config)
    results: list[Checked] = []
    for item in changes:
        request = proposed_request(item.obj, existing.get(object_key(item.obj)))
        results.append((item, request, engine.evaluate(request, state)))
    if args.output == "json":
        print_json(as_json(results))
    else:
        for item, request, decision in results:
            for line in kubectl_lines(decision_response(request.uid, decision), request, item.path):
                print(line)
    return EXIT_OK if all(decision.allowed for _, _, decision in results) else EXIT_FINDINGS


def as_json(results: list[Checked]) -> dict[str, Any]:
    """``check -o json``: the verdicts of each change, and whether all of them were allowed."""
    return {
        "allowed": all(decision.allowed for _, _, decision in results),
        "results": [
            {
                "file": item.path,
                "operation": request.operation,
                "resource": request.ref.to_json(),
                "allowed": decision.allowed,
                "verdicts": [v.to_json() for v in decision.verdicts],
            }
            for item, request, decision in results
        ],
    }


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
