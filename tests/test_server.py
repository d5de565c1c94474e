"""The webhook over real TLS with a real HTTP client: recorded reviews, bad input, health, TLS.

Every test starts the aiohttp app on 127.0.0.1 (port 0) behind ``make_ssl_context`` with a
throwaway CA from ``tests/tls.py`` and talks to it with ``aiohttp.ClientSession``. The recorded
AdmissionReviews come from ``tests/fixtures`` (see its README): a kube-apiserver's own bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import aiohttp
import orjson
import pytest

from policies.cluster.kinds import NODE
from policies.cluster.view import ClusterView
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding, Policy
from tests import FIXTURES
from tests.builders import DROP, Obj, dead_node, edited, gpu_pod, node, state_of, with_labels
from tests.builders import request as admission_request
from tests.conftest import fixtures_missing
from tests.tls import (
    Bundle,
    Material,
    client_context,
    legacy_tls11_context,
    legacy_tls11_server_context,
    make_bundle,
    make_material,
)
from webhook.admission import connections, server
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import Admission
from webhook.admission.server import (
    HEALTHZ_PATH,
    READYZ_PATH,
    VALIDATE_PATH,
    Lifecycle,
    listen,
    serve,
)
from webhook.admission.tls import make_ssl_context
from webhook.config import GuardConfig
from webhook.engine import Decision, Engine, Freshness

# --- the recorded reviews ---------------------------------------------------------------------


REVIEWS_DIR = FIXTURES / "admission-reviews"
REVIEW_FILES = sorted(REVIEWS_DIR.glob("*.json"))
DELETE_FILES = [p for p in REVIEW_FILES if "-delete-" in p.name]


def present(path: Path | None) -> Path:
    if path is None or not path.is_file():
        fixtures_missing(str(path or REVIEWS_DIR))
    return path


def recorded(number: str) -> bytes:
    """The body of the one recorded review whose file name starts with ``number``."""
    matches = sorted(REVIEWS_DIR.glob(f"{number}-*.json"))
    if len(matches) != 1:
        fixtures_missing(f"{REVIEWS_DIR}/{number}-*.json")
    return matches[0].read_bytes()


def files_or_missing(paths: Sequence[Path]) -> Any:
    """Parametrize values with the file names as ids; one "missing" case when there are none."""
    if not paths:
        return [pytest.param(None, id="fixtures-missing")]
    return [pytest.param(p, id=p.name) for p in paths]


# --- the world the fixtures were recorded in --------------------------------------------------

OMEN2_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-5090",
    "nvidia.com/gpu.workload.config": "container",
}
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
OMEN2 = node("omen2", labels=OMEN2_LABELS, allocatable={"nvidia.com/gpu": "1"})
TRAIN_0 = gpu_pod("train-0", "omen2")  # ml/train-0, limits nvidia.com/gpu: 1
HEALTHY_5090_PROVIDER = node(
    "omen1",
    labels={"nvidia.com/gpu.workload.config": "vm-passthrough"},
    allocatable={RTX_5090: "1"},
)
# omen2 as a node with no hardware source at all: no GFD product, no NFD device label.
OMEN2_WITHOUT_HARDWARE = node(
    "omen2",
    labels={"nvidia.com/gpu.workload.config": "container"},
    allocatable={"nvidia.com/gpu": "1"},
)


def fixture_world(*extra: Obj) -> ClusterState:
    return state_of(OMEN2, TRAIN_0, *extra)


def innocuous_review(uid: str = "5a1d3c2e-0000-4000-8000-000000000001") -> dict[str, Any]:
    """A node UPDATE nothing objects to: a maintenance label on omen2."""
    review = review_of(
        admission_request(UPDATE, with_labels(OMEN2, {"example.com/maintenance": "planned"}), OMEN2)
    )
    review["request"]["uid"] = uid
    return review


GOOD = orjson.dumps(innocuous_review())

# --- talking to the server --------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


REVIEW_KEYS = {"uid", "allowed", "status", "warnings", "patchType", "patch", "auditAnnotations"}


def well_formed(answer: Any, uid: str) -> dict[str, Any]:
    """The ``response`` of an AdmissionReview v1 answer, after checking what the API server does."""
    assert isinstance(answer, dict)
    assert set(answer) == {"apiVersion", "kind", "response"}
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response, dict)
    assert set(response) <= REVIEW_KEYS
    assert response["uid"] == uid
    assert isinstance(response["allowed"], bool)
    warnings = response.get("warnings", [])
    assert isinstance(warnings, list)
    for warning in warnings:
        assert isinstance(warning, str)
        assert 0 < len(warning) <= 256
    if not response["allowed"]:
        assert response["status"]["code"] == 403
        assert isinstance(response["status"]["message"], str)
    return response


@dataclass
class Webhook:
    base: str
    shared: Admission
    lifecycle: Lifecycle
    session: aiohttp.ClientSession

    async def post(self, body: bytes | AsyncIterable[bytes], path: str = VALIDATE_PATH) -> Reply:
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.base + path, data=body, headers=headers) as reply:
            return Reply(reply.status, reply.content_type, await reply.read())

    async def get(self, path: str) -> Reply:
        async with self.session.get(self.base + path) as reply:
            return Reply(reply.status, reply.content_type, await reply.read())

    async def review(self, body: bytes) -> dict[str, Any]:
        """Posts a review that must be answered: HTTP 200 and a well-formed AdmissionReview."""
        reply = await self.post(body)
        assert reply.status == 200, reply.text
        assert reply.content_type == "application/json"
        return well_formed(orjson.loads(reply.body), orjson.loads(body)["request"]["uid"])


StartWebhook = Callable[[Admission], Awaitable[Webhook]]


@pytest.fixture
def material() -> Material:
    return make_material()


@pytest.fixture
def bundle(tmp_path: Path, material: Material) -> Bundle:
    return material.write(tmp_path / "tls")


@pytest.fixture
async def start_webhook(bundle: Bundle, material: Material) -> AsyncIterator[StartWebhook]:
    """Starts make_app(shared) over TLS on 127.0.0.1:0; everything stops after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(shared: Admission) -> Webhook:
            context = make_ssl_context(str(bundle.cert), str(bundle.key))
            lifecycle = Lifecycle()
            runner, port = await listen(shared, "127.0.0.1", 0, context, lifecycle=lifecycle)
            stack.push_async_callback(runner.cleanup)
            session = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(material)))
            )
            return Webhook(f"https://127.0.0.1:{port}", shared, lifecycle, session)

        yield start


@pytest.fixture
async def webhook(start_webhook: StartWebhook) -> Webhook:
    return await start_webhook(Admission(Engine(), fixture_world()))


async def status_with(url: str, context: ssl.SSLContext, **kwargs: Any) -> int:
    """GET ``url`` over a fresh connection with ``context``; handshake failures raise."""
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(url, **kwargs) as reply,
    ):
        await reply.read()
        return reply.status


# --- 1. every recorded review is answered -----------------------------------------------------


@pytest.mark.parametrize("path", files_or_missing(REVIEW_FILES))
async def test_every_recorded_review_gets_a_well_formed_answer(
    webhook: Webhook, path: Path | None
) -> None:
    body = present(path).read_bytes()
    response = await webhook.review(body)
    assert response["uid"] == orjson.loads(body)["request"]["uid"]


# --- 2. what the guard says about the recorded traffic ----------------------------------------


@pytest.mark.parametrize(
    "number",
    ["010", "012"],
    ids=["the server dry run of the label", "the label for real"],
)
async def test_labelling_omen2_vm_passthrough_under_train_0_is_denied(
    webhook: Webhook, number: str
) -> None:
    response = await webhook.review(recorded(number))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("[workload-switch-with-gpu-pods]")
    assert "ml/train-0" in message
    assert "omen2" in message


async def test_a_server_dry_run_gets_exactly_the_verdict_of_the_real_change(
    webhook: Webhook,
) -> None:
    dry_body, real_body = recorded("010"), recorded("012")
    assert orjson.loads(dry_body)["request"]["dryRun"] is True
    assert orjson.loads(real_body)["request"]["dryRun"] is False
    dry, real = await webhook.review(dry_body), await webhook.review(real_body)
    assert dry.pop("uid") != real.pop("uid")
    assert dry == real


@pytest.mark.parametrize(
    "number",
    ["003", "004", "005", "006", "017", "018"],
    ids=[
        "node status patched by an admin (mutate)",
        "node status patched by an admin (validate)",
        "kubelet status traffic (mutate)",
        "kubelet status traffic (validate)",
        "pods/eviction from kubectl drain (mutate)",
        "pods/eviction from kubectl drain (validate)",
    ],
)
async def test_status_traffic_and_evictions_are_allowed_silently(
    webhook: Webhook, number: str
) -> None:
    response = await webhook.review(recorded(number))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize("path", files_or_missing(DELETE_FILES))
async def test_every_recorded_delete_is_allowed(webhook: Webhook, path: Path | None) -> None:
    body = present(path).read_bytes()
    request = orjson.loads(body)["request"]
    assert request["operation"] == "DELETE"
    assert request["object"] is None
    assert (await webhook.review(body))["allowed"] is True


async def test_a_vm_asking_for_a_device_no_healthy_node_advertises_gets_a_warning(
    start_webhook: StartWebhook,
) -> None:
    hook = await start_webhook(Admission(Engine(), fixture_world()))
    response = await hook.review(recorded("032"))
    assert response["allowed"] is True
    assert len(response["warnings"]) == 1
    warning = response["warnings"][0]
    assert warning.startswith("[passthrough-without-ready-provider]")
    assert RTX_5090 in warning


async def test_a_vm_asking_for_a_device_a_healthy_node_advertises_is_allowed_silently(
    start_webhook: StartWebhook,
) -> None:
    hook = await start_webhook(Admission(Engine(), fixture_world(HEALTHY_5090_PROVIDER)))
    response = await hook.review(recorded("032"))
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("number", "devices"),
    [("028", ["10de:2b85"]), ("030", ["10de:2b85", "10de:2204"])],
    ids=["KubeVirt CR create", "KubeVirt CR apply adding the RTX 3090"],
)
async def test_permitting_devices_no_node_has_warns(
    start_webhook: StartWebhook, number: str, devices: list[str]
) -> None:
    hook = await start_webhook(Admission(Engine(), state_of(OMEN2_WITHOUT_HARDWARE, TRAIN_0)))
    response = await hook.review(recorded(number))
    assert response["allowed"] is True
    warnings = response["warnings"]
    assert len(warnings) == len(devices)
    for warning, device in zip(warnings, devices, strict=True):
        assert warning.startswith("[permitted-device-without-hardware]")
        assert device in warning
        assert "no node has this device" in warning


# --- 2b. the recorded DRA traffic (tests/fixtures/dra) --------------------------------------

DRA_REVIEWS_DIR = FIXTURES / "dra" / "admission-reviews"
DRA_REVIEW_FILES = sorted(DRA_REVIEWS_DIR.glob("*.json"))
#: What the cluster held when the claims came: the three classes, omen2's RTX 5090 (type gpu),
#: tower1's RTX 3090 (vfio), the claims and templates, KubeVirt with its DRA gates.
DRA_WORLD = ("004", "005", "006", "007", "008", "009", "010", "011", "014", "016")
DRA_POLICIES = ("[claim-without-ready-device]", "[deviceclass-without-devices]")


def recorded_dra(number: str) -> bytes:
    matches = sorted(DRA_REVIEWS_DIR.glob(f"{number}-*.json"))
    if len(matches) != 1:
        fixtures_missing(f"{DRA_REVIEWS_DIR}/{number}-*.json")
    return matches[0].read_bytes()


def dra_world(omen2: Obj) -> ClusterState:
    objects = [orjson.loads(recorded_dra(n))["request"]["object"] for n in DRA_WORLD]
    return state_of(omen2, node("tower1"), *objects)


def dra_warnings(response: dict[str, Any]) -> list[str]:
    return [w for w in response.get("warnings", []) if w.startswith(DRA_POLICIES)]


@pytest.mark.parametrize("path", files_or_missing(DRA_REVIEW_FILES))
async def test_every_recorded_dra_review_gets_a_well_formed_answer(
    start_webhook: StartWebhook, path: Path | None
) -> None:
    hook = await start_webhook(Admission(Engine(), dra_world(node("omen2"))))
    body = present(path).read_bytes()
    assert (await hook.review(body))["uid"] == orjson.loads(body)["request"]["uid"]


@pytest.mark.parametrize(
    ("number", "said"),
    [
        ("004", None),  # gpu.nvidia.com: omen2's GPU
        ("005", None),  # vfio.gpu.nvidia.com: tower1's passthrough GPU
        ("006", "[deviceclass-without-devices] class mig.nvidia.com matches no published device"),
        ("009", None),  # ml/train-gpu: omen2's GPU fits
        (
            "010",
            "[claim-without-ready-device] request gpu: its selectors reject every device of class "
            "vfio.gpu.nvidia.com (1 device)",
        ),  # an RTX 5090 in vfio mode: only tower1's 3090 is vfio
        (
            "011",
            "[claim-without-ready-device] request mig: class mig.nvidia.com matches no published "
            "device",
        ),  # firstAvailable over two MIG profiles, both alike
        ("012", None),  # the pod using ml/train-gpu
        ("013", None),  # nvidia.com/gpu in limits: no claim to judge
        (
            "014",
            "[claim-without-ready-device] request gpu: its selectors reject every device of class "
            "gpu.nvidia.com (1 device)",
        ),  # memory > 40Gi: the RTX 5090 has 32Gi
        (
            "017",
            "[claim-without-ready-device] template vms/rtx5090-vfio request gpu: its selectors "
            "reject every device of class vfio.gpu.nvidia.com (1 device)",
        ),  # the VM's template, as for 010
        ("018", None),  # the VMI's claim tower1-3090 does not exist (yet): not judged
    ],
)
async def test_the_recorded_dra_reviews_get_the_expected_dra_verdicts(
    start_webhook: StartWebhook, number: str, said: str | None
) -> None:
    hook = await start_webhook(Admission(Engine(), dra_world(node("omen2"))))
    response = await hook.review(recorded_dra(number))
    assert response["allowed"] is True
    warnings = dra_warnings(response)
    if said is None:
        assert warnings == []
    else:
        (warning,) = warnings
        assert warning.startswith(said)


@pytest.mark.parametrize(
    ("number", "subject"),
    [("009", "request gpu"), ("012", "claim ml/train-gpu request gpu")],
    ids=["the claim", "the pod using it"],
)
async def test_a_claim_whose_only_provider_died_is_warned_with_the_node_and_its_condition(
    start_webhook: StartWebhook, number: str, subject: str
) -> None:
    hook = await start_webhook(Admission(Engine(), dra_world(dead_node("omen2"))))
    response = await hook.review(recorded_dra(number))
    assert response["allowed"] is True
    assert dra_warnings(response) == [
        f"[claim-without-ready-device] {subject}: only omen2 has a matching device (NVIDIA "
        "GeForce RTX 5090) and it is NotReady since 2026-07-10 (Kubelet stopped posting node "
        "status.); "
        + ("pods using it stay Pending" if number == "009" else "the pod stays Pending")
    ]


# --- 3. bad input is a 400 with a reason, never a 500 -----------------------------------------


def review_with(**fields: Any) -> bytes:
    """The innocuous review with request fields replaced (or removed with DROP)."""
    return edited(innocuous_review(), True, **fields)


def envelope_with(**fields: Any) -> bytes:
    """The innocuous review with top-level fields replaced (or removed with DROP)."""
    return edited(innocuous_review(), False, **fields)


MALFORMED = [
    pytest.param(b"this is not JSON", "body is not valid JSON: ", id="not JSON"),
    pytest.param(GOOD[: len(GOOD) // 2], "body is not valid JSON: ", id="truncated JSON"),
    pytest.param(b"", "body is not valid JSON: ", id="an empty body"),
    pytest.param(b"[" * 2000 + b"]" * 2000, "body is not valid JSON: ", id="JSON nested too deep"),
    pytest.param(b"[]", "expected an AdmissionReview object, got list", id="a JSON array"),
    pytest.param(
        envelope_with(apiVersion="admission.k8s.io/v1beta1"),
        "apiVersion must be admission.k8s.io/v1, got 'admission.k8s.io/v1beta1'",
        id="the v1beta1 apiVersion",
    ),
    pytest.param(
        envelope_with(kind="AdmissionResponse"),
        "kind must be AdmissionReview, got 'AdmissionResponse'",
        id="a wrong kind",
    ),
    pytest.param(envelope_with(request=DROP), "request: missing or not an object", id="no request"),
    pytest.param(
        envelope_with(request=["uid"]), "request: missing or not an object", id="request a list"
    ),
    pytest.param(review_with(uid=DROP), "request.uid: missing", id="no uid"),
    pytest.param(review_with(uid=""), "request.uid: empty", id="an empty uid"),
    pytest.param(review_with(uid=42), "request.uid: expected a string, got int", id="uid a number"),
    pytest.param(review_with(kind=DROP), "request.kind: missing or not an object", id="no kind"),
    pytest.param(
        review_with(operation="PATCH"),
        "request.operation: unknown operation 'PATCH'",
        id="an unknown operation",
    ),
    pytest.param(
        review_with(object=["not", "a", "mapping"]),
        "request.object: expected an object or null, got list",
        id="object not a mapping",
    ),
    pytest.param(
        review_with(oldObject=None),
        "request.oldObject: required for UPDATE",
        id="UPDATE without oldObject",
    ),
    pytest.param(
        review_with(userInfo={"username": "someone", "groups": ["system:masters", 7]}),
        "request.userInfo.groups: expected a list of strings",
        id="groups with a number",
    ),
    pytest.param(
        review_with(dryRun="true"), "request.dryRun: expected a boolean", id="dryRun a string"
    ),
]

SMALL_LIMIT = 16 * 1024


def assert_one_line_reason(reply: Reply, status: int, reason: str) -> None:
    assert reply.status == status, reply.text
    assert reply.content_type == "text/plain"
    assert reply.text.startswith(f"invalid AdmissionReview: {reason}")
    assert reply.text.endswith("\n")
    assert reply.text.count("\n") == 1
    assert "Traceback" not in reply.text


@pytest.fixture
async def small_webhook(start_webhook: StartWebhook) -> Webhook:
    return await start_webhook(Admission(Engine(), fixture_world(), max_body=SMALL_LIMIT))


@pytest.mark.parametrize(("body", "reason"), MALFORMED)
async def test_a_malformed_review_is_refused_with_a_one_line_reason(
    small_webhook: Webhook, body: bytes, reason: str
) -> None:
    assert_one_line_reason(await small_webhook.post(body), 400, reason)
    assert (await small_webhook.review(GOOD))["allowed"] is True


def oversized_review() -> bytes:
    review = innocuous_review()
    review["request"]["object"]["metadata"]["annotations"] = {"padding": "x" * SMALL_LIMIT}
    body = orjson.dumps(review)
    assert len(body) > SMALL_LIMIT
    return body


async def in_chunks(body: bytes, size: int = 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_body_declared_over_the_limit_is_refused_with_413(small_webhook: Webhook) -> None:
    body = oversized_review()
    reply = await small_webhook.post(body)
    assert_one_line_reason(
        reply, 413, f"body of {len(body)} bytes is over the {SMALL_LIMIT}-byte limit"
    )
    assert (await small_webhook.review(GOOD))["allowed"] is True


async def test_a_chunked_body_over_the_limit_is_refused_with_413(small_webhook: Webhook) -> None:
    reply = await small_webhook.post(in_chunks(oversized_review()))
    assert_one_line_reason(reply, 413, f"body is over the {SMALL_LIMIT}-byte limit")
    assert (await small_webhook.review(GOOD))["allowed"] is True


async def test_a_chunked_body_under_the_limit_is_answered(small_webhook: Webhook) -> None:
    reply = await small_webhook.post(in_chunks(GOOD, 64))
    assert reply.status == 200
    assert well_formed(orjson.loads(reply.body), innocuous_review()["request"]["uid"])["allowed"]


async def test_after_every_kind_of_bad_input_the_server_still_answers(
    small_webhook: Webhook,
) -> None:
    for case in MALFORMED:
        body, _ = case.values
        assert isinstance(body, bytes)
        assert (await small_webhook.post(body)).status == 400
    assert (await small_webhook.post(oversized_review())).status == 413
    assert (await small_webhook.post(in_chunks(oversized_review()))).status == 413
    assert (await small_webhook.review(GOOD))["allowed"] is True
    assert (await small_webhook.get(HEALTHZ_PATH)).status == 200


class BrokenEngine(Engine):
    """An engine with a bug outside the per-policy isolation."""

    def evaluate(
        self, request: AdmissionRequest, view: ClusterView, freshness: Freshness | None = None
    ) -> Decision:
        raise RuntimeError("a bug in the engine itself")


async def test_an_engine_bug_is_a_one_line_400_not_a_500(start_webhook: StartWebhook) -> None:
    hook = await start_webhook(Admission(BrokenEngine(), fixture_world()))
    reply = await hook.post(GOOD)
    assert reply.status == 400
    assert reply.text == "gpu-guard could not process this request (see the server log)\n"
    assert (await hook.get(HEALTHZ_PATH)).status == 200


# --- 4. health and readiness ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shutting_down", "not_ready", "status", "text"),
    [
        (False, None, 200, "ready\n"),
        (False, "no cluster state loaded yet", 503, "not ready: no cluster state loaded yet\n"),
        (True, None, 503, "shutting down\n"),
        (True, "no cluster state loaded yet", 503, "shutting down\n"),
    ],
    ids=["ready", "not ready, with the reason", "shutting down", "shutting down and not ready"],
)
async def test_readyz_says_whether_to_send_traffic_and_healthz_stays_ok(
    webhook: Webhook, shutting_down: bool, not_ready: str | None, status: int, text: str
) -> None:
    webhook.lifecycle.shutting_down = shutting_down
    webhook.lifecycle.not_ready_reason = lambda: not_ready
    ready = await webhook.get(READYZ_PATH)
    assert (ready.status, ready.text) == (status, text)
    health = await webhook.get(HEALTHZ_PATH)
    assert (health.status, health.text) == (200, "ok\n")


# --- 5. TLS -----------------------------------------------------------------------------------


async def test_a_tls_1_1_client_fails_the_handshake(
    webhook: Webhook, bundle: Bundle, material: Material
) -> None:
    try:
        legacy = legacy_tls11_context(material)
        permissive = legacy_tls11_server_context(bundle)
    except (ssl.SSLError, ValueError) as exc:
        pytest.skip(f"the local OpenSSL cannot build a TLS 1.1 context: {exc}")
    # Control: the same client completes a handshake with a server that allows TLS 1.1, so the
    # failure below is the webhook's refusal, not the client's inability.
    control = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=permissive)
    try:
        port = control.sockets[0].getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=legacy)
        except (ssl.SSLError, OSError) as exc:
            pytest.skip(f"the local OpenSSL cannot speak TLS 1.1 at all: {exc}")
        assert writer.get_extra_info("ssl_object").version() == "TLSv1.1"
        writer.close()
    finally:
        control.close()
        await control.wait_closed()
    with pytest.raises(aiohttp.ClientConnectorError):
        await status_with(webhook.base + HEALTHZ_PATH, legacy)


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLS 1.2", "TLS 1.3"]
)
async def test_tls_1_2_and_1_3_clients_are_served(
    webhook: Webhook, material: Material, version: ssl.TLSVersion
) -> None:
    context = client_context(material, minimum=version, maximum=version)
    assert await status_with(webhook.base + HEALTHZ_PATH, context) == 200


async def test_the_served_chain_verifies_with_the_ca_for_127_0_0_1(
    webhook: Webhook, material: Material
) -> None:
    port = int(webhook.base.rsplit(":", 1)[1])
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(material), server_hostname="127.0.0.1"
    )
    try:
        peer = writer.get_extra_info("peercert")
    finally:
        writer.close()
    assert ("IP Address", "127.0.0.1") in peer["subjectAltName"]
    assert peer["issuer"] == ((("commonName", "gpu-guard test CA"),),)


async def test_a_client_trusting_another_ca_refuses_the_server(webhook: Webhook) -> None:
    stranger = make_material(ca_name="some other CA")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await status_with(webhook.base + HEALTHZ_PATH, client_context(stranger))


async def test_a_name_the_certificate_does_not_cover_is_refused(
    webhook: Webhook, material: Material
) -> None:
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await status_with(
            webhook.base + HEALTHZ_PATH,
            client_context(material),
            server_hostname="gpu-guard.gpu-guard.svc",
        )


# --- 6. a policy that raises ------------------------------------------------------------------

EXPLODING = "exploding-policy"


def explode(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    raise RuntimeError("the policy has a bug")


def exploding_policy(failure_action: Action) -> Policy[ClusterView]:
    return Policy(
        id=EXPLODING,
        summary="Raises on every node update.",
        scope={NODE: frozenset({UPDATE})},
        default_action=Action.DENY,
        default_reason="A test policy.",
        failure_action=failure_action,
        check=explode,
    )


def exploding_engine(failure_action: Action) -> Engine:
    config = GuardConfig(actions={EXPLODING: Action.DENY})
    return Engine(config, policies=(exploding_policy(failure_action),))


async def test_a_policy_that_raises_and_fails_open_allows_with_a_warning(
    start_webhook: StartWebhook,
) -> None:
    hook = await start_webhook(Admission(exploding_engine(Action.WARN), fixture_world()))
    response = await hook.review(GOOD)
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith(f"[{EXPLODING}]")
    assert "could not evaluate" in warning


async def test_a_policy_that_raises_and_fails_closed_denies(
    start_webhook: StartWebhook,
) -> None:
    hook = await start_webhook(Admission(exploding_engine(Action.DENY), fixture_world()))
    response = await hook.review(GOOD)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"].startswith(f"[{EXPLODING}]")
    assert "could not evaluate" in response["status"]["message"]
    assert "warnings" not in response


async def test_a_policy_outside_the_registry_is_judged_by_its_own_defaults(
    start_webhook: StartWebhook,
) -> None:
    engine = Engine(policies=(exploding_policy(Action.WARN),))
    hook = await start_webhook(Admission(engine, fixture_world()))
    response = await hook.review(GOOD)
    assert response["allowed"] is True
    assert "could not evaluate" in response["warnings"][0]


# --- 7. serve(): certificate reload and shutdown ----------------------------------------------

POLL = 0.02


@contextlib.asynccontextmanager
async def serving(
    shared: Admission, bundle: Bundle, lifecycle: Lifecycle | None = None, **options: int
) -> AsyncIterator[str]:
    """webhook.admission.server.serve on 127.0.0.1:0 in a task; yields its base URL, cancels it
    after."""
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            shared,
            lifecycle,
            host="127.0.0.1",
            port=0,
            cert=str(bundle.cert),
            key=str(bundle.key),
            shutdown_timeout=1.0,
            started=bound.set_result,
            **options,  # type: ignore[arg-type]
        )
    )
    either: set[asyncio.Future[Any]] = {bound, task}
    await asyncio.wait(either, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    if not bound.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise AssertionError("serve did not start")
    try:
        yield f"https://127.0.0.1:{bound.result()}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not true within {timeout} s")
        await asyncio.sleep(POLL)


async def trusted_by(base: str, *cas: Material) -> bool:
    try:
        return await status_with(base + HEALTHZ_PATH, client_context(*cas)) == 200
    except aiohttp.ClientConnectorError:
        return False


async def test_a_renewed_certificate_is_served_and_no_request_fails_during_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "CERT_POLL_SECONDS", POLL)
    old, new = make_material(ca_name="old CA"), make_material(ca_name="new CA")
    bundle = old.publish(tmp_path / "tls", "v1")
    failures: list[str] = []
    answered = 0
    stop = asyncio.Event()

    async def keep_asking(base: str) -> None:
        """Reviews over a fresh connection each, from a client that trusts both CAs."""
        nonlocal answered
        connector = aiohttp.TCPConnector(ssl=client_context(old, new), force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not stop.is_set():
                try:
                    async with session.post(
                        base + VALIDATE_PATH, data=GOOD, headers=REVIEW_HEADERS
                    ) as reply:
                        await reply.read()
                        if reply.status == 200:
                            answered += 1
                        else:
                            failures.append(f"HTTP {reply.status}")
                except aiohttp.ClientError as exc:
                    failures.append(repr(exc))

    async def answered_at_least(count: int) -> bool:
        return answered >= count

    async with serving(Admission(Engine(), fixture_world()), bundle) as base:
        asker = asyncio.create_task(keep_asking(base))
        try:
            await eventually(lambda: answered_at_least(5))
            assert not await trusted_by(base, new)
            new.publish(tmp_path / "tls", "v2")
            await eventually(lambda: trusted_by(base, new))
            swapped = answered
            await eventually(lambda: answered_at_least(swapped + 5))
        finally:
            stop.set()
            await asker
        assert not await trusted_by(base, old)
    assert failures == []
    assert answered >= 10


async def test_a_half_written_pair_keeps_the_old_certificate_in_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "CERT_POLL_SECONDS", POLL)
    old, bundle = make_bundle(tmp_path / "tls", ca_name="old CA")
    new = make_material(ca_name="new CA")
    async with serving(Admission(Engine(), fixture_world()), bundle) as base:
        assert await status_with(base + HEALTHZ_PATH, client_context(old)) == 200
        await asyncio.sleep(POLL * 3)  # the reloader has taken its first look
        bundle.cert.write_bytes(new.serving.cert_pem)  # tls.key is not written yet
        await asyncio.sleep(POLL * 10)
        assert await status_with(base + HEALTHZ_PATH, client_context(old, new)) == 200


@dataclass
class RawConnection:
    """One TLS connection driven by hand, so a test knows which connection is which."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @classmethod
    async def open(cls, base: str, material: Material) -> Self:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(material), server_hostname="localhost"
        )
        return cls(reader, writer)

    async def get(self, path: str) -> int:
        """GET ``path`` on this connection (keep-alive); the status."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: gpu-guard\r\n\r\n".encode())
        return await self.answer_status()

    async def answer_status(self) -> int:
        """The status of the next answer on this connection, its body read past."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 5)
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await self.reader.readexactly(length)
        return int(head.split(b" ", 2)[1])

    async def start_review(self) -> None:
        """A review whose body never finishes: the connection stays busy."""
        self.writer.write(
            f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: gpu-guard\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        await self.writer.drain()

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    def close(self) -> None:
        self.writer.close()


def counted(shared: Admission, name: str) -> float:
    """A metric's value, read in process (a scrape would need a connection slot)."""
    for line in shared.metrics.exposition().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


async def test_past_the_limit_with_every_connection_busy_a_new_one_is_refused_and_counted(
    bundle: Bundle, material: Material
) -> None:
    """Each open connection is a queue slot; refusing the third makes the caller fail fast."""
    shared, lifecycle = Admission(Engine(), fixture_world()), Lifecycle()
    async with serving(shared, bundle, lifecycle, max_connections=2) as base:
        busy = [await RawConnection.open(base, material) for _ in range(2)]
        for connection in busy:
            await connection.start_review()
        await eventually(lambda: asyncio.sleep(0, not lifecycle.activity.idle))  # both busy

        fresh = aiohttp.TCPConnector(ssl=client_context(material), force_close=True)
        async with aiohttp.ClientSession(connector=fresh) as third:
            with pytest.raises(aiohttp.ClientError):  # a POST: not retried by the client
                async with third.post(
                    base + VALIDATE_PATH, data=GOOD, headers=REVIEW_HEADERS
                ) as reply:
                    await reply.read()
        assert counted(shared, "gpu_guard_connections_refused_total") == 1
        assert counted(shared, "gpu_guard_connections_open") == 2
        assert counted(shared, "gpu_guard_connections_evicted_total") == 0

        busy[1].close()  # a slot frees: new connections are served again
        await eventually(lambda: trusted_by(base, material))
        busy[0].close()


async def test_at_the_limit_a_new_connection_takes_the_slot_of_the_longest_idle_one(
    bundle: Bundle, material: Material, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle connections cannot hold the guard's slots against the API server."""
    monkeypatch.setattr(connections, "IDLE_GRACE", 0.05)
    shared = Admission(Engine(), fixture_world())
    async with serving(shared, bundle, max_connections=2) as base:
        older, newer = [await RawConnection.open(base, material) for _ in range(2)]
        assert await older.get(HEALTHZ_PATH) == 200
        assert await newer.get(HEALTHZ_PATH) == 200
        await asyncio.sleep(0.1)  # both idle past the grace

        newcomer = await RawConnection.open(base, material)
        assert await newcomer.get(HEALTHZ_PATH) == 200
        assert await older.closed_by_server()
        assert await newer.get(HEALTHZ_PATH) == 200  # the more recently used one stays
        assert counted(shared, "gpu_guard_connections_evicted_total") == 1
        assert counted(shared, "gpu_guard_connections_refused_total") == 0
        for connection in (older, newer, newcomer):
            connection.close()


async def test_at_the_limit_connections_just_used_keep_their_slots(
    bundle: Bundle, material: Material
) -> None:
    """More callers than slots must not make each new connection close one about to be reused."""
    shared = Admission(Engine(), fixture_world())
    async with serving(shared, bundle, max_connections=2) as base:
        held = [await RawConnection.open(base, material) for _ in range(2)]
        for connection in held:
            assert await connection.get(HEALTHZ_PATH) == 200

        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            newcomer = await RawConnection.open(base, material)
            await newcomer.get(HEALTHZ_PATH)
        assert counted(shared, "gpu_guard_connections_evicted_total") == 0
        assert counted(shared, "gpu_guard_connections_refused_total") == 1
        for connection in held:
            assert await connection.get(HEALTHZ_PATH) == 200
            connection.close()


async def test_at_the_limit_a_stalled_handshake_gives_its_slot_up(
    bundle: Bundle, material: Material, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "HANDSHAKE_GRACE", 0.05)
    shared = Admission(Engine(), fixture_world())
    async with serving(shared, bundle, max_connections=1) as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # no ClientHello
        await asyncio.sleep(0.1)

        newcomer = await RawConnection.open(base, material)
        assert await newcomer.get(HEALTHZ_PATH) == 200
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert counted(shared, "gpu_guard_connections_evicted_total") == 1
        writer.close()
        newcomer.close()


async def test_a_failed_handshake_gives_its_connection_slot_back(
    bundle: Bundle, material: Material
) -> None:
    shared = Admission(Engine(), fixture_world())
    async with serving(shared, bundle, max_connections=1) as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to a TLS port
        closed_with = await asyncio.wait_for(reader.read(), 5)  # at most a TLS alert, then EOF
        assert b"HTTP/1.1" not in closed_with
        writer.close()
        await eventually(lambda: trusted_by(base, material))


async def start_serve(
    shared: Admission, bundle: Bundle, lifecycle: Lifecycle | None = None, **options: float
) -> tuple[asyncio.Task[None], str]:
    """webhook.admission.server.serve on a free port, as a task; its base URL once it listens."""
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            shared,
            lifecycle,
            host="127.0.0.1",
            port=0,
            cert=str(bundle.cert),
            key=str(bundle.key),
            started=bound.set_result,
            **options,  # type: ignore[arg-type]
        )
    )
    return task, f"https://127.0.0.1:{await asyncio.wait_for(bound, 10)}"


async def test_serve_stops_on_sigterm_and_marks_itself_shutting_down(
    bundle: Bundle, material: Material
) -> None:
    shared, lifecycle = Admission(Engine(), fixture_world()), Lifecycle()
    task, base = await start_serve(shared, bundle, lifecycle, shutdown_timeout=1.0)
    assert await status_with(base + READYZ_PATH, client_context(material)) == 200
    # serve installs its handler right after started(); never signal a process without one.
    assert callable(signal.getsignal(signal.SIGTERM))
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 10)
    assert lifecycle.shutting_down is True
    with pytest.raises(aiohttp.ClientConnectorError):
        await status_with(base + HEALTHZ_PATH, client_context(material))


class SlowState(Admission):
    """Decides after a pause: a request that is still in flight when SIGTERM arrives."""

    async def decide(self, review: AdmissionRequest) -> Decision:
        await asyncio.sleep(0.5)
        return await super().decide(review)


async def test_sigterm_drains_with_readyz_503_and_finishes_the_request_in_flight(
    bundle: Bundle, material: Material
) -> None:
    shared = SlowState(Engine(), fixture_world())
    task, base = await start_serve(shared, bundle, shutdown_timeout=5.0, drain_delay=0.3)
    connector = aiohttp.TCPConnector(ssl=client_context(material))
    async with aiohttp.ClientSession(connector=connector) as session:
        in_flight = asyncio.create_task(
            session.post(base + VALIDATE_PATH, data=GOOD, headers=REVIEW_HEADERS)
        )
        await asyncio.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.1)
        async with session.get(base + READYZ_PATH) as ready:
            assert (ready.status, await ready.text()) == (503, "shutting down\n")
        response = await in_flight
        assert response.status == 200
        assert (await response.json())["response"]["allowed"] is True
    await asyncio.wait_for(task, 10)
