"""Certificate renewal: decisions under a fake clock; the Secret and caBundle sync over HTTP."""

from __future__ import annotations

import base64
import ssl
from datetime import UTC, datetime, timedelta

from cryptography import x509

from tests.fakeapi import SECRET, VALIDATING, FakeApi
from webhook.certs.issue import make_ca, make_serving_cert, service_dns_names
from webhook.certs.rotation import RotationPolicy, TlsMaterial, plan
from webhook.certs.sync import CertSync, decode_secret
from webhook.state.client import connect

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = service_dns_names("gpu-guard", "gpu-guard")
POLICY = RotationPolicy()


def issuer_of(pem: bytes) -> x509.Name:
    return x509.load_pem_x509_certificate(pem).issuer


def subject_of(pem: bytes) -> x509.Name:
    return x509.load_pem_x509_certificate(pem).subject


def trusted_by_bundle(material: TlsMaterial) -> bool:
    """What the API server does: verify the serving certificate against the caBundle."""
    serving = material.serving.certificate
    for pem in material.bundle:
        try:
            serving.verify_directly_issued_by(x509.load_pem_x509_certificate(pem))
            return True
        except Exception:  # any failure means "not this CA"
            continue
    return False


def test_a_first_run_makes_a_ca_and_a_serving_certificate_for_the_service() -> None:
    material, reasons = plan(None, HOSTS, T0, POLICY)
    assert reasons == ["no certificates yet"]
    assert material.bundle == (material.ca.cert_pem,)
    assert trusted_by_bundle(material)


def test_nothing_changes_while_both_certificates_are_far_from_expiry() -> None:
    material, _ = plan(None, HOSTS, T0, POLICY)
    again, reasons = plan(material, HOSTS, T0 + timedelta(days=100), POLICY)
    assert reasons == []
    assert again == material


def test_the_serving_certificate_is_renewed_well_before_it_expires() -> None:
    material, _ = plan(None, HOSTS, T0, POLICY)
    near = T0 + timedelta(days=POLICY.serving_days) - POLICY.serving_renew_before
    renewed, reasons = plan(material, HOSTS, near, POLICY)
    assert reasons == ["the serving certificate nears expiry"]
    assert renewed.serving != material.serving
    assert renewed.ca == material.ca
    assert trusted_by_bundle(renewed)


def test_a_renamed_service_gets_a_certificate_for_the_new_names() -> None:
    material, _ = plan(None, HOSTS, T0, POLICY)
    other = service_dns_names("guard", "infra")
    renewed, reasons = plan(material, other, T0 + timedelta(days=1), POLICY)
    assert reasons == ["the serving certificate names other hosts"]
    assert "guard.infra.svc" in str(renewed.serving.certificate.extensions)


def test_a_ca_rotation_never_leaves_the_api_server_unable_to_verify() -> None:
    """Run monthly for five years: the serving certificate renews yearly; the new CA joins the
    bundle first, the serving certificate moves after propagation, the old CA leaves last."""
    material, _ = plan(None, HOSTS, T0, POLICY)
    old_ca = material.ca.cert_pem
    now = T0
    while True:
        now += timedelta(days=30)
        material, reasons = plan(material, HOSTS, now, POLICY)
        assert trusted_by_bundle(material), f"unverifiable after {reasons}"
        assert material.serving.certificate.not_valid_after_utc > now
        if "the CA nears expiry: a new CA joins the bundle" in reasons:
            break
    assert len(material.bundle) == 2
    assert issuer_of(material.serving.cert_pem) == subject_of(old_ca)  # still the old CA's
    steps: list[list[str]] = []
    for delay in (
        timedelta(minutes=30),
        POLICY.propagation,
        POLICY.propagation,
        POLICY.propagation,
    ):
        now += delay
        material, reasons = plan(material, HOSTS, now, POLICY)
        steps.append(reasons)
        assert trusted_by_bundle(material), f"unverifiable after {reasons}"
    assert steps[0] == []  # not yet propagated: the old CA still signs what is served
    assert len(steps[1]) == 1 and steps[1][0] in (
        "the serving certificate moves to the new CA",
        "the serving certificate nears expiry",  # when both are true, expiry is named
    )
    assert steps[2:] == [
        ["every replica serves the new CA's certificate: old CAs leave the bundle"],
        [],
    ]
    assert material.bundle == (material.ca.cert_pem,)
    assert material.ca.cert_pem != old_ca
    assert issuer_of(material.serving.cert_pem) == subject_of(material.ca.cert_pem)


def test_expired_cas_are_dropped_from_the_bundle() -> None:
    short = RotationPolicy(
        ca_days=30,
        ca_renew_before=timedelta(days=10),
        serving_days=20,
        serving_renew_before=timedelta(days=5),
    )
    material, _ = plan(None, HOSTS, T0, short)
    stale_bundle = TlsMaterial(
        material.ca,
        (material.ca.cert_pem, *plan(None, HOSTS, T0 - timedelta(days=60), short)[0].bundle),
        material.serving,
        material.ca_since,
        material.serving_since,
    )
    cleaned, reasons = plan(stale_bundle, HOSTS, T0 + timedelta(days=1), short)
    assert "dropped expired CAs from the bundle" in reasons
    assert cleaned.bundle == (material.ca.cert_pem,)


# --- the sync against an API server (tests/fakeapi.py) --------------------------------------------


async def test_the_sync_creates_the_secret_and_injects_the_bundle_into_every_webhook(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    api = await connect(kubeconfig)
    try:
        sync = CertSync(
            api,
            namespace="gpu-guard",
            secret="gpu-guard-tls",
            webhook_configurations=[VALIDATING, VALIDATING.replace("validating", "mutating")],
            hosts=HOSTS,
            clock=lambda: T0,
        )
        reasons = await sync.sync_once()
        assert reasons == [
            "no certificates yet",
            "caBundle updated in validatingwebhookconfigurations",
        ]
        assert sync.settled is False  # no mutating configuration yet: the loop retries soon
        material = decode_secret(fake.objects[SECRET])
        assert material is not None
        bundle = base64.b64encode(material.bundle_pem).decode()
        hooks = fake.objects[VALIDATING]["webhooks"]
        assert [h["clientConfig"]["caBundle"] for h in hooks] == [bundle, bundle]
        # A second round, and a second replica, change nothing.
        writes = len(fake.writes)
        assert await sync.sync_once() == []
        assert len(fake.writes) == writes
        # The Secret is usable as it is by a TLS server, and its chain verifies.
        secret = fake.objects[SECRET]
        assert secret["type"] == "kubernetes.io/tls"
        context = ssl.create_default_context(cadata=material.bundle_pem.decode())
        assert context.cert_store_stats()["x509_ca"] == 1
    finally:
        await api.close()


async def test_a_replica_that_loses_the_race_rereads_instead_of_overwriting(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    api = await connect(kubeconfig)
    try:
        first = CertSync(
            api,
            namespace="gpu-guard",
            secret="gpu-guard-tls",
            webhook_configurations=[VALIDATING],
            hosts=HOSTS,
            clock=lambda: T0,
        )
        await first.sync_once()
        near = T0 + timedelta(days=POLICY.serving_days) - POLICY.serving_renew_before
        second = CertSync(
            api,
            namespace="gpu-guard",
            secret="gpu-guard-tls",
            webhook_configurations=[VALIDATING],
            hosts=HOSTS,
            clock=lambda: near,
        )
        fake.race_next_write = True  # another replica writes between our read and our write
        before = fake.objects[SECRET]
        assert await second.sync_once() == [
            "another replica updated the Secret first; re-reading next round"
        ]
        assert fake.objects[SECRET] == before
        assert await second.sync_once() == ["the serving certificate nears expiry"]
    finally:
        await api.close()


def near_expiry(serving_days: float) -> TlsMaterial:
    """A CA inside its renewal window and a serving certificate with ``serving_days`` left."""
    ca = make_ca(days=100, now=T0)
    serving = make_serving_cert(ca, HOSTS, days=365, now=T0 - timedelta(days=365 - serving_days))
    return TlsMaterial(ca, (ca.cert_pem,), serving, T0 - timedelta(days=300), T0)


def test_a_due_serving_certificate_waits_for_a_fresh_ca_to_propagate() -> None:
    material = near_expiry(serving_days=40)  # due (under 60 days left), not urgent
    rotated, reasons = plan(material, HOSTS, T0, POLICY)
    assert reasons == ["the CA nears expiry: a new CA joins the bundle"]
    assert rotated.serving == material.serving
    later, reasons = plan(rotated, HOSTS, T0 + POLICY.propagation, POLICY)
    assert reasons == ["the serving certificate nears expiry"]
    assert issuer_of(later.serving.cert_pem) == subject_of(later.ca.cert_pem)
    assert trusted_by_bundle(later)


def test_a_serving_certificate_about_to_break_is_reissued_at_once() -> None:
    material = near_expiry(serving_days=1 / 24)  # one hour left
    rotated, reasons = plan(material, HOSTS, T0, POLICY)
    assert reasons == [
        "the CA nears expiry: a new CA joins the bundle",
        "the serving certificate nears expiry",
    ]
    assert trusted_by_bundle(rotated)
