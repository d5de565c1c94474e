"""A CA and a serving certificate for the webhook, made with ``cryptography``.

The API server verifies the webhook against the caBundle in the webhook configurations, for the
DNS name of the Service (``<svc>.<ns>.svc``). Keys are generated where they are used and never
committed; files holding keys are written 0600.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.defaults import CA_DAYS

SERVING_DAYS = 365


@dataclass(frozen=True)
class CertificatePair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("expected an EC private key")
        return key


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(
    common_name: str = "gpu-guard CA", days: int = CA_DAYS, now: datetime | None = None
) -> CertificatePair:
    now = now or datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificatePair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_serving_cert(
    ca: CertificatePair,
    hosts: Sequence[str],
    days: int = SERVING_DAYS,
    now: datetime | None = None,
) -> CertificatePair:
    """A server certificate for ``hosts`` (DNS names or IP addresses, ``host_name``), signed by
    ``ca``."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name")
    now = now or datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in map(host_name, hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    ca_cert = ca.certificate
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _common_name(hosts))]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key().public_key()),
            critical=False,
        )
        .sign(ca.private_key(), hashes.SHA256())
    )
    return CertificatePair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def host_name(text: str) -> str:
    """``text`` as a certificate host: an IP address, or a DNS name (RFC 1123 labels, a leading
    ``*.`` wildcard allowed); ValueError says what is wrong with anything else."""
    try:
        ipaddress.ip_address(text)
        return text  # as written: the renewal plan compares names with the certificate's
    except ValueError:
        pass
    if not text:
        raise ValueError("an empty host name")
    if len(text) > 253:
        raise ValueError(f"{text[:40]}...: a DNS name is at most 253 characters")
    labels = text.split(".")
    if labels[0] == "*" and len(labels) > 1:
        labels = labels[1:]
    for label in labels:
        if not _DNS_LABEL.fullmatch(label):
            raise ValueError(
                f"{text!r} is neither an IP address nor a DNS name (labels of 1-63 letters, "
                "digits and inner hyphens, separated by dots)"
            )
    return text


_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_COMMON_NAME_MAX = 64  # RFC 5280 ub-common-name: clients match on subjectAltName anyway


def bundle_files(ca: CertificatePair, serving: CertificatePair) -> dict[str, tuple[bytes, bool]]:
    """The files of a TLS Secret (ca.crt, ca.key, tls.crt, tls.key): name -> (content, secret)."""
    return {
        "ca.crt": (ca.cert_pem, False),
        "ca.key": (ca.key_pem, True),
        "tls.crt": (serving.cert_pem, False),
        "tls.key": (serving.key_pem, True),
    }


def write_files(
    out_dir: str, files: Mapping[str, tuple[bytes, bool]], *, replace: bool = False
) -> dict[str, Path]:
    """Writes ``files`` (name -> (content, secret)) into ``out_dir``, secret ones 0600.

    Without ``replace`` nothing is written when any of them exists (FileExistsError names them):
    a key once written is never overwritten by accident. Other failures are OSErrors."""
    target = Path(out_dir)
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", out_dir)
    target.mkdir(parents=True, exist_ok=True)
    if not replace:
        existing = [name for name in files if os.path.lexists(target / name)]
        if existing:
            raise FileExistsError(errno.EEXIST, "already there: " + ", ".join(existing), out_dir)
    written = {}
    for name, (data, secret) in files.items():
        _write(target / name, data, secret, replace)
        written[name] = target / name
    return written


def write_bundle(
    out_dir: str, ca: CertificatePair, serving: CertificatePair, *, replace: bool = False
) -> dict[str, Path]:
    """ca.crt, ca.key, tls.crt, tls.key in ``out_dir`` (the names a TLS Secret uses)."""
    return write_files(out_dir, bundle_files(ca, serving), replace=replace)


def _common_name(hosts: Sequence[str]) -> str:
    """The first host short enough to be a subject common name."""
    return next((h for h in hosts if len(h) <= _COMMON_NAME_MAX), "gpu-guard")


def _write(path: Path, data: bytes, secret: bool, replace: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if replace else os.O_EXCL)
    mode = 0o600 if secret else 0o644
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)  # a replaced key keeps no wider mode it had before
        handle.write(data)
