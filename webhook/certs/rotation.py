"""When to renew the webhook's CA and serving certificate: a pure plan over a fake-able clock.

A CA is replaced in three steps, so the API server never meets a certificate it cannot verify:
1. a new CA joins the trust bundle (caBundle of both webhook configurations), old CA still signs;
2. after ``propagation`` the serving certificate is reissued by the new CA;
3. after another ``propagation`` (every replica has reloaded it) the old CA leaves the bundle.
The serving certificate is renewed well before expiry, and the CA well before that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from webhook.certs.issue import CertificatePair, make_ca, make_serving_cert


@dataclass(frozen=True)
class RotationPolicy:
    ca_days: int = 5 * 365
    ca_renew_before: timedelta = timedelta(days=180)
    serving_days: int = 365
    serving_renew_before: timedelta = timedelta(days=60)
    propagation: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class TlsMaterial:
    """What the TLS Secret holds: the signing CA, the trust bundle, the serving pair, and when."""

    ca: CertificatePair
    bundle: tuple[bytes, ...]  # trusted CA certificates (PEM), newest first
    serving: CertificatePair
    ca_since: datetime  # when ``ca`` joined the bundle
    serving_since: datetime  # when ``serving`` was issued

    @property
    def bundle_pem(self) -> bytes:
        return b"".join(self.bundle)


def not_after(pem: bytes) -> datetime:
    """When the (first) certificate in this PEM expires."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def _hosts(pair: CertificatePair) -> list[str]:
    names = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(v) for v in names.get_values_for_type(x509.DNSName)] + [
        str(v) for v in names.get_values_for_type(x509.IPAddress)
    ]


def _issued_by(serving: CertificatePair, ca: CertificatePair) -> bool:
    try:
        serving.certificate.verify_directly_issued_by(ca.certificate)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def plan(
    material: TlsMaterial | None, hosts: list[str], now: datetime, policy: RotationPolicy
) -> tuple[TlsMaterial, list[str]]:
    """The material to hold from ``now`` on, and why it changed (empty: nothing to do)."""
    if material is None:
        ca = make_ca(days=policy.ca_days, now=now)
        serving = make_serving_cert(ca, hosts, days=policy.serving_days, now=now)
        return TlsMaterial(ca, (ca.cert_pem,), serving, now, now), ["no certificates yet"]
    reasons: list[str] = []
    current = material
    live_bundle = tuple(pem for pem in current.bundle if not_after(pem) > now)
    if live_bundle != current.bundle:
        current = replace(current, bundle=live_bundle or (current.ca.cert_pem,))
        reasons.append("dropped expired CAs from the bundle")
    if not_after(current.ca.cert_pem) - now <= policy.ca_renew_before:
        ca = make_ca(days=policy.ca_days, now=now)
        current = replace(current, ca=ca, bundle=(ca.cert_pem, *current.bundle), ca_since=now)
        reasons.append("the CA nears expiry: a new CA joins the bundle")
    left = not_after(current.serving.cert_pem) - now
    serving_due = left <= policy.serving_renew_before
    urgent = left <= 2 * policy.propagation  # about to break: sign now, whatever the bundle says
    wrong_hosts = sorted(_hosts(current.serving)) != sorted(hosts)
    old_issuer = not _issued_by(current.serving, current.ca)
    # A CA fresh in the bundle may not be in every caBundle yet: let it propagate first.
    propagated = now - current.ca_since >= policy.propagation
    if urgent or wrong_hosts or ((serving_due or old_issuer) and propagated):
        serving = make_serving_cert(current.ca, hosts, days=policy.serving_days, now=now)
        current = replace(current, serving=serving, serving_since=now)
        reasons.append(
            "the serving certificate nears expiry"
            if serving_due
            else "the serving certificate names other hosts"
            if wrong_hosts
            else "the serving certificate moves to the new CA"
        )
    elif (
        len(current.bundle) > 1
        and not old_issuer
        and now - current.serving_since >= (policy.propagation)
    ):
        current = replace(current, bundle=(current.ca.cert_pem,))
        reasons.append("every replica serves the new CA's certificate: old CAs leave the bundle")
    return current, reasons
