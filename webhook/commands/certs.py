"""``gpu-guard certs``: a CA and serving certificate, as files (``--out``) or in the cluster
(``--apply``); and the certificate manager that ``serve --manage-certs`` runs too."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.certs.issue import make_ca, make_serving_cert, service_dns_names, write_bundle
from webhook.certs.rotation import TlsMaterial
from webhook.commands.cluster import with_cluster
from webhook.commands.common import EXIT_OK, UsageError

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from webhook.certs.sync import CertSync


def cert_sync(api: Any, args: argparse.Namespace) -> CertSync:
    """The one certificate manager, for `serve --manage-certs` and `certs --apply` alike."""
    from webhook.certs.sync import WEBHOOK_CONFIGURATIONS, CertSync

    return CertSync(
        api,
        namespace=args.namespace,
        secret=args.tls_secret,
        webhook_configurations=[
            f"{base}/{args.webhook_configuration}" for base in WEBHOOK_CONFIGURATIONS
        ],
        hosts=[
            *(getattr(args, "host_names", None) or []),
            *service_dns_names(args.service, args.namespace),
        ],
    )


def run(args: argparse.Namespace) -> int:
    from webhook.certs.sync import encode_secret

    if args.apply:
        return _apply(args)
    if not args.out:
        raise UsageError("certs: give --out DIR (files) or --apply (the cluster)")
    hosts = list(args.host_names or []) + service_dns_names(args.service, args.namespace)
    ca = make_ca()
    serving = make_serving_cert(ca, hosts, days=args.days)
    written = write_bundle(args.out, ca, serving)
    now = datetime.now(UTC)
    secret = encode_secret(
        TlsMaterial(ca, (ca.cert_pem,), serving, now, now), args.namespace, args.tls_secret, None
    )
    extra = {
        "secret.yaml": yaml.safe_dump(secret, sort_keys=False).encode(),
        "ca-bundle.b64": secret["data"]["ca.crt"].encode() + b"\n",
    }
    for name, data in extra.items():
        path = Path(args.out) / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        written[name] = path
    for name, path in written.items():
        secret_file = name.endswith(".key") or name == "secret.yaml"
        print(f"wrote {path}" + (" (holds a private key, mode 0600)" if secret_file else ""))
    print(
        f"kubectl apply -f {Path(args.out) / 'secret.yaml'}   # the TLS Secret "
        "(`serve --manage-certs` adopts and renews it)"
    )
    print(
        "caBundle for both webhook configurations: the content of "
        f"{Path(args.out) / 'ca-bundle.b64'}"
    )
    return EXIT_OK


def _apply(args: argparse.Namespace) -> int:
    """Creates or renews the Secret and injects the caBundles in the cluster, once."""

    async def apply(api: ApiClient) -> list[str]:
        sync = cert_sync(api, args)
        reasons = await sync.sync_once()
        if not sync.settled:
            reasons.append(
                "a webhook configuration is missing: apply the manifests, then run this again"
            )
        return reasons

    reasons = with_cluster(args, apply, "cannot reach the cluster")
    for reason in reasons or ["certificates and caBundles already current"]:
        print(reason)
    return EXIT_OK
