"""TLS material for tests: a throwaway CA and serving certificate, and clients that trust it.

Everything is generated with ``webhook.certs.issue`` into a pytest tmp dir; no key is ever written
inside the repository.
"""

from __future__ import annotations

import os
import ssl
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from webhook.certs.issue import CertificatePair, make_ca, make_serving_cert, write_bundle

HOSTS = ("127.0.0.1", "localhost")
BUNDLE_FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


@dataclass(frozen=True)
class Bundle:
    """The files ``write_bundle`` leaves: ca.crt, ca.key, tls.crt and tls.key."""

    directory: Path
    ca_cert: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Material:
    """A CA and a serving certificate it signed, in memory until written."""

    ca: CertificatePair
    serving: CertificatePair

    @property
    def ca_pem(self) -> str:
        return self.ca.cert_pem.decode()

    def write(self, directory: Path) -> Bundle:
        written = write_bundle(str(directory), self.ca, self.serving)
        return Bundle(directory, written["ca.crt"], written["tls.crt"], written["tls.key"])

    def publish(self, directory: Path, version: str) -> Bundle:
        """Writes the bundle the way kubelet updates a Secret volume: all files at once.

        The files go to ``directory/..<version>``; ``directory/..data`` is a symlink to it,
        replaced in one rename, and ``directory/tls.crt`` etc. are symlinks through ``..data``.
        """
        self.write(directory / f"..{version}")
        staged = directory / "..data_tmp"
        staged.unlink(missing_ok=True)
        staged.symlink_to(f"..{version}")
        os.replace(staged, directory / "..data")
        for name in BUNDLE_FILES:
            link = directory / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        return Bundle(directory, directory / "ca.crt", directory / "tls.crt", directory / "tls.key")


def make_material(hosts: Sequence[str] = HOSTS, ca_name: str = "gpu-guard test CA") -> Material:
    ca = make_ca(ca_name)
    return Material(ca, make_serving_cert(ca, list(hosts)))


def make_bundle(
    directory: Path, hosts: Sequence[str] = HOSTS, ca_name: str = "gpu-guard test CA"
) -> tuple[Material, Bundle]:
    """A new CA and a serving certificate for ``hosts`` signed by it, written to ``directory``."""
    material = make_material(hosts, ca_name)
    return material, material.write(directory)


def client_context(
    *trusted: Material,
    minimum: ssl.TLSVersion | None = None,
    maximum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A verifying client (hostname checked) that trusts only the CAs of ``trusted``."""
    if not trusted:
        raise ValueError("a client must trust at least one CA")
    context = ssl.create_default_context(cadata="".join(m.ca_pem for m in trusted))
    if minimum is not None:
        context.minimum_version = minimum
    if maximum is not None:
        context.maximum_version = maximum
    return context


def legacy_tls11_context(trusted: Material) -> ssl.SSLContext:
    """A client that speaks TLS 1.1 and nothing newer (security level 0 so OpenSSL 3 allows it).

    Raises ``ssl.SSLError`` or ``ValueError`` where the local OpenSSL cannot build one.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = client_context(trusted)
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    return context


def legacy_tls11_server_context(bundle: Bundle) -> ssl.SSLContext:
    """A deliberately permissive server, to show the local OpenSSL can speak TLS 1.1 at all."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.load_cert_chain(bundle.cert, bundle.key)
    return context
