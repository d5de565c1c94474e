"""``gpu-guard``: the command line's arguments, and the dispatch to ``webhook.commands``.

What each command does is in its module under ``webhook/commands/`` (exit codes in
``webhook.commands.common``); none imports kubernetes_asyncio until it reads a cluster. Bad
input is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from webhook.admission.changes import DEFAULT_NAMESPACE
from webhook.admission.connections import DEFAULT_MAX_CONNECTIONS
from webhook.admission.pipeline import DEFAULT_MAX_BODY
from webhook.audit.background import DEFAULT_INTERVAL as DEFAULT_AUDIT_INTERVAL
from webhook.commands import audit, certs, check, demo, policies, serve, snapshot
from webhook.commands.common import EXIT_BAD_INPUT, UsageError
from webhook.config import ConfigError
from webhook.logs import configure as configure_logging
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.files import StateFileError


def _add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="live cluster (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")


def _add_cert_location_args(parser: Any) -> None:
    """Where the certificates live in the cluster: shared by serve and certs."""
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "gpu-guard"))
    parser.add_argument("--service", default="gpu-guard")
    parser.add_argument("--tls-secret", default="gpu-guard-tls")
    parser.add_argument("--webhook-configuration", default="gpu-guard")


def _add_state_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        nargs="+",
        metavar="FILE",
        help="YAML/JSON files of cluster objects (kubectl get ... -o yaml output, or a List); "
        "without it the live cluster is read",
    )
    _add_cluster_args(parser)
    parser.add_argument(
        "--sync-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a live read may take to sync every kind (default 60)",
    )
    parser.add_argument("--config", metavar="FILE", help="policy configuration (YAML)")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-guard",
        description="Admission guard for GPU nodes, KubeVirt GPU VMs and the NVIDIA GPU Operator.",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_p = sub.add_parser("serve", help="run the admission webhook server")
    _add_state_args(serve_p)
    serve_p.add_argument("--tls-cert", required=True, metavar="FILE")
    serve_p.add_argument("--tls-key", required=True, metavar="FILE")
    serve_p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    serve_p.add_argument("--port", type=int, default=8443)
    serve_p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, metavar="BYTES")
    serve_p.add_argument(
        "--max-connections",
        type=_at_least_one,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="close new connections at once past N open, so the API server fails fast by the "
        "failurePolicy rather than waiting in a queue (default %(default)s; see docs/security.md)",
    )
    certs_group = serve_p.add_argument_group("certificates managed in-cluster (live mode)")
    certs_group.add_argument(
        "--manage-certs",
        action="store_true",
        help="create and renew the CA and serving certificate in a Secret, keep the webhook "
        "configurations' caBundle in step, and write --tls-cert/--tls-key (an emptyDir)",
    )
    _add_cert_location_args(certs_group)
    certs_group.add_argument("--cert-check-interval", type=float, default=300.0, metavar="SECONDS")
    serve_p.add_argument(
        "--client-ca",
        metavar="FILE",
        help="require client certificates signed by this CA (the API server's, see README)",
    )
    serve_p.add_argument(
        "--audit-interval",
        type=float,
        default=DEFAULT_AUDIT_INTERVAL,
        metavar="SECONDS",
        help="background audit period in live mode (default 300; 0 turns it off)",
    )
    serve_p.add_argument(
        "--no-reports",
        dest="reports",
        action="store_false",
        help="do not write the background audit as PolicyReports (metrics only)",
    )
    serve_p.add_argument(
        "--drain-delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after SIGTERM, keep serving with /readyz 503 this long before closing (default 5)",
    )
    serve_p.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="a broken watch older than this cannot deny",
    )
    serve_p.set_defaults(func=serve.run)

    check_p = sub.add_parser("check", help="evaluate proposed objects as admission would")
    check_p.add_argument(
        "-f",
        "--file",
        nargs="+",
        required=True,
        metavar="FILE",
        help="change files: YAML/JSON manifests, a directory of them, or - for standard input; "
        "every object is judged in order, as kubectl apply -f would send them",
    )
    check_p.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="read the directories given with -f and their subdirectories",
    )
    check_p.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="namespace for namespaced objects that name none, as kubectl's (default %(default)s)",
    )
    _add_state_args(check_p)
    check_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    check_p.set_defaults(func=check.run)

    audit_p = sub.add_parser("audit", help="every policy over every existing object")
    _add_state_args(audit_p)
    audit_p.add_argument("--now", metavar="RFC3339", help="measure durations to this time")
    audit_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "policyreport", "markdown", "text"],
        default="table",
    )
    audit_p.set_defaults(func=audit.run)

    snapshot_p = sub.add_parser(
        "snapshot", help="save, from the cluster, the objects the policies read"
    )
    _add_cluster_args(snapshot_p)
    snapshot_p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="state file to write (.json for JSON, else YAML; - for stdout)",
    )
    snapshot_p.set_defaults(func=snapshot.run)

    policies_p = sub.add_parser("policies", help="print the policy reference")
    policies_p.set_defaults(func=policies.run)

    certs_p = sub.add_parser(
        "certs", help="make a CA and serving certificate: files (--out) or the cluster (--apply)"
    )
    certs_p.add_argument(
        "--out",
        metavar="DIR",
        help="write ca.crt/key, tls.crt/key, "
        "secret.yaml and ca-bundle.b64 here (never commit them)",
    )
    certs_p.add_argument(
        "--apply",
        action="store_true",
        help="create or renew the TLS Secret "
        "and inject the caBundle into both webhook configurations",
    )
    _add_cluster_args(certs_p)
    _add_cert_location_args(certs_p)
    certs_p.add_argument(
        "--host",
        dest="host_names",
        action="append",
        metavar="NAME",
        help="extra DNS name or IP for the certificate (repeatable)",
    )
    certs_p.add_argument("--days", type=int, default=365)
    certs_p.set_defaults(func=certs.run)

    demo_p = sub.add_parser("demo", help="the home-lab incident: serve, send the changes, audit")
    demo_p.add_argument("--example", default="examples/homelab", metavar="DIR")
    demo_p.add_argument(
        "--now",
        default=demo.DEMO_NOW,
        metavar="RFC3339",
        help=f"audit time (default {demo.DEMO_NOW}, 112 days into the incident)",
    )
    demo_p.set_defaults(func=demo.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(getattr(logging, args.log_level), batched=args.command == "serve")
    try:
        code: int = args.func(args)
    except (StateFileError, ConfigError, UsageError) as exc:
        print(f"gpu-guard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
