"""Security: TLS versions and suites, client certificates, the body limit, what the logs keep,
and overrides attributable to a user.

Everything runs over real TLS on 127.0.0.1 with throwaway CAs (tests/tls.py). The manifests'
side (webhooks never see the guard's namespace, kube-system or kubelet status traffic) is
tests/test_manifests.py; docs/security.md has the whole picture.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import logging
import ssl
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.builders import gpu_pod, node, request, state_of, vm, with_labels
from tests.test_server import GOOD, innocuous_review, well_formed
from tests.tls import Material, client_context, make_material
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import DEFAULT_MAX_BODY, Admission
from webhook.admission.server import (
    HEALTHZ_PATH,
    MUTATE_PATH,
    READYZ_PATH,
    VALIDATE_PATH,
    listen,
    make_app,
)
from webhook.admission.tls import make_ssl_context
from webhook.certs.issue import CertificatePair
from webhook.engine import Engine

# --- certificates the production helpers do not make ------------------------------------------


def _signed(
    ca: CertificatePair,
    subject: str,
    public_key: Any,
    usage: x509.ObjectIdentifier,
    hosts: tuple[str, ...] = (),
) -> bytes:
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(h)) for h in hosts]),
            critical=False,
        )
    return builder.sign(ca.private_key(), hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any) -> bytes:
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem


def client_certificate(
    ca: CertificatePair, name: str = "gpu-guard.gpu-guard.svc"
) -> CertificatePair:
    """What the API server presents from its AdmissionConfiguration kubeconfig: clientAuth."""
    key = ec.generate_private_key(ec.SECP256R1())
    return CertificatePair(
        _signed(ca, name, key.public_key(), ExtendedKeyUsageOID.CLIENT_AUTH), _key_pem(key)
    )


def rsa_serving_certificate(ca: CertificatePair) -> CertificatePair:
    """An RSA serving certificate for 127.0.0.1: RSA key exchange suites need one to exist."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _signed(
        ca, "127.0.0.1", key.public_key(), ExtendedKeyUsageOID.SERVER_AUTH, ("127.0.0.1",)
    )
    return CertificatePair(cert, _key_pem(key))


@dataclass(frozen=True)
class Files:
    cert: str
    key: str


def write_pair(directory: Path, name: str, pair: CertificatePair) -> Files:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    key.chmod(0o600)
    return Files(str(cert), str(key))


# --- a server and raw TLS connections -----------------------------------------------------------


def shared_state(**kwargs: Any) -> Admission:
    omen2 = node("omen2", labels={"nvidia.com/gpu.workload.config": "container"})
    return Admission(Engine(), state_of(omen2, gpu_pod("train-0", "omen2")), **kwargs)


@contextlib.asynccontextmanager
async def serving(context: ssl.SSLContext, shared: Admission | None = None) -> AsyncIterator[int]:
    """make_app on 127.0.0.1:0 behind ``context``; yields the port."""
    runner, port = await listen(
        shared or shared_state(), "127.0.0.1", 0, context, shutdown_timeout=1
    )
    try:
        yield port
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def permissive(pair: Files) -> AsyncIterator[int]:
    """A deliberately weak TLS server (any suite, TLS 1.0 up): the control that shows a client
    can speak what the guard refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.set_ciphers("ALL:@SECLEVEL=0")
        context.load_cert_chain(pair.cert, pair.key)

    async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(close, "127.0.0.1", 0, ssl=context)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def handshake(port: int, context: ssl.SSLContext) -> tuple[str, str]:
    """(protocol, cipher) of a completed handshake; raises ssl.SSLError or OSError if refused."""
    _, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"), 5
    )
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        cipher = ssl_object.cipher()
        return str(ssl_object.version()), str(cipher[0])
    finally:
        writer.close()


@pytest.fixture
def material() -> Material:
    return make_material()


@pytest.fixture
def ec_pair(material: Material, tmp_path: Path) -> Files:
    bundle = material.write(tmp_path / "ec")
    return Files(str(bundle.cert), str(bundle.key))


@pytest.fixture
def rsa_pair(material: Material, tmp_path: Path) -> Files:
    return write_pair(tmp_path / "rsa", "tls", rsa_serving_certificate(material.ca))


# --- 1. TLS versions and suites ----------------------------------------------------------------

AEAD = ("GCM", "CHACHA20-POLY1305")


def test_for_tls_1_2_the_server_offers_only_forward_secret_aead_suites(ec_pair: Files) -> None:
    offered = make_ssl_context(ec_pair.cert, ec_pair.key).get_ciphers()
    tls12 = [c["name"] for c in offered if c["protocol"] == "TLSv1.2"]
    assert tls12, "no TLS 1.2 suite at all"
    for name in tls12:
        assert name.startswith("ECDHE-"), name
        assert any(mode in name for mode in AEAD), name
    assert all(c["aead"] for c in offered if c["protocol"] == "TLSv1.2")


@pytest.mark.parametrize("key_type", ["ec_pair", "rsa_pair"], ids=["ECDSA key", "RSA key"])
async def test_a_tls_1_2_client_negotiates_ecdhe_with_an_aead_cipher(
    request: pytest.FixtureRequest, material: Material, key_type: str
) -> None:
    pair: Files = request.getfixturevalue(key_type)
    client = client_context(material, maximum=ssl.TLSVersion.TLSv1_2)
    async with serving(make_ssl_context(pair.cert, pair.key)) as port:
        protocol, cipher = await handshake(port, client)
    assert protocol == "TLSv1.2"
    assert cipher.startswith("ECDHE-") and any(mode in cipher for mode in AEAD), cipher


def weak_client(material: Material, suite: str | None, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that offers only ``suite`` (None: its defaults) at exactly ``version``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = client_context(material)
        context.minimum_version = version
        context.maximum_version = version
        context.set_ciphers(f"{suite or 'DEFAULT'}:@SECLEVEL=0")
    return context


WEAK = [
    ("AES128-SHA", "rsa_pair", "RSA key exchange (no forward secrecy), CBC, SHA-1"),
    ("AES128-GCM-SHA256", "rsa_pair", "RSA key exchange: no forward secrecy"),
    ("ECDHE-RSA-AES128-SHA", "rsa_pair", "CBC with SHA-1"),
    ("ECDHE-ECDSA-AES128-SHA", "ec_pair", "CBC with SHA-1"),
    ("ECDHE-ECDSA-AES128-SHA256", "ec_pair", "CBC, not AEAD"),
    ("NULL-SHA", "rsa_pair", "no encryption"),
    ("DES-CBC3-SHA", "rsa_pair", "3DES (Sweet32)"),
    ("RC4-SHA", "rsa_pair", "RC4"),
]


@pytest.mark.parametrize(("suite", "key_type", "why"), WEAK, ids=[w[0] for w in WEAK])
async def test_a_client_offering_only_a_weak_suite_fails_the_handshake(
    request: pytest.FixtureRequest, material: Material, suite: str, key_type: str, why: str
) -> None:
    pair: Files = request.getfixturevalue(key_type)
    try:
        client = weak_client(material, suite, ssl.TLSVersion.TLSv1_2)
    except ssl.SSLError as exc:
        pytest.skip(f"the local OpenSSL cannot build a client offering {suite}: {exc}")
    async with permissive(pair) as port:
        try:
            _, negotiated = await handshake(port, client)
        except (ssl.SSLError, OSError) as exc:
            pytest.skip(f"the local OpenSSL cannot negotiate {suite} even with itself: {exc}")
    assert negotiated == suite  # the control: this client and suite do work somewhere
    async with serving(make_ssl_context(pair.cert, pair.key)) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await handshake(port, client)


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["TLS 1.0", "TLS 1.1"]
)
async def test_a_client_older_than_tls_1_2_fails_the_handshake(
    material: Material, ec_pair: Files, version: ssl.TLSVersion
) -> None:
    try:
        client = weak_client(material, None, version)
    except (ssl.SSLError, ValueError) as exc:
        pytest.skip(f"the local OpenSSL cannot build a {version.name} client: {exc}")
    async with permissive(ec_pair) as port:
        try:
            protocol, _ = await handshake(port, client)
        except (ssl.SSLError, OSError) as exc:
            pytest.skip(f"the local OpenSSL cannot speak {version.name} at all: {exc}")
    assert protocol == version.name.replace("_", ".").replace("TLSv1.0", "TLSv1")
    async with serving(make_ssl_context(ec_pair.cert, ec_pair.key)) as port:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await handshake(port, client)


# --- 2. client certificates (--client-ca) ----------------------------------------------------


@dataclass(frozen=True)
class MutualTls:
    server: ssl.SSLContext
    material: Material
    client_ca: CertificatePair
    client: Files


@pytest.fixture
def mutual(material: Material, ec_pair: Files, tmp_path: Path) -> MutualTls:
    client_ca = make_material(ca_name="API server client CA").ca
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(client_ca.cert_pem)
    client = write_pair(tmp_path / "client", "apiserver", client_certificate(client_ca))
    server = make_ssl_context(ec_pair.cert, ec_pair.key, client_ca=str(ca_file))
    return MutualTls(server, material, client_ca, client)


VERSIONS = pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLS 1.2", "TLS 1.3"]
)


async def post_good(port: int, context: ssl.SSLContext, path: str = VALIDATE_PATH) -> int:
    """POST a good review over a fresh connection; the HTTP status, or raises if refused."""
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        session.post(f"https://127.0.0.1:{port}{path}", data=GOOD, headers=REVIEW_HEADERS) as reply,
    ):
        await reply.read()
        return reply.status


def pinned(context: ssl.SSLContext, version: ssl.TLSVersion) -> ssl.SSLContext:
    context.minimum_version = context.maximum_version = version
    return context


@VERSIONS
async def test_with_a_client_ca_a_client_without_a_certificate_is_refused(
    mutual: MutualTls, version: ssl.TLSVersion
) -> None:
    """The handshake lets it in (probes present no certificate); the review paths do not."""
    async with serving(mutual.server) as port:
        context = pinned(client_context(mutual.material), version)
        assert await post_good(port, context) == 401
        assert await post_good(port, context, MUTATE_PATH) == 401


@VERSIONS
async def test_with_a_client_ca_a_certificate_from_another_ca_is_refused(
    mutual: MutualTls, version: ssl.TLSVersion, tmp_path: Path
) -> None:
    stranger = write_pair(tmp_path / "stranger", "client", client_certificate(make_material().ca))
    context = pinned(client_context(mutual.material), version)
    context.load_cert_chain(stranger.cert, stranger.key)
    async with serving(mutual.server) as port:
        with pytest.raises(aiohttp.ClientError):
            await post_good(port, context)


@VERSIONS
async def test_with_a_client_ca_a_certificate_it_signed_gets_through(
    mutual: MutualTls, version: ssl.TLSVersion
) -> None:
    context = pinned(client_context(mutual.material), version)
    context.load_cert_chain(mutual.client.cert, mutual.client.key)
    async with serving(mutual.server) as port:
        assert await post_good(port, context) == 200
        assert await post_good(port, context, MUTATE_PATH) == 200


async def test_with_a_client_ca_probes_without_a_certificate_still_get_answers(
    mutual: MutualTls,
) -> None:
    context = client_context(mutual.material)
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with serving(mutual.server) as port, aiohttp.ClientSession(connector=connector) as s:
        for path in (HEALTHZ_PATH, READYZ_PATH):
            async with s.get(f"https://127.0.0.1:{port}{path}") as reply:
                assert reply.status == 200


# --- 3. the body limit, before parsing -------------------------------------------------------


async def raw_post(port: int, material: Material, declared: int, sent: bytes, wait: float) -> bytes:
    """Sends headers declaring ``declared`` bytes and only ``sent``; what came back in ``wait``
    seconds (b"" if nothing)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(material), server_hostname="127.0.0.1"
    )
    try:
        head = (
            f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
        )
        writer.write(head.encode() + sent)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(4096), wait)
        except TimeoutError:
            return b""
    finally:
        writer.transport.abort()  # hang up at once, as a client that gave up does


async def test_a_body_declared_over_3_mib_is_refused_with_413_before_it_is_read(
    material: Material, ec_pair: Files
) -> None:
    assert DEFAULT_MAX_BODY == 3 * 1024 * 1024
    context = make_ssl_context(ec_pair.cert, ec_pair.key)
    first_kib = GOOD[:1024]
    async with serving(context, shared_state()) as port:
        # Control: declared at the limit, the server waits for the rest of the body.
        assert await raw_post(port, material, DEFAULT_MAX_BODY, first_kib, wait=0.5) == b""
        # One byte over: 413 at once, with 1 KiB of the 3 MiB sent.
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await raw_post(port, material, DEFAULT_MAX_BODY + 1, first_kib, wait=5)
        took = loop.time() - started
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large", answer[:200]
    assert b"Content-Type: text/plain" in rest
    assert rest.endswith(
        f"invalid AdmissionReview: body of {DEFAULT_MAX_BODY + 1} bytes is over the "
        f"{DEFAULT_MAX_BODY}-byte limit\n".encode()
    )
    assert took < 2.0  # it did not wait for the 3 MiB that never came


async def test_after_a_413_the_server_stops_reading_the_body(
    material: Material, ec_pair: Files
) -> None:
    async with serving(make_ssl_context(ec_pair.cert, ec_pair.key)) as port:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(material), server_hostname="127.0.0.1"
        )
        try:
            head = (
                f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Length: {DEFAULT_MAX_BODY + 1}\r\n\r\n"
            )
            writer.write(head.encode())
            assert (await asyncio.wait_for(reader.read(4096), 5)).startswith(b"HTTP/1.1 413")
            accepted = 0
            with contextlib.suppress(ConnectionError, TimeoutError):
                for _ in range(16):  # 1 MiB more, 64 KiB at a time
                    writer.write(b"x" * 65536)
                    await asyncio.wait_for(writer.drain(), 1)
                    accepted += 65536
                    await asyncio.sleep(0.02)
        finally:
            writer.transport.abort()
    assert accepted < 1024 * 1024, f"the server read {accepted} more bytes after its 413"


async def test_a_client_that_hangs_up_mid_body_gets_no_answer_and_the_server_goes_on(
    material: Material, ec_pair: Files
) -> None:
    async with serving(make_ssl_context(ec_pair.cert, ec_pair.key)) as port:
        assert await raw_post(port, material, 4096, GOOD[:100], wait=0.2) == b""
        context = client_context(material)
        assert await post_good(port, context) == 200


async def test_a_client_that_hangs_up_mid_body_is_not_logged_as_an_unexpected_error(
    material: Material, ec_pair: Files, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gpu-guard"):
        async with serving(make_ssl_context(ec_pair.cert, ec_pair.key)) as port:
            assert await raw_post(port, material, 4096, GOOD[:100], wait=0.2) == b""
            await asyncio.sleep(0.2)  # the server notices the hang-up
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# --- 4. what the logs keep ---------------------------------------------------------------------

MARKERS = {
    "annotation": "MARK-ANNOTATION-7f3a",
    "label": "mark-label-7f3a",
    "env": "MARK-ENV-VALUE-7f3a",
    "secret": "MARK-SECRET-DATA-7f3a",
    "cloud-init": "MARK-CLOUD-INIT-PASSWORD-7f3a",
    "token": "MARK-BEARER-TOKEN-7f3a",
    "extra": "MARK-USERINFO-EXTRA-7f3a",
}


def marked(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta["annotations"] = {"example.com/note": MARKERS["annotation"]}
    meta["labels"] = {**meta.get("labels", {}), "example.com/tag": MARKERS["label"]}
    return obj


def marked_pod() -> dict[str, Any]:
    obj = marked(gpu_pod("train-1", "omen2"))
    obj["spec"]["containers"][0]["env"] = [{"name": "API_KEY", "value": MARKERS["env"]}]
    return obj


def marked_vm() -> dict[str, Any]:
    obj = marked(vm("gpu-vm", gpus=["nvidia.com/GB202_GEFORCE_RTX_5090"]))
    obj["spec"]["template"]["spec"]["volumes"] = [
        {
            "name": "cloudinit",
            "cloudInitNoCloud": {"userData": f"#cloud-config\npassword: {MARKERS['cloud-init']}"},
        }
    ]
    return obj


def marked_secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "ml"},
        "data": {"token": MARKERS["secret"]},
        "stringData": {"password": MARKERS["secret"]},
    }


def with_extra(review: dict[str, Any]) -> dict[str, Any]:
    review["request"]["userInfo"]["extra"] = {
        "authentication.kubernetes.io/credential-id": [MARKERS["extra"]],
        "token": [f"Bearer {MARKERS['token']}"],
    }
    return review


def marked_reviews() -> list[bytes]:
    omen2 = node("omen2", labels={"nvidia.com/gpu.workload.config": "container"})
    switched = marked(with_labels(omen2, {"nvidia.com/gpu.workload.config": "vm-passthrough"}))
    secret_review = with_extra(review_of(request("CREATE", node("x"))))
    secret_review["request"].update(
        kind={"group": "", "version": "v1", "kind": "Secret"},
        namespace="ml",
        name="creds",
        object=marked_secret(),
    )
    reviews = [
        with_extra(review_of(request("CREATE", marked_pod()))),
        with_extra(review_of(request("UPDATE", marked_pod(), marked_pod()))),
        with_extra(review_of(request("CREATE", marked_vm()))),
        with_extra(review_of(request("UPDATE", switched, omen2))),  # denied: a GPU pod runs
        with_extra(review_of(request("DELETE", None, marked_pod()))),
        secret_review,
    ]
    return [orjson.dumps(r) for r in reviews]


async def send_marked_reviews() -> None:
    async with TestClient(TestServer(make_app(shared_state()))) as client:
        headers = {"Authorization": f"Bearer {MARKERS['token']}", **REVIEW_HEADERS}
        for body in marked_reviews():
            for path in (VALIDATE_PATH, MUTATE_PATH):
                reply = await client.post(path, data=body, headers=headers)
                assert reply.status == 200, await reply.text()
                well_formed(await reply.json(), orjson.loads(body)["request"]["uid"])


def leaked(records: list[logging.LogRecord], level: int) -> list[str]:
    found = []
    for record in records:
        if record.levelno < level:
            continue
        text = record.getMessage() + (record.exc_text or "")
        found += [f"{record.levelname} {record.name}: {k}" for k, v in MARKERS.items() if v in text]
    return found


async def test_info_logs_never_carry_object_contents_secret_data_or_tokens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):  # every logger, every level: then judge INFO and up
        await send_marked_reviews()
    decisions = [r for r in caplog.records if r.getMessage().startswith(("decision", "mutation"))]
    assert len(decisions) == 2 * len(marked_reviews())  # one line per review and endpoint
    assert leaked(caplog.records, logging.INFO) == []


async def test_at_debug_the_logs_still_carry_no_object_contents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="gpu-guard"):
        await send_marked_reviews()
    assert leaked(caplog.records, logging.DEBUG) == []


async def test_a_line_break_in_a_review_cannot_forge_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    review = innocuous_review()
    review["request"]["uid"] = "u-1\n2026-11-30 INFO gpu-guard.server decision allowed=True"
    review["request"]["userInfo"]["username"] = "alice\nforged"
    with caplog.at_level(logging.INFO, logger="gpu-guard"):
        async with TestClient(TestServer(make_app(shared_state()))) as client:
            assert (
                await client.post(VALIDATE_PATH, data=orjson.dumps(review), headers=REVIEW_HEADERS)
            ).status == 200
    assert all("\n" not in r.getMessage() for r in caplog.records)


# --- 5. overrides: a reason, and the requesting user on record --------------------------------


def override_review(user: str, **annotations: str) -> bytes:
    omen2 = node("omen2", labels={"nvidia.com/gpu.workload.config": "container"})
    switched = with_labels(omen2, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
    switched["metadata"]["annotations"] = dict(annotations)
    return orjson.dumps(review_of(request("UPDATE", switched, omen2, user=user)))


async def validate(body: bytes) -> dict[str, Any]:
    async with TestClient(TestServer(make_app(shared_state()))) as client:
        reply = await client.post(VALIDATE_PATH, data=body, headers=REVIEW_HEADERS)
        answer: dict[str, Any] = (await reply.json())["response"]
        return answer


async def test_an_override_is_logged_with_the_authenticated_user_not_a_name_in_the_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = override_review(
        "alice@example.com",
        **{
            "gpu-guard.io/override": "workload-switch-with-gpu-pods",
            "gpu-guard.io/override-reason": "INC-7, approved by bob",
            "gpu-guard.io/override-user": "mallory",  # not a thing: who asks is userInfo
        },
    )
    with caplog.at_level(logging.INFO, logger="gpu-guard"):
        answer = await validate(body)
    assert answer["allowed"] is True
    assert answer["warnings"][0].startswith(
        "[workload-switch-with-gpu-pods] overridden by alice@example.com (INC-7, approved by bob)"
    )
    (used,) = [r for r in caplog.records if r.getMessage().startswith("override used")]
    assert used.levelno == logging.WARNING  # kept where INFO is filtered out
    message = used.getMessage()
    assert "user=alice@example.com" in message
    assert "policy=workload-switch-with-gpu-pods" in message
    assert "reason='INC-7, approved by bob'" in message
    assert "mallory" not in message


@pytest.mark.parametrize("reason", [None, "", "   "], ids=["no reason", "empty", "blank"])
async def test_an_override_without_a_reason_is_denied_and_not_logged_as_used(
    caplog: pytest.LogCaptureFixture, reason: str | None
) -> None:
    annotations = {"gpu-guard.io/override": "workload-switch-with-gpu-pods"}
    if reason is not None:
        annotations["gpu-guard.io/override-reason"] = reason
    with caplog.at_level(logging.INFO, logger="gpu-guard"):
        answer = await validate(override_review("alice", **annotations))
    assert answer["allowed"] is False
    assert "an override needs a reason" in answer["status"]["message"]
    assert "[workload-switch-with-gpu-pods]" in answer["status"]["message"]  # still denied
    assert not [r for r in caplog.records if r.getMessage().startswith("override used")]
