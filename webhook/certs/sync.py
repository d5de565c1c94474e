"""Keeps the webhook's certificates valid in-cluster: the TLS Secret and both caBundles.

Every replica runs the same loop; the Secret's resourceVersion arbitrates (a 409 means another
replica wrote first, and the next round re-reads). The server itself only watches its mounted
files (``webhook.admission.tls.reload_certificates``), so the kubelet's Secret refresh is the
hand-over.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import (
    MUTATING_WEBHOOK_CONFIGURATION,
    RESOURCE_OF,
    SECRET,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from webhook.certs.issue import CertificatePair
from webhook.certs.rotation import RotationPolicy, TlsMaterial, plan
from webhook.state.client import answer_error, call_json

log = logging.getLogger("gpu-guard.certs")

CA_SINCE = "gpu-guard.io/ca-since"
SERVING_SINCE = "gpu-guard.io/serving-since"
WEBHOOK_CONFIGURATIONS = tuple(
    RESOURCE_OF[kind].path
    for kind in (VALIDATING_WEBHOOK_CONFIGURATION, MUTATING_WEBHOOK_CONFIGURATION)
)
_SECRETS = RESOURCE_OF[SECRET]


class SyncConflict(Exception):
    """Another writer changed the object first (HTTP 409)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decode_secret(secret: dict[str, Any] | None) -> TlsMaterial | None:
    """The material in a Secret, or None when it is absent or incomplete (then: start afresh)."""
    if secret is None:
        return None
    data = secret.get("data") or {}
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    try:
        raw = {
            key: base64.b64decode(data[key])
            for key in ("ca.crt", "ca-signer.crt", "ca-signer.key", "tls.crt", "tls.key")
        }
        ca_since = datetime.fromisoformat(annotations[CA_SINCE])
        serving_since = datetime.fromisoformat(annotations[SERVING_SINCE])
    except (KeyError, ValueError, TypeError):
        return None
    bundle = tuple(
        b"-----BEGIN CERTIFICATE-----" + part
        for part in raw["ca.crt"].split(b"-----BEGIN CERTIFICATE-----")
        if part.strip()
    )
    return TlsMaterial(
        CertificatePair(raw["ca-signer.crt"], raw["ca-signer.key"]),
        bundle,
        CertificatePair(raw["tls.crt"], raw["tls.key"]),
        ca_since,
        serving_since,
    )


def encode_secret(
    material: TlsMaterial, namespace: str, name: str, previous: dict[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = dict((previous or {}).get("metadata") or {})
    meta.update({"name": name, "namespace": namespace})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        CA_SINCE: material.ca_since.isoformat(),
        SERVING_SINCE: material.serving_since.isoformat(),
    }
    meta.pop("managedFields", None)
    return {
        "apiVersion": _SECRETS.api_version,
        "kind": SECRET.kind,
        "type": "kubernetes.io/tls",
        "metadata": meta,
        "data": {
            "tls.crt": _b64(material.serving.cert_pem),
            "tls.key": _b64(material.serving.key_pem),
            "ca.crt": _b64(material.bundle_pem),
            "ca-signer.crt": _b64(material.ca.cert_pem),
            "ca-signer.key": _b64(material.ca.key_pem),
        },
    }


class CertSync:
    def __init__(
        self,
        api: ApiClient,
        *,
        namespace: str,
        secret: str,
        webhook_configurations: Sequence[str],
        hosts: Sequence[str],
        policy: RotationPolicy | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.namespace, self.secret = namespace, secret
        self.webhook_configurations = tuple(webhook_configurations)
        self.hosts = list(hosts)
        self.policy = policy or RotationPolicy()
        self.clock = clock
        self.material: TlsMaterial | None = None
        """What the Secret held after the last successful round."""
        self.settled = False
        """Every webhook configuration carried the bundle after the last round."""

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        status, payload = await call_json(self.api, method, path, body)
        if status == 404:
            return None
        if status == 409:
            raise SyncConflict(path)
        if status >= 300:
            raise answer_error(status, payload, f"{method} {path}")
        return payload

    async def sync_once(self) -> list[str]:
        """One round: renew what is due, then make every caBundle match the Secret's bundle."""
        base = _SECRETS.collection_path(self.namespace)
        secret = await self._call("GET", f"{base}/{self.secret}")
        material, reasons = plan(decode_secret(secret), self.hosts, self.clock(), self.policy)
        self.material = material if not reasons else self.material
        if reasons:
            body = encode_secret(material, self.namespace, self.secret, secret)
            try:
                if secret is None:
                    await self._call("POST", base, body)
                else:
                    await self._call("PUT", f"{base}/{self.secret}", body)
            except SyncConflict:
                return ["another replica updated the Secret first; re-reading next round"]
            self.material = material
            log.info("certificates: %s", "; ".join(reasons))
        bundle = _b64(material.bundle_pem)
        self.settled = True
        for path in self.webhook_configurations:
            injected = await self._inject(path, bundle)
            if injected is None:
                self.settled = False  # not installed yet, or a write lost a race: retry soon
            elif injected:
                reasons.append(f"caBundle updated in {path.rsplit('/', 2)[-2]}")
        return reasons

    async def _inject(self, path: str, bundle: str) -> bool | None:
        """True when the caBundle was updated, False when it was right, None when not done."""
        config = await self._call("GET", path)
        if config is None:
            return None
        changed = False
        for hook in config.get("webhooks") or []:
            client = hook.setdefault("clientConfig", {})
            if client.get("caBundle") != bundle:
                client["caBundle"] = bundle
                changed = True
        if changed:
            try:
                await self._call("PUT", path, config)
            except SyncConflict:
                return None
        return changed

    async def run(
        self, every: float, cert_file: str = "", key_file: str = "", retry: float = 15.0
    ) -> None:
        """Sync every ``every`` seconds (every ``retry`` seconds while a webhook configuration
        is missing or lost a race); with files given, keep them equal to the Secret."""
        while True:
            delay = every
            try:
                await self.sync_once()
                if cert_file and self.material is not None:
                    write_serving_files(self.material, cert_file, key_file)
                if not self.settled:
                    delay = retry
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep trying: an expired certificate is the worse outcome
                delay = retry
                log.warning("certificate sync failed, retrying in %.0f s: %s", delay, exc)
            await asyncio.sleep(delay)


def _replace_file(path: str, data: bytes, mode: int) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gpu-guard-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_serving_files(material: TlsMaterial, cert_file: str, key_file: str) -> bool:
    """Writes the serving pair where the server reads it, atomically; True when it changed.

    The server's reloader proves a pair before using it, so the moment between the two renames
    never serves a mismatched certificate and key.
    """
    try:
        with open(cert_file, "rb") as handle:
            if handle.read() == material.serving.cert_pem:
                return False
    except OSError:
        pass
    _replace_file(key_file, material.serving.key_pem, 0o600)
    _replace_file(cert_file, material.serving.cert_pem, 0o644)
    return True
