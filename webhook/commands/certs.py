"""``gpu-guard certs``: a CA and serving certificate, as files (``--out``) or in the cluster
(``--apply``); and the certificate manager that ``serve --manage-certs`` runs too."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.certs.issue import (
    bundle_files,
    host_name,
    make_ca,
    make_serving_cert,
    service_dns_names,
    write_files,
)
from webhook.certs.rotation import TlsMaterial
from webhook.commands.cluster import with_cluster
from webhook.commands.common import EXIT_OK, UsageError

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from webhook.certs.sync import CertSync


def cert_hosts(args: argparse.Namespace) -> list[str]:
    """The certificate's names: every --host, then the Service's DNS names; a UsageError names
    the first that is neither a DNS name nor an IP address, before anything is made."""
    named = [("--host", host) for host in getattr(args, "host_names", None) or []]
    named += [
        ("--service/--namespace", host) for host in service_dns_names(args.service, args.namespace)
    ]
    for flag, host in named:
        try:
            host_name(host)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    return [host for _, host in named]


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
        hosts=cert_hosts(args),
    )


def run(args: argparse.Namespace) -> int:
    if args.apply:
        if args.force:
            raise UsageError("certs: --force replaces files of --out; --apply renews as needed")
        cert_hosts(args)  # a bad name is refused before the cluster is contacted
        return _apply(args)
    if not args.out:
        raise UsageError("certs: give --out DIR (files) or --apply (the cluster)")
    return _write_out(args, cert_hosts(args))


def _write_out(args: argparse.Namespace, hosts: list[str]) -> int:
    """The four PEM files, the Secret manifest and the caBundle, in --out: none if any exists
    already (without --force), one line on stderr if the directory cannot be written."""
    from webhook.certs.sync import encode_secret

    ca = make_ca()
    serving = make_serving_cert(ca, hosts, days=args.days)
    now = datetime.now(UTC)
    secret = encode_secret(
        TlsMaterial(ca, (ca.cert_pem,), serving, now, now), args.namespace, args.tls_secret, None
    )
    files = {
        **bundle_files(ca, serving),
        "secret.yaml": (yaml.safe_dump(secret, sort_keys=False).encode(), True),
        "ca-bundle.b64": (secret["data"]["ca.crt"].encode() + b"\n", False),
    }
    try:
        written = write_files(args.out, files, replace=args.force)
    except FileExistsError as exc:
        raise UsageError(
            f"certs --out {args.out}: {exc.strerror}; give --force to replace them"
        ) from None
    except OSError as exc:
        raise UsageError(
            f"certs --out {args.out}: {exc.strerror or exc}"
            + (f": {exc.filename}" if exc.filename and str(exc.filename) != args.out else "")
        ) from None
    for name, path in written.items():
        secret_file = files[name][1]
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

    reasons = with_cluster(args, apply, "certs --apply")
    for reason in reasons or ["certificates and caBundles already current"]:
        print(reason)
    return EXIT_OK
