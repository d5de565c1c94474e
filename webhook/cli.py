"""``gpu-guard``: the command line's arguments, and the dispatch to ``webhook.commands``.

What each command does is in its module under ``webhook/commands/`` (exit codes in
``webhook.commands.common``); none imports kubernetes_asyncio until it reads a cluster. Bad
input is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from webhook.admission.changes import DEFAULT_NAMESPACE
from webhook.commands.common import EXIT_BAD_INPUT, UsageError
from webhook.completion import SHELLS
from webhook.config import ConfigError
from webhook.defaults import (
    AUTO_REPORT_FORMAT,
    DEFAULT_AUDIT_INTERVAL,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEMO_NOW,
    REPORT_FORMATS,
)
from webhook.flags import (
    HelpFormatter,
    add_cert_location_args,
    add_cluster_args,
    add_cluster_args_before_the_command,
    add_leader_election_args,
    add_now,
    add_slow_client_args,
    add_state_args,
    add_sync_timeout,
    at_least_one,
    cluster_args_anywhere,
    days,
    non_negative_seconds,
    port,
)
from webhook.logs import configure as configure_logging
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.files import StateFileError
from webhook.usage import GuardParser, add_color, add_version


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """``webhook.commands.<name>.run``, imported when the command runs: each command imports
    only what it uses (``audit --state`` neither aiohttp nor cryptography), not every other
    command's libraries as well."""

    def run(args: argparse.Namespace) -> int:
        module = importlib.import_module(f"webhook.commands.{name}")
        code: int = module.run(args)
        return code

    return run


PROG = "gpu-guard"
KUBECTL_PLUGIN = "kubectl gpu-guard"
"""The name in usage and errors when run as the kubectl plugin (script ``kubectl-gpu_guard``)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = GuardParser(
        prog=prog,
        description="Admission guard for GPU nodes, KubeVirt GPU VMs and the NVIDIA GPU Operator.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="least severe log record written to stderr",
    )
    add_cluster_args_before_the_command(parser)
    add_color(parser, top=True)
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=text, description=text, formatter_class=HelpFormatter
        )
        return parser

    serve_p = command("serve", "run the admission webhook server")
    add_state_args(serve_p)
    serve_p.add_argument(
        "--tls-cert", required=True, metavar="FILE", help="serving certificate (PEM), reloaded"
    )
    serve_p.add_argument(
        "--tls-key", required=True, metavar="FILE", help="its private key (PEM), reloaded"
    )
    serve_p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    serve_p.add_argument("--port", type=port, default=8443, help="port to listen on, 1-65535")
    serve_p.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="largest AdmissionReview body read; a larger one is refused",
    )
    serve_p.add_argument(
        "--max-connections",
        type=at_least_one,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="close new connections at once past N open, so the API server fails fast by the "
        "failurePolicy rather than waiting in a queue (default %(default)s; see docs/security.md)",
    )
    add_slow_client_args(serve_p)
    certs_group = serve_p.add_argument_group("certificates managed in-cluster (live mode)")
    certs_group.add_argument(
        "--manage-certs",
        action="store_true",
        help="create and renew the CA and serving certificate in a Secret, keep the webhook "
        "configurations' caBundle in step, and write --tls-cert/--tls-key (an emptyDir)",
    )
    add_cert_location_args(certs_group)
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
        dest="publish_reports",
        action="store_false",
        help="do not write the background audit as PolicyReports (metrics only)",
    )
    serve_p.add_argument(
        "--report-format",
        choices=REPORT_FORMATS,
        default=AUTO_REPORT_FORMAT,
        help="the background audit's reports: openreports (openreports.io/v1alpha1 Reports), "
        "wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReports), or auto: OpenReports while its "
        "Report CRD is served, else PolicyReports, at each publish (default %(default)s)",
    )
    add_leader_election_args(serve_p)
    serve_p.add_argument(
        "--drain-delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after SIGTERM, keep serving with /readyz 503 this long before closing",
    )
    serve_p.add_argument(
        "--stale-after",
        type=non_negative_seconds,
        default=DEFAULT_STALE_AFTER,
        metavar="SECONDS",
        help="a deny resting on a kind out of sync longer than this (its watch broken, or "
        "resumed and not yet caught up) becomes a warning saying so; 0: as soon as it breaks",
    )
    serve_p.set_defaults(func=_command("serve"))

    check_p = command("check", "evaluate proposed objects as admission would")
    check_p.epilog = (
        "exit: 0 allowed (warnings too), 1 denied, 2 bad input, 3 nothing denied but a policy "
        "did not judge for want of a kind the state never saw (--allow-partial: 0)"
    )
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
    add_state_args(check_p)
    check_p.add_argument(
        "-o",
        "--output",
        choices=["text", "json"],
        default="text",
        help="text: what kubectl would print; json: every verdict",
    )
    check_p.add_argument(
        "--allow-partial",
        action="store_true",
        help="exit 0 rather than 3 when a policy could not judge for want of a kind the state "
        "never saw (the answer still says so)",
    )
    check_p.set_defaults(func=_command("check"))

    audit_p = command("audit", "every policy over every existing object")
    add_state_args(audit_p)
    add_now(audit_p)
    audit_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "policyreport", "openreports", "markdown", "text"],
        default="table",
        help="table for a terminal; json/yaml the contract; policyreport (wgpolicyk8s.io) or "
        "openreports (openreports.io) the CRs; markdown, text",
    )
    audit_p.add_argument(
        "--what-if",
        action="append",
        default=[],
        metavar="EVENT",
        help="audit a hypothetical (repeatable): node-down=NODE, cordon=NODE, drain=NODE, "
        "label=NODE:KEY=VALUE, label=NODE:KEY- (removed), driver-upgrade=VERSION; prints the "
        "findings that appear and disappear (text or json/yaml)",
    )
    audit_p.add_argument(
        "--exit-on",
        choices=["hypothetical", "added"],
        default="hypothetical",
        help="with --what-if: exit 1 on any deny-level finding of the hypothetical cluster "
        "(default), or (added) only when the events add one or a relabel event would be "
        "denied: whether the maintenance is safe, whatever is already wrong",
    )
    add_color(audit_p)
    audit_p.set_defaults(func=_command("audit"))

    inventory_p = command("inventory", "one row per GPU node: health, GPUs, who uses them")
    add_state_args(inventory_p)
    add_now(inventory_p)
    inventory_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "markdown"],
        default="table",
        help="table for a terminal; json the contract; markdown for GitHub",
    )
    add_color(inventory_p)
    inventory_p.set_defaults(func=_command("inventory"))

    snapshot_p = command("snapshot", "save, from the cluster, the objects the policies read")
    add_cluster_args(snapshot_p)
    add_sync_timeout(snapshot_p)
    snapshot_p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="state file to write (.json for JSON, else YAML; - for stdout)",
    )
    snapshot_p.set_defaults(func=_command("snapshot"))

    policies_p = command("policies", "print the policy reference, or one policy's entry")
    policies_p.add_argument(
        "id", nargs="?", metavar="ID", help="a policy, diagnosis or mutation id (all if none)"
    )
    policies_p.add_argument(
        "-o", "--output", choices=["markdown", "json"], default="markdown", help="output format"
    )
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
    add_cluster_args(certs_p)
    add_cert_location_args(certs_p)
    certs_p.add_argument(
        "--host",
        dest="host_names",
        action="append",
        metavar="NAME",
        help="extra DNS name or IP for the certificate (repeatable)",
    )
    certs_p.add_argument(
        "--days", type=days, default=365, help="how long the serving certificate is valid"
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

    version_p = command("version", "the versions of gpu-guard, its chart and its image")
    version_p.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="output format"
    )
    version_p.set_defaults(func=_command("version"))

    completion_p = command("completion", "the shell completion script, for bash or zsh")
    completion_p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion_p.set_defaults(func=_command("completion"), parser=parser)
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
