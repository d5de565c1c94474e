"""The AdmissionReview's response: what kubectl shows comes from here, no HTTP.

Answering, apart from decoding (``review.py``) and deciding (``webhook.engine``). Warnings are
fitted to what the API server passes on by ``webhook.admission.warnings``; a denial's message is
not cut and stays whole.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.admission.review import API_VERSION, KIND
from webhook.admission.warnings import fit_warnings
from webhook.engine import Decision


def make_response(
    uid: str,
    allowed: bool,
    message: str = "",
    warnings: Sequence[str] = (),
    patch: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``response`` of an AdmissionReview: what kubectl will show comes from here."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if warnings:
        response["warnings"] = fit_warnings(warnings)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
    return response


def decision_response(uid: str, decision: Decision) -> dict[str, Any]:
    return make_response(
        uid, decision.allowed, decision.deny_message, [v.text for v in decision.warnings]
    )


def review_body(response: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})
