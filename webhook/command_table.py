"""The command line as data: each subcommand one ``Command`` row, its arguments in help order.
``webhook.cli`` builds the parser from it (and completion and did-you-mean read that parser),
so a new flag is one row and cli.py stays the dispatch."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.admission.changes import DEFAULT_NAMESPACE
from webhook.completion import SHELLS
from webhook.defaults import (
    AUTO_REPORT_FORMAT,
    DEFAULT_AUDIT_INTERVAL,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_RECORD_INTERVAL,
    DEMO_NOW,
    REPORT_FORMATS,
)
from webhook.flags import (
    add_cert_location_args,
    add_cluster_args,
    add_leader_election_args,
    add_now,
    add_slow_client_args,
    add_state_args,
    add_sync_timeout,
    at_least_one,
    days,
    non_negative_seconds,
    port,
)
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.usage import add_color


@dataclass(frozen=True)
class Arg:
    """One ``add_argument``: its flags and keywords."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class Group:
    """An argument group of a command's help, with its arguments."""

    title: str
    members: tuple[Member, ...]


#: An argument, a group of them, or one of ``webhook.flags``' shared sets (``add_state_args``).
Member = Arg | Group | Callable[[Any], None]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one line of help, and its arguments in help order; it runs
    ``webhook.commands.<name>.run``."""

    name: str
    text: str
    members: tuple[Member, ...] = ()
    takes_parser: bool = False
    """Whether ``run`` reads the whole parser (``args.parser``): completion describes it."""
    epilog: str | None = None
    """What ``--help`` prints after the arguments (the exit codes, where they need saying)."""


def add_members(parser: Any, members: Sequence[Member]) -> None:
    """Adds ``members`` to ``parser`` (an argument group for each ``Group``)."""
    for member in members:
        if isinstance(member, Arg):
            parser.add_argument(*member.flags, **member.options)
        elif isinstance(member, Group):
            add_members(parser.add_argument_group(member.title), member.members)
        else:
            member(parser)


#: Whether DeviceTaintRules act, for the commands that judge (serve, check, audit, inventory).
DEVICE_TAINT_RULES = arg(
    "--device-taint-rules",
    action=argparse.BooleanOptionalAction,
    default=None,
    help="whether kube-apiserver runs with the DRADeviceTaintRules gate, so DeviceTaintRules taint "
    "the devices they select; wins over dra.deviceTaintRules of --config, also at its reloads "
    "(default: the file's, else off)",
)


#: Every command, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run the admission webhook server",
        (
            add_state_args,
            DEVICE_TAINT_RULES,
            arg(
                "--tls-cert",
                required=True,
                metavar="FILE",
                help="serving certificate (PEM), reloaded",
            ),
            arg("--tls-key", required=True, metavar="FILE", help="its private key (PEM), reloaded"),
            arg("--host", default="0.0.0.0", help="address to listen on"),
            arg("--port", type=port, default=8443, help="port to listen on, 1-65535"),
            arg(
                "--max-body",
                type=int,
                default=DEFAULT_MAX_BODY,
                metavar="BYTES",
                help="largest AdmissionReview body read; a larger one is refused",
            ),
            arg(
                "--max-connections",
                type=at_least_one,
                default=DEFAULT_MAX_CONNECTIONS,
                metavar="N",
                help="close new connections at once past N open, so the API server fails fast by "
                "the failurePolicy rather than waiting in a queue (default %(default)s; see "
                "docs/security.md)",
            ),
            add_slow_client_args,
            Group(
                "certificates managed in-cluster (live mode)",
                (
                    arg(
                        "--manage-certs",
                        action="store_true",
                        help="create and renew the CA and serving certificate in a Secret, keep the"
                        " webhook configurations' caBundle in step, and write --tls-cert/--tls-key "
                        "(an emptyDir)",
                    ),
                    add_cert_location_args,
                    arg(
                        "--cert-check-interval",
                        type=float,
                        default=300.0,
                        metavar="SECONDS",
                        help="how often the Secret and caBundles are checked and renewed as needed",
                    ),
                ),
            ),
            arg(
                "--client-ca",
                metavar="FILE",
                help="require client certificates signed by this CA (the API server's, see README)",
            ),
            arg(
                "--audit-interval",
                type=float,
                default=DEFAULT_AUDIT_INTERVAL,
                metavar="SECONDS",
                help="background audit period in live mode (0 turns it off)",
            ),
            arg(
                "--record-interval",
                type=float,
                default=DEFAULT_RECORD_INTERVAL,
                metavar="SECONDS",
                help="how often the leader recomputes the record the API server's policy reads "
                "when the guard is down, writing it only on a change (0 turns it off)",
            ),
            arg(
                "--no-reports",
                dest="publish_reports",
                action="store_false",
                help="do not write the background audit as PolicyReports (metrics only)",
            ),
            arg(
                "--report-format",
                choices=REPORT_FORMATS,
                default=AUTO_REPORT_FORMAT,
                help="the background audit's reports: openreports (openreports.io/v1alpha1 "
                "Reports), wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReports), or auto: "
                "OpenReports while its Report CRD is served, else PolicyReports, at each publish "
                "(default %(default)s)",
            ),
            add_leader_election_args,
            arg(
                "--drain-delay",
                type=float,
                default=5.0,
                metavar="SECONDS",
                help="after SIGTERM, keep serving with /readyz 503 this long before closing",
            ),
            arg(
                "--stale-after",
                type=non_negative_seconds,
                default=DEFAULT_STALE_AFTER,
                metavar="SECONDS",
                help="a deny resting on a kind out of sync longer than this (its watch broken, or "
                "resumed and not yet caught up) becomes a warning saying so; 0: as soon as it "
                "breaks",
            ),
        ),
    ),
    Command(
        "check",
        "evaluate proposed objects as admission would",
        (
            arg(
                "-f",
                "--file",
                nargs="+",
                required=True,
                metavar="FILE",
                help="change files: YAML/JSON manifests, a directory of them, or - for standard "
                "input; every object is judged in order, as kubectl apply -f would send them",
            ),
            arg(
                "-R",
                "--recursive",
                action="store_true",
                help="read the directories given with -f and their subdirectories",
            ),
            arg(
                "-n",
                "--namespace",
                default=DEFAULT_NAMESPACE,
                help="namespace for namespaced objects that name none, as kubectl's",
            ),
            add_state_args,
            DEVICE_TAINT_RULES,
            arg(
                "-o",
                "--output",
                choices=["text", "json"],
                default="text",
                help="text: what kubectl would print; json: every verdict",
            ),
            arg(
                "--allow-partial",
                action="store_true",
                help="exit 0 rather than 3 when a policy could not judge for want of a kind the "
                "state never saw (the answer still says so)",
            ),
        ),
        epilog="exit: 0 allowed (warnings too), 1 denied, 2 bad input, 3 nothing denied but a "
        "policy did not judge for want of a kind the state never saw (--allow-partial: 0)",
    ),
    Command(
        "audit",
        "every policy over every existing object",
        (
            add_state_args,
            DEVICE_TAINT_RULES,
            add_now,
            arg(
                "-o",
                "--output",
                choices=[
                    "table",
                    "json",
                    "yaml",
                    "policyreport",
                    "openreports",
                    "markdown",
                    "text",
                ],
                default="table",
                help="table for a terminal; json/yaml the contract; policyreport (wgpolicyk8s.io) "
                "or openreports (openreports.io) the CRs; markdown, text",
            ),
            arg(
                "--what-if",
                action="append",
                default=[],
                metavar="EVENT",
                help="audit a hypothetical (repeatable): node-down=NODE, cordon=NODE, drain=NODE, "
                "label=NODE:KEY=VALUE, label=NODE:KEY- (removed), "
                "driver-upgrade=[NVIDIADRIVER:]VERSION; prints the findings that appear and "
                "disappear (text or json/yaml)",
            ),
            arg(
                "--exit-on",
                choices=["hypothetical", "added"],
                default="hypothetical",
                help="with --what-if: exit 1 on any deny-level finding of the hypothetical cluster "
                "(default), or (added) only when the events add one or a relabel event would be "
                "denied: whether the maintenance is safe, whatever is already wrong",
            ),
            add_color,
        ),
    ),
    Command(
        "inventory",
        "one row per GPU node: health, GPUs, who uses them",
        (
            add_state_args,
            DEVICE_TAINT_RULES,
            add_now,
            arg(
                "-o",
                "--output",
                choices=["table", "json", "markdown"],
                default="table",
                help="table for a terminal; json the contract; markdown for GitHub",
            ),
            add_color,
        ),
    ),
    Command(
        "snapshot",
        "save, from the cluster, the objects the policies read",
        (
            add_cluster_args,
            add_sync_timeout,
            arg(
                "-o",
                "--output",
                required=True,
                metavar="FILE",
                help="state file to write (.json for JSON, else YAML; - for stdout)",
            ),
        ),
    ),
    Command(
        "policies",
        "print the policy reference, or one policy's entry",
        (
            arg(
                "id",
                nargs="?",
                metavar="ID",
                help="a policy, diagnosis or mutation id (all if none)",
            ),
            arg(
                "-o",
                "--output",
                choices=["markdown", "json"],
                default="markdown",
                help="output format",
            ),
        ),
    ),
    Command(
        "certs",
        "make a CA and serving certificate: files (--out) or the cluster (--apply)",
        (
            arg(
                "--out",
                metavar="DIR",
                help="write ca.crt/key, tls.crt/key, "
                "secret.yaml and ca-bundle.b64 here (never commit them); refused if any exists",
            ),
            arg(
                "--force",
                action="store_true",
                help="with --out: replace files that exist, keys included",
            ),
            arg(
                "--apply",
                action="store_true",
                help="create or renew the TLS Secret "
                "and inject the caBundle into both webhook configurations",
            ),
            add_cluster_args,
            add_cert_location_args,
            arg(
                "--host",
                dest="host_names",
                action="append",
                metavar="NAME",
                help="extra DNS name or IP for the certificate (repeatable)",
            ),
            arg("--days", type=days, default=365, help="how long the serving certificate is valid"),
        ),
    ),
    Command(
        "demo",
        "the home-lab incident: serve, send the changes, audit",
        (
            arg(
                "--example",
                default="examples/homelab",
                metavar="DIR",
                help="cluster.yaml and changes/*.yaml to play",
            ),
            arg(
                "--now",
                default=DEMO_NOW,
                metavar="RFC3339",
                help="audit time (default %(default)s, 112 days into the incident)",
            ),
        ),
    ),
    Command(
        "version",
        "the versions of gpu-guard, its chart and its image",
        (arg("-o", "--output", choices=["text", "json"], default="text", help="output format"),),
    ),
    Command(
        "completion",
        "the shell completion script, for bash or zsh",
        (arg("shell", choices=SHELLS, help="the shell to complete in"),),
        takes_parser=True,
    ),
)
