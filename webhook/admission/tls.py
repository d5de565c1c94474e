"""TLS for the admission server: the serving context, its hot reload, the client-cert check.

The API server is the only client that must present a certificate (with ``--client-ca``); the
kubelet's probes and Prometheus present none, so verification is optional at the handshake and
demanded by the review endpoints (``client_verified``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from webhook.reload import mtimes

log = logging.getLogger("gpu-guard.server")  # the name these lines have always carried

#: TLS 1.2 suites: forward-secret AEAD only (TLS 1.3 suites are all strong and fixed).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!RC4:!3DES:!SHA1"


def make_ssl_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """TLS 1.2 or newer, forward-secret AEAD ciphers, the given serving certificate.

    With ``client_ca``, only clients presenting a certificate signed by it get through: the
    API server, configured with a client certificate for this webhook (AdmissionConfiguration).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        # Optional at the handshake: kubelet probes and Prometheus present no certificate.
        # A certificate that is presented must verify; /validate and /mutate demand one.
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cafile=client_ca)
    return context


def client_verified(request: web.Request) -> bool:
    """True without client verification; with it, True only for a verified client certificate."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return True
    return bool(ssl_object.getpeercert())


def certificate_expiry(cert: str) -> float:
    """The serving certificate's notAfter (Unix seconds), for ``gpu_guard_certificate_expiry``.

    Imports cryptography when first asked (at the first scrape), not when the server starts."""
    from webhook.certs.rotation import not_after

    return not_after(Path(cert).read_bytes()).timestamp()


async def reload_certificates(
    context: ssl.SSLContext,
    cert: str,
    key: str,
    every: float,
    loaded: Callable[[], None] = lambda: None,
) -> None:
    """Picks up renewed certificate files: new handshakes use them, open connections keep theirs;
    ``loaded`` is told after each reload.

    The pair is proven in a scratch context first: loading a half-written pair (new certificate,
    old key) straight into the live context would leave it with no usable key.
    """
    seen = mtimes(cert, key)
    while True:
        await asyncio.sleep(every)
        try:
            current = mtimes(cert, key)
            if current == seen:
                continue
            make_ssl_context(cert, key)
            context.load_cert_chain(cert, key)
            loaded()
            seen = current
            log.info("reloaded serving certificate from %s", cert)
        except (OSError, ssl.SSLError, ValueError) as exc:
            # A half-written pair during renewal: keep serving the old one, try again later.
            log.warning("could not reload the serving certificate yet: %s", exc)
