"""AdmissionReview in and out: strict parsing, fitted warnings, answers, and kubectl's rendering.

Ground truth: the reviews a kube-apiserver v1.36 sent and what kubectl printed for the answers
(``tests/fixtures``).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import orjson
import pytest

from policies.vocabulary.requests import UPDATE, AdmissionRequest, ObjectRef, UserInfo
from policies.vocabulary.verdicts import Action, Verdict
from tests import FIXTURES
from tests.builders import DROP, edited, node, with_labels
from tests.builders import request as admission_request
from tests.conftest import fixtures_missing
from webhook.admission.compose import review_of
from webhook.admission.response import decision_response, make_response, review_body
from webhook.admission.review import ReviewError, parse_review
from webhook.admission.warnings import split_warning
from webhook.engine import Decision
from webhook.render.kubectl import VALIDATING_WEBHOOK_NAME, kubectl_lines

# --- the recorded fixtures --------------------------------------------------------------------


def recorded(number: str) -> bytes:
    """The body of the one recorded review whose file name starts with ``number``."""
    reviews = FIXTURES / "admission-reviews"
    matches = sorted(reviews.glob(f"{number}-*.json"))
    if len(matches) != 1:
        fixtures_missing(f"{reviews}/{number}-*.json")
    return matches[0].read_bytes()


def printed(name: str) -> list[str]:
    """What kubectl printed, from a kubectl-output file: every line after the command."""
    path = FIXTURES / "kubectl-output" / name
    if not path.is_file():
        fixtures_missing(str(path))
    lines = path.read_text().splitlines()
    assert lines[0].startswith("$ ")
    return lines[1:]


def recorded_request(number: str) -> AdmissionRequest:
    return parse_review(recorded(number))


# --- parse_review: what a real API server sends -----------------------------------------------

ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
KUBELET = UserInfo("system:node:omen2", ("system:nodes", "system:authenticated"))


Summary = tuple[str, str, str, str, UserInfo, bool, str]


def summary(request: AdmissionRequest) -> Summary:
    """group/version/Kind, operation, namespace, name, user, dryRun, subResource."""
    return (
        f"{request.group}/{request.version}/{request.kind}",
        request.operation,
        request.namespace,
        request.name,
        request.user,
        request.dry_run,
        request.sub_resource,
    )


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        pytest.param(
            "010",
            ("/v1/Node", "UPDATE", "", "omen2", ADMIN, True, ""),
            id="a server dry run of a node label",
        ),
        pytest.param(
            "006",
            ("/v1/Node", "UPDATE", "", "omen2", KUBELET, False, "status"),
            id="kubelet's node status patch",
        ),
        pytest.param(
            "018",
            ("policy/v1/Eviction", "CREATE", "ml", "train-0", ADMIN, False, "eviction"),
            id="a pod eviction",
        ),
        pytest.param(
            "032",
            ("kubevirt.io/v1/VirtualMachine", "CREATE", "vms", "gpu-fedora", ADMIN, False, ""),
            id="a KubeVirt VM create",
        ),
        pytest.param(
            "056",
            ("/v1/Node", "DELETE", "", "omen2", ADMIN, False, ""),
            id="a node delete",
        ),
    ],
)
def test_a_recorded_review_parses_into_what_it_says(number: str, expected: Summary) -> None:
    body = recorded(number)
    raw = orjson.loads(body)["request"]
    parsed = parse_review(body)
    assert parsed.uid == raw["uid"]
    assert summary(parsed) == expected
    assert parsed.obj == raw["object"]
    assert parsed.old == raw["oldObject"]


def test_a_delete_carries_the_old_object_and_no_new_one() -> None:
    parsed = recorded_request("056")
    assert parsed.obj is None
    assert parsed.old is not None
    assert parsed.current is parsed.old


OMEN2 = node("omen2", labels={"nvidia.com/gpu.workload.config": "container"})


def good_review() -> dict[str, Any]:
    """A node UPDATE shaped the way webhook.admission.changes (and the API server) shape it."""
    new = with_labels(OMEN2, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
    return review_of(admission_request(UPDATE, new, OMEN2, dry_run=True))


def test_a_built_review_parses_with_namespace_null_for_a_cluster_scoped_object() -> None:
    review = good_review()
    assert review["request"]["namespace"] is None
    parsed = parse_review(orjson.dumps(review))
    assert (parsed.namespace, parsed.name, parsed.kind) == ("", "omen2", "Node")
    assert parsed.dry_run is True


def test_the_name_comes_from_the_object_when_the_request_has_none() -> None:
    review = good_review()
    del review["request"]["name"]
    assert parse_review(orjson.dumps(review)).name == "omen2"


def test_absent_optional_fields_take_their_defaults() -> None:
    review = good_review()
    for key in ("dryRun", "userInfo", "namespace", "subResource"):
        review["request"].pop(key, None)
    parsed = parse_review(orjson.dumps(review))
    assert (parsed.dry_run, parsed.user, parsed.namespace, parsed.sub_resource) == (
        False,
        UserInfo(),
        "",
        "",
    )


# --- parse_review: what a real API server never sends -----------------------------------------


def with_request(**fields: Any) -> bytes:
    return edited(good_review(), True, **fields)


def with_envelope(**fields: Any) -> bytes:
    return edited(good_review(), False, **fields)


GOOD = orjson.dumps(good_review())
LAX_GROUPS = (
    "parse_review reads `info.get('groups') or []`, so a falsy non-list (\"\", {}, false, 0) "
    "becomes no groups instead of the 'expected a list of strings' error"
)

MALFORMED = [
    pytest.param(b"not json", "body is not valid JSON: ", id="not JSON"),
    pytest.param(GOOD[:-7], "body is not valid JSON: ", id="truncated JSON"),
    pytest.param(b"", "body is not valid JSON: ", id="an empty body"),
    pytest.param(b'{"apiVersion": "\xff"}', "body is not valid JSON: ", id="invalid UTF-8"),
    pytest.param(b"[" * 2000 + b"]" * 2000, "body is not valid JSON: ", id="nested too deep"),
    pytest.param(b"[]", "expected an AdmissionReview object, got list", id="a JSON array"),
    pytest.param(b'"review"', "expected an AdmissionReview object, got str", id="a JSON string"),
    pytest.param(
        with_envelope(apiVersion="admission.k8s.io/v1beta1"),
        "apiVersion must be admission.k8s.io/v1, got 'admission.k8s.io/v1beta1'",
        id="the v1beta1 apiVersion",
    ),
    pytest.param(
        with_envelope(apiVersion=DROP),
        "apiVersion must be admission.k8s.io/v1, got nothing",
        id="no apiVersion",
    ),
    pytest.param(
        with_envelope(kind="AdmissionResponse"),
        "kind must be AdmissionReview, got 'AdmissionResponse'",
        id="a wrong kind",
    ),
    pytest.param(with_envelope(request=DROP), "request: missing or not an object", id="no request"),
    pytest.param(
        with_envelope(request=None), "request: missing or not an object", id="request null"
    ),
    pytest.param(
        with_envelope(request=["uid"]), "request: missing or not an object", id="request a list"
    ),
    pytest.param(with_request(uid=DROP), "request.uid: missing", id="no uid"),
    pytest.param(with_request(uid=""), "request.uid: empty", id="an empty uid"),
    pytest.param(
        with_request(uid=42), "request.uid: expected a string, got int", id="uid a number"
    ),
    pytest.param(with_request(kind=DROP), "request.kind: missing or not an object", id="no kind"),
    pytest.param(
        with_request(kind="Node"), "request.kind: missing or not an object", id="kind a string"
    ),
    pytest.param(
        with_request(kind={"group": "", "version": "v1"}),
        "request.kind: needs string group, version and kind",
        id="kind without a kind",
    ),
    pytest.param(
        with_request(kind={"group": 1, "version": "v1", "kind": "Node"}),
        "request.kind: needs string group, version and kind",
        id="kind with a numeric group",
    ),
    pytest.param(with_request(operation=DROP), "request.operation: missing", id="no operation"),
    pytest.param(
        with_request(operation="PATCH"),
        "request.operation: unknown operation 'PATCH'",
        id="an unknown operation",
    ),
    pytest.param(
        with_request(operation="update"),
        "request.operation: unknown operation 'update'",
        id="a lower-case operation",
    ),
    pytest.param(
        with_request(object=["not", "a", "mapping"]),
        "request.object: expected an object or null, got list",
        id="object a list",
    ),
    pytest.param(
        with_request(oldObject="omen2"),
        "request.oldObject: expected an object or null, got str",
        id="oldObject a string",
    ),
    pytest.param(
        with_request(operation="CREATE", object=None, oldObject=None),
        "request.object: required for CREATE",
        id="CREATE without object",
    ),
    pytest.param(
        with_request(oldObject=None),
        "request.oldObject: required for UPDATE",
        id="UPDATE without oldObject",
    ),
    pytest.param(
        with_request(userInfo=["kubernetes-admin"]),
        "request.userInfo: expected an object",
        id="userInfo a list",
    ),
    pytest.param(
        with_request(userInfo={"username": 7}),
        "request.userInfo.username: expected a string",
        id="username a number",
    ),
    pytest.param(
        with_request(userInfo={"username": "u", "groups": "system:masters"}),
        "request.userInfo.groups: expected a list of strings",
        id="groups a string",
    ),
    pytest.param(
        with_request(userInfo={"username": "u", "groups": ["system:masters", 7]}),
        "request.userInfo.groups: expected a list of strings",
        id="groups with a number",
    ),
    pytest.param(
        with_request(userInfo={"username": "u", "groups": ""}),
        "request.userInfo.groups: expected a list of strings",
        id="groups an empty string",
    ),
    pytest.param(
        with_request(dryRun="true"), "request.dryRun: expected a boolean", id="dryRun a string"
    ),
    pytest.param(with_request(dryRun=1), "request.dryRun: expected a boolean", id="dryRun 1"),
    pytest.param(
        with_request(namespace=5),
        "request.namespace: expected a string, got int",
        id="namespace a number",
    ),
    pytest.param(
        with_request(subResource=["status"]),
        "request.subResource: expected a string, got list",
        id="subResource a list",
    ),
]


@pytest.mark.parametrize("pruned", [False, True], ids=["whole", "pruned"])
@pytest.mark.parametrize(("body", "reason"), MALFORMED)
def test_a_malformed_review_is_refused_with_a_one_line_reason(
    body: bytes, reason: str, pruned: bool
) -> None:
    with pytest.raises(ReviewError) as caught:
        parse_review(body, pruned)
    text = str(caught.value)
    assert text.startswith(reason)
    if not reason.endswith(": "):
        assert text == reason
    assert "\n" not in text
    assert len(text) <= 250
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "api_version",
    ["x" * 5000, "admission.k8s.io/v1\nTraceback (most recent call last):\n" * 20],
    ids=["a very long apiVersion", "an apiVersion full of newlines"],
)
def test_a_hostile_value_is_quoted_in_one_short_line(api_version: str) -> None:
    review = good_review()
    review["apiVersion"] = api_version
    with pytest.raises(ReviewError) as caught:
        parse_review(orjson.dumps(review))
    text = str(caught.value)
    assert "\n" not in text
    assert len(text) <= 120
    assert text.startswith("apiVersion must be admission.k8s.io/v1, got ")


def test_a_review_error_for_size_carries_413() -> None:
    error = ReviewError("body is over the 10-byte limit", 413)
    assert (str(error), error.status) == ("body is over the 10-byte limit", 413)


# --- fit_warnings: in tests/test_warning_parts.py ----------------------------------------------


# --- make_response, decision_response, review_body --------------------------------------------

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def test_an_allowed_answer_is_just_the_uid_and_allowed() -> None:
    assert make_response(UID, True) == {"uid": UID, "allowed": True}


def test_a_denial_has_status_403_and_the_message() -> None:
    response = make_response(UID, False, "[p] no")
    assert response == {
        "uid": UID,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "[p] no"},
    }


def test_warnings_are_fitted_on_allow_and_on_deny() -> None:
    long = "x" * 300
    for allowed in (True, False):
        response = make_response(UID, allowed, "[p] no", warnings=["[p] a", long])
        assert response["warnings"] == ["[p] a", *split_warning(long)]


def test_a_patch_is_a_base64_json_patch() -> None:
    patch = [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]
    response = make_response(UID, True, patch=patch)
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"], validate=True)) == patch


def test_no_patch_means_no_patch_fields() -> None:
    assert set(make_response(UID, True, patch=[])) == {"uid", "allowed"}


def test_review_body_wraps_the_response_in_an_admission_review_v1() -> None:
    response = make_response(UID, False, "[p] no", ["[p] careful"])
    assert orjson.loads(review_body(response)) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }


NODE_REF = ObjectRef("v1", "Node", "", "omen2")


def verdict(policy: str, action: Action, message: str) -> Verdict:
    return Verdict(policy=policy, action=action, resource=NODE_REF, message=message)


def test_a_decision_denies_with_every_denial_and_warns_with_every_warning() -> None:
    decision = Decision(
        [
            verdict("a", Action.DENY, "first"),
            verdict("b", Action.WARN, "careful"),
            verdict("c", Action.AUDIT, "only in the audit"),
            verdict("d", Action.DENY, "second"),
        ]
    )
    assert decision_response(UID, decision) == {
        "uid": UID,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "[a] first; [d] second"},
        "warnings": ["[b] careful"],
    }


def test_a_decision_with_no_verdicts_allows_silently() -> None:
    assert decision_response(UID, Decision()) == {"uid": UID, "allowed": True}


# --- render.kubectl_lines against what kubectl printed ----------------------------------------

RECORDER = '"recorder.gpu-guard.test"'
WARNED = "[example-policy] allowed, with this warning shown to the user"


def as_gpu_guard(lines: list[str]) -> list[str]:
    """The recorder's lines with gpu-guard's webhook name in place of the recorder's."""
    return [line.replace(RECORDER, f'"{VALIDATING_WEBHOOK_NAME}"') for line in lines]


def test_a_denial_renders_like_kubectl_apply_prints_it() -> None:
    expected = as_gpu_guard(printed("feedback-denied.txt"))
    request = recorded_request("044")
    response = make_response(
        request.uid,
        False,
        "[example-policy] this is how a denial message reaches the user",
        ["[example-policy] first warning text", "[other-policy] second warning text"],
    )
    assert kubectl_lines(response, request, "deny.yaml") == expected


def test_a_warning_renders_like_kubectl_apply_dry_run_prints_it() -> None:
    *warnings, created = printed("feedback-warned.txt")
    request = dataclasses.replace(recorded_request("046"), dry_run=True)
    response = make_response(request.uid, True, warnings=[WARNED])
    assert kubectl_lines(response, request, "warn.yaml") == [
        *warnings,
        f"{created} (server dry run)",
    ]


def test_a_real_apply_renders_without_the_dry_run_suffix() -> None:
    expected = printed("feedback-warned.txt")
    request = recorded_request("046")
    assert request.dry_run is False
    response = make_response(request.uid, True, warnings=[WARNED])
    assert kubectl_lines(response, request, "warn.yaml") == expected


@pytest.mark.parametrize(
    ("number", "output"),
    [
        ("032", "vm-create.txt"),
        ("034", "vm-update-apply.txt"),
        ("028", "kubevirt-create.txt"),
        ("030", "kubevirt-update-apply.txt"),
        ("038", "vmi-create.txt"),
        ("040", "clusterpolicy-create.txt"),
    ],
    ids=["VM create", "VM apply", "KubeVirt create", "KubeVirt apply", "VMI create", "CP create"],
)
def test_an_allowed_apply_names_the_object_as_kubectl_does(number: str, output: str) -> None:
    [line] = printed(output)
    request = dataclasses.replace(recorded_request(number), dry_run=True)
    response = make_response(request.uid, True)
    assert kubectl_lines(response, request, "file.yaml") == [f"{line} (server dry run)"]
