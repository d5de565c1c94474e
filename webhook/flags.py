"""The command line's shared flag groups and value types: what ``webhook.cli`` builds each
command's arguments from.

Apart from the parser itself so that each stays readable; like it, imports nothing heavy (the
defaults come from ``webhook.defaults`` and ``webhook.audit.election``, never from the modules
that apply them).
"""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import Any

from webhook.audit.election import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
)
from webhook.commands.common import UsageError
from webhook.defaults import (
    CA_DAYS,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADERS_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
)


class HelpFormatter(argparse.HelpFormatter):
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


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="live cluster (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument(
        "--context", metavar="NAME", help="kubeconfig context to use (default: its current one)"
    )


def add_sync_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sync-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long one read of every kind may take; an unreachable API server fails at once",
    )


def add_cert_location_args(parser: Any) -> None:
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


def add_state_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        nargs="+",
        metavar="FILE",
        help="YAML/JSON files of cluster objects (kubectl get ... -o yaml output, or a List); "
        "without it the live cluster is read",
    )
    add_cluster_args(parser)
    add_sync_timeout(parser)
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="policy configuration (YAML; default: the built-in settings)",
    )


def at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def days(text: str) -> int:
    value = at_least_one(text)
    if value > CA_DAYS:
        raise argparse.ArgumentTypeError(f"at most {CA_DAYS} (the CA's lifetime), not {value}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, not {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):  # NaN fails the first test
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):  # NaN fails the first test
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of seconds, not {text}")
    return value


def add_slow_client_args(parser: argparse.ArgumentParser) -> None:
    """How long a client may take before its connection is cut (docs/security.md)."""
    limits = parser.add_argument_group(
        "slow clients (cut connections are counted in gpu_guard_connections_cut_total)"
    )
    limits.add_argument(
        "--headers-timeout",
        type=positive_seconds,
        default=DEFAULT_HEADERS_TIMEOUT,
        metavar="SECONDS",
        help="close a connection whose request headers take longer than this from their first byte",
    )
    limits.add_argument(
        "--body-timeout",
        type=positive_seconds,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="answer 408 and close when a review's body takes longer than this after its headers",
    )
    limits.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection that sends no request for this long after its handshake or "
        "last answer",
    )


def add_leader_election_args(parser: argparse.ArgumentParser) -> None:
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
        type=positive_seconds,
        default=DEFAULT_LEASE_DURATION,
        metavar="SECONDS",
        help="how long the others wait after the leader's last renew before taking the Lease",
    )
    group.add_argument(
        "--leader-election-renew-deadline",
        type=positive_seconds,
        default=DEFAULT_RENEW_DEADLINE,
        metavar="SECONDS",
        help="the leader stops auditing and writing when it could not renew for this long "
        "(shorter than the lease duration)",
    )
    group.add_argument(
        "--leader-election-retry-period",
        type=positive_seconds,
        default=DEFAULT_RETRY_PERIOD,
        metavar="SECONDS",
        help="how often the leader renews and the others try to acquire",
    )


def add_now(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="measure durations to this time, e.g. 2026-10-30T12:00:00Z (default: the clock)",
    )


def add_cluster_args_before_the_command(parser: argparse.ArgumentParser) -> None:
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
