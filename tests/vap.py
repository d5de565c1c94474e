"""A ValidatingAdmissionPolicy run as the API server runs it, on cel-python with the Kubernetes
functions of ``policies.cel.functions``: its matchConditions, then its variables in order, then
each validation; what it denies and with which message. The real API server judges the same
policies in tests/e2e; this runs them on every sample in milliseconds."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

from policies.cel.functions import FUNCTIONS


@functools.cache
def _program(expression: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression), functions=dict(FUNCTIONS))


@dataclass(frozen=True)
class Denial:
    policy: str
    """The gpu-guard policy id the validation carries (the first quoted id it tests)."""
    message: str
    reason: str


_ID = re.compile(r"'([a-z0-9-]+)' in variables\.denying")


def run_policy(
    spec: Mapping[str, Any],
    request: Mapping[str, Any],
    params: Mapping[str, Any] | None,
    policy_id: str = "",
) -> list[Denial] | None:
    """The denials of one policy on one AdmissionRequest body; None when it does not apply
    (a matchCondition false, or no params where it reads them: parameterNotFoundAction Allow).
    ``policy_id``: the gpu-guard policy a validation carries when it does not name one."""
    if params is None and "paramKind" in spec:
        return None
    activation: dict[str, Any] = {
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
        "request": json_to_cel(dict(request)),
        "params": json_to_cel(dict(params)) if params is not None else None,
    }
    for condition in spec.get("matchConditions", []):
        if not bool(_program(condition["expression"]).evaluate(activation)):
            return None
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celtypes.MapType(
            {celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[variable["name"]] = _program(variable["expression"]).evaluate(activation)
    activation["variables"] = celtypes.MapType(
        {celtypes.StringType(k): v for k, v in variables.items()}
    )
    denials = []
    for validation in spec["validations"]:
        result = _program(validation["expression"]).evaluate(activation)
        assert isinstance(result, celtypes.BoolType), f"{validation['expression']!r}: {result!r}"
        if not result:
            found = _ID.search(validation["expression"])
            message = str(_program(validation["messageExpression"]).evaluate(activation))
            denials.append(
                Denial(
                    found.group(1) if found else policy_id, message, validation.get("reason", "")
                )
            )
    return denials
