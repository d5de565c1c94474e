"""``gpu-guard``: the command line's arguments, and the dispatch to ``webhook.commands``.

What each command does is in its module under ``webhook/commands/`` (exit codes in
``webhook.commands.common``); none imports kubernetes_asyncio until it reads a cluster. Bad
input is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from webhook.admission.changes import DEFAULT_NAMESPACE
from webhook.audit.election import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
)
from webhook.commands.common import EXIT_BAD_INPUT, UsageError
from webhook.config import ConfigError
from webhook.defaults import (
    CA_DAYS,
    DEFAULT_AUDIT_INTERVAL,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADERS_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEMO_NOW,
)
from webhook.logs import configure as configure_logging
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.files import StateFileError


class _Formatter(argparse.HelpFormatter):
    """Every option's help ends with its default, where it has one to say (a switch's default
    is its absence)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = default is not None and default is not argparse.SUPPRESS
        if shown and not isinstance(default, bool) and "%(default)" not in text:
            text += " (default %(default)s)"
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """``webhook.commands.<name>.run``, imported when the command runs: each command imports
    only what it uses (``audit --state`` neither aiohttp nor cryptography), not every other
    command's libraries as well."""

    def run(args: argparse.Namespace) -> int:
        module = importlib.import_module(f"webhook.commands.{name}")
        code: int = module.run(args)
        return code

    return run


def _add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="live cluster (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="kubeconfig context to use (default: its current one)"
    )


def _add_sync_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sync-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long one read of every kind may take; an unreachable API server fails at once",
    )


def _add_cert_location_args(parser: Any) -> None:
    """Where the certificates live in the cluster: shared by serve and certs."""
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "gpu-guard"),
        help="namespace of the Service and the TLS Secret ($POD_NAMESPACE in a pod)",
    )
    parser.add_argument(
        "--service", default="gpu-guard", help="the webhook's Service: the certificate's names"
    )
    parser.add_argument(
        "--tls-secret", default="gpu-guard-tls", help="the Secret that holds CA and certificate"
    )
    parser.add_argument(
        "--webhook-configuration",
        default="gpu-guard",
        help="name of the validating and the mutating webhook configuration (caBundle)",
    )


def _add_state_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        nargs="+",
        metavar="FILE",
        help="YAML/JSON files of cluster objects (kubectl get ... -o yaml output, or a List); "
        "without it the live cluster is read",
    )
    _add_cluster_args(parser)
    _add_sync_timeout(parser)
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="policy configuration (YAML; default: the built-in settings)",
    )


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _days(text: str) -> int:
    value = _at_least_one(text)
    if value > CA_DAYS:
        raise argparse.ArgumentTypeError(f"at most {CA_DAYS} (the CA's lifetime), not {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):  # NaN fails the first test
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):  # NaN fails the first test
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of seconds, not {text}")
    return value


def _add_slow_client_args(parser: argparse.ArgumentParser) -> None:
    """How long a client may take before its connection is cut (docs/security.md)."""
    limits = parser.add_argument_group(
        "slow clients (cut connections are counted in gpu_guard_connections_cut_total)"
    )
    limits.add_argument(
        "--headers-timeout",
        type=_positive_seconds,
        default=DEFAULT_HEADERS_TIMEOUT,
        metavar="SECONDS",
        help="close a connection whose request headers take longer than this from their first byte",
    )
    limits.add_argument(
        "--body-timeout",
        type=_positive_seconds,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="answer 408 and close when a review's body takes longer than this after its headers",
    )
    limits.add_argument(
        "--idle-timeout",
        type=_positive_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection that sends no request for this long after its handshake or "
        "last answer",
    )


def _add_leader_election_args(parser: argparse.ArgumentParser) -> None:
    """One audit writer among replicas (webhook/audit/leader.py); admission is never elected."""
    group = parser.add_argument_group(
        "leader election (live mode only: with --state each server audits alone, for its "
        "metrics, and writes nothing)"
    )
    group.add_argument(
        "--leader-elect",
        action="store_true",
        help="run the background audit and write PolicyReports only while holding a "
        "coordination.k8s.io Lease, so that one replica of several does; every replica "
        "answers admission whatever the election",
    )
    group.add_argument(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        help="namespace of the Lease (default: $POD_NAMESPACE, else the service account's "
        "namespace, else --namespace)",
    )
    group.add_argument(
        "--leader-election-lease-name",
        default=DEFAULT_LEASE_NAME,
        metavar="NAME",
        help="name of the Lease",
    )
    group.add_argument(
        "--leader-election-identity",
        metavar="NAME",
        help="this replica's name in the Lease (default: $POD_NAME, else the host name and "
        "a random suffix)",
    )
    group.add_argument(
        "--leader-election-lease-duration",
        type=_positive_seconds,
        default=DEFAULT_LEASE_DURATION,
        metavar="SECONDS",
        help="how long the others wait after the leader's last renew before taking the Lease",
    )
    group.add_argument(
        "--leader-election-renew-deadline",
        type=_positive_seconds,
        default=DEFAULT_RENEW_DEADLINE,
        metavar="SECONDS",
        help="the leader stops auditing and writing when it could not renew for this long "
        "(shorter than the lease duration)",
    )
    group.add_argument(
        "--leader-election-retry-period",
        type=_positive_seconds,
        default=DEFAULT_RETRY_PERIOD,
        metavar="SECONDS",
        help="how often the leader renews and the others try to acquire",
    )


def _add_now(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="measure durations to this time, e.g. 2026-10-30T12:00:00Z (default: the clock)",
    )


PROG = "gpu-guard"
KUBECTL_PLUGIN = "kubectl gpu-guard"
"""The name in usage and errors when run as the kubectl plugin (script ``kubectl-gpu_guard``)."""


def _add_cluster_args_before_the_command(parser: argparse.ArgumentParser) -> None:
    """kubectl hands a plugin its arguments as typed, so ``kubectl gpu-guard --context C audit``
    puts kubectl's flags before the command; ``cluster_args_anywhere`` moves them to it."""
    group = parser.add_argument_group(
        "cluster, before the command (as kubectl passes them to the plugin; after it works too)"
    )
    group.add_argument(
        "--kubeconfig", dest="kubeconfig_before", metavar="PATH", help="the command's --kubeconfig"
    )
    group.add_argument(
        "--context", dest="context_before", metavar="NAME", help="the command's --context"
    )


def cluster_args_anywhere(args: argparse.Namespace) -> argparse.Namespace:
    """--kubeconfig/--context given before the command count as the command's own; given on
    both sides, the later (the command's) wins, as a repeated flag does. A command that reads
    no cluster refuses them rather than ignore them."""
    for flag, before in (("kubeconfig", args.kubeconfig_before), ("context", args.context_before)):
        if before is None:
            continue
        if not hasattr(args, flag):
            raise UsageError(f"--{flag}: {args.command} does not read a cluster")
        if getattr(args, flag) is None:
            setattr(args, flag, before)
    return args


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Admission guard for GPU nodes, KubeVirt GPU VMs and the NVIDIA GPU Operator.",
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="least severe log record written to stderr",
    )
    _add_cluster_args_before_the_command(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=text, description=text, formatter_class=_Formatter
        )
        return parser

    serve_p = command("serve", "run the admission webhook server")
    _add_state_args(serve_p)
    serve_p.add_argument(
        "--tls-cert", required=True, metavar="FILE", help="serving certificate (PEM), reloaded"
    )
    serve_p.add_argument(
        "--tls-key", required=True, metavar="FILE", help="its private key (PEM), reloaded"
    )
    serve_p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    serve_p.add_argument("--port", type=_port, default=8443, help="port to listen on, 1-65535")
    serve_p.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="largest AdmissionReview body read; a larger one is refused",
    )
    serve_p.add_argument(
        "--max-connections",
        type=_at_least_one,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="close new connections at once past N open, so the API server fails fast by the "
        "failurePolicy rather than waiting in a queue (default %(default)s; see docs/security.md)",
    )
    _add_slow_client_args(serve_p)
    certs_group = serve_p.add_argument_group("certificates managed in-cluster (live mode)")
    certs_group.add_argument(
        "--manage-certs",
        action="store_true",
        help="create and renew the CA and serving certificate in a Secret, keep the webhook "
        "configurations' caBundle in step, and write --tls-cert/--tls-key (an emptyDir)",
    )
    _add_cert_location_args(certs_group)
    certs_group.add_argument(
        "--cert-check-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how often the Secret and caBundles are checked and renewed as needed",
    )
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
        help="background audit period in live mode (0 turns it off)",
    )
    serve_p.add_argument(
        "--no-reports",
        dest="reports",
        action="store_false",
        help="do not write the background audit as PolicyReports (metrics only)",
    )
    _add_leader_election_args(serve_p)
    serve_p.add_argument(
        "--drain-delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after SIGTERM, keep serving with /readyz 503 this long before closing",
    )
    serve_p.add_argument(
        "--stale-after",
        type=_non_negative_seconds,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="a deny resting on a kind out of sync longer than this (its watch broken, or "
        "resumed and not yet caught up) becomes a warning saying so; 0: as soon as it breaks",
    )
    serve_p.set_defaults(func=_command("serve"))

    check_p = command("check", "evaluate proposed objects as admission would")
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
        help="namespace for namespaced objects that name none, as kubectl's",
    )
    _add_state_args(check_p)
    check_p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="text: what kubectl would print; json: every verdict",
    )
    check_p.set_defaults(func=_command("check"))

    audit_p = command("audit", "every policy over every existing object")
    _add_state_args(audit_p)
    _add_now(audit_p)
    audit_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "policyreport", "markdown", "text"],
        default="table",
        help="table for a terminal; json/yaml the contract; policyreport the CRs; markdown, text",
    )
    audit_p.add_argument(
        "--what-if",
        action="append",
        default=[],
        metavar="EVENT",
        help="audit a hypothetical (repeatable): node-down=NODE, cordon=NODE, drain=NODE, "
        "label=NODE:KEY=VALUE; prints the findings that appear and disappear (text or json/yaml)",
    )
    audit_p.set_defaults(func=_command("audit"))

    inventory_p = command("inventory", "one row per GPU node: health, GPUs, who uses them")
    _add_state_args(inventory_p)
    _add_now(inventory_p)
    inventory_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "markdown"],
        default="table",
        help="table for a terminal; json the contract; markdown for GitHub",
    )
    inventory_p.set_defaults(func=_command("inventory"))

    snapshot_p = command("snapshot", "save, from the cluster, the objects the policies read")
    _add_cluster_args(snapshot_p)
    _add_sync_timeout(snapshot_p)
    snapshot_p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="state file to write (.json for JSON, else YAML; - for stdout)",
    )
    snapshot_p.set_defaults(func=_command("snapshot"))

    policies_p = command("policies", "print the policy reference")
    policies_p.set_defaults(func=_command("policies"))

    certs_p = command(
        "certs", "make a CA and serving certificate: files (--out) or the cluster (--apply)"
    )
    certs_p.add_argument(
        "--out",
        metavar="DIR",
        help="write ca.crt/key, tls.crt/key, "
        "secret.yaml and ca-bundle.b64 here (never commit them); refused if any exists",
    )
    certs_p.add_argument(
        "--force", action="store_true", help="with --out: replace files that exist, keys included"
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
    certs_p.add_argument(
        "--days", type=_days, default=365, help="how long the serving certificate is valid"
    )
    certs_p.set_defaults(func=_command("certs"))

    demo_p = command("demo", "the home-lab incident: serve, send the changes, audit")
    demo_p.add_argument(
        "--example",
        default="examples/homelab",
        metavar="DIR",
        help="cluster.yaml and changes/*.yaml to play",
    )
    demo_p.add_argument(
        "--now",
        default=DEMO_NOW,
        metavar="RFC3339",
        help="audit time (default %(default)s, 112 days into the incident)",
    )
    demo_p.set_defaults(func=_command("demo"))
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    configure_logging(getattr(logging, args.log_level), batched=args.command == "serve")
    try:
        code: int = args.func(cluster_args_anywhere(args))
    except (StateFileError, ConfigError, UsageError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    return code


def kubectl_plugin() -> int:
    """The ``kubectl-gpu_guard`` console script: ``kubectl gpu-guard ...`` runs it."""
    return main(prog=KUBECTL_PLUGIN)


if __name__ == "__main__":
    sys.exit(main())
