"""admin-access-namespace: the label that lets a namespace's DRA claims with adminAccess reach
every device in use (KEP-5018)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.kinds import NAMESPACE, object_ref
from policies.rules.admin_access_namespace import POLICY, audit, check
from tests.builders import Obj, judged_by, node, request, state_of
from tests.dra_builders import gpu, resource_claim, resource_slice

LABEL = "resource.kubernetes.io/admin-access"


def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


ADMIN = namespace("monitoring", **{LABEL: "true"})
PLAIN = namespace("monitoring")
IN_USE = [
    node("dgx-1"),
    resource_slice("dgx-1-slice", "dgx-1", [gpu("gpu-0")]),
    resource_claim("train-gpu", allocated=("dgx-1", "dgx-1", "gpu-0"), reserved_for=["train-0"]),
]


@pytest.mark.parametrize(
    ("review", "judged"),
    [
        (request("CREATE", ADMIN), True),
        (request("UPDATE", ADMIN, PLAIN), True),
        (request("DELETE", None, ADMIN), False),
    ],
    ids=["create", "update", "delete"],
)
def test_the_scope_is_namespace_creates_and_updates(review: Any, judged: bool) -> None:
    assert judged_by(POLICY, review) is judged


def test_adding_the_label_is_warned_naming_the_devices_in_use() -> None:
    (finding,) = check(request("UPDATE", ADMIN, PLAIN), state_of(*IN_USE))
    assert finding.message.startswith(
        f"namespace monitoring is labelled {LABEL}=true: its claims with adminAccess are given "
        "devices other workloads hold, in any namespace (1 device in use now: gpu-0 on dgx-1 "
        "(claim ml/train-gpu))."
    )
    assert finding.remediation == (
        f"kubectl label namespace monitoring {LABEL}- unless it is meant for device monitoring "
        "or diagnostics",
    )


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(request("UPDATE", ADMIN, ADMIN), id="the label was there already"),
        pytest.param(request("CREATE", namespace("m", **{LABEL: "false"})), id="any other value"),
        pytest.param(request("CREATE", namespace("m", team="ml")), id="another label"),
    ],
)
def test_what_grants_nothing_new_is_let_through(review: Any) -> None:
    assert check(review, state_of(*IN_USE)) == ()


def test_the_audit_lists_every_namespace_with_the_label() -> None:
    view = state_of(*IN_USE, ADMIN, namespace("ml"), namespace("debug", **{LABEL: "true"}))
    assert [ref for ref, _ in audit(view)] == [
        object_ref(NAMESPACE, "", "debug"),
        object_ref(NAMESPACE, "", "monitoring"),
    ]
