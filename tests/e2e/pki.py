"""The certificates a test control plane runs on, generated per run (never committed).

One CA signs the API server's serving certificate (127.0.0.1 and localhost), the admin's client
certificate (group ``system:masters``) and any other client a test names; the service-account
key pair signs the tokens ``kubectl create token`` issues.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs.issue import CertificatePair, make_ca, make_serving_cert, write_files

API_SERVER_HOSTS = ("127.0.0.1", "localhost")


def make_client_cert(
    ca: CertificatePair, user: str, groups: tuple[str, ...] = (), days: int = 2
) -> CertificatePair:
    """A client certificate the API server reads as ``user`` (CN) in ``groups`` (O)."""
    now = datetime.now(UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.private_key(), hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return CertificatePair(cert.public_bytes(serialization.Encoding.PEM), key_pem)


@dataclass(frozen=True)
class Pki:
    """Where the files are: the API server's flags and the kubeconfig read them."""

    directory: Path
    ca: CertificatePair
    admin: CertificatePair

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def sa_public(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def sa_private(self) -> Path:
        return self.directory / "sa.key"


def make_pki(directory: Path) -> Pki:
    """A CA, the API server's serving pair, the admin's client pair and the service-account
    key pair, written to ``directory`` (keys 0600)."""
    ca = make_ca("gpu-guard envtest CA", days=2)
    serving = make_serving_cert(ca, list(API_SERVER_HOSTS), days=2)
    admin = make_client_cert(ca, "envtest-admin", ("system:masters",))
    signing = ec.generate_private_key(ec.SECP256R1())
    write_files(
        str(directory),
        {
            "ca.crt": (ca.cert_pem, False),
            "apiserver.crt": (serving.cert_pem, False),
            "apiserver.key": (serving.key_pem, True),
            "admin.crt": (admin.cert_pem, False),
            "admin.key": (admin.key_pem, True),
            "sa.key": (
                signing.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
                True,
            ),
            "sa.pub": (
                signing.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
                False,
            ),
        },
    )
    return Pki(directory, ca, admin)
