"""``gpu-guard``: argument parsing and the glue between files, the engine and the terminal.

Exit codes: 0 allowed/clean, 1 denied/deny-level findings, 2 bad input (a file, a field or a
flag, named in one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from policies.registry import ALL_POLICIES
from webhook.audit import exit_code, parse_now, render_text, run_audit
from webhook.certs import make_ca, make_serving_cert, service_dns_names, write_bundle
from webhook.changes import index_objects, object_key, proposed_request
from webhook.config import ConfigError, load_config
from webhook.demo import DEMO_NOW, run_demo
from webhook.engine import Engine
from webhook.render import kubectl_lines
from webhook.review import decision_response
from webhook.server import DEFAULT_MAX_BODY, ServerState, serve
from webhook.statefile import StateFileError, check_object, load_state_objects, read_objects

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(ValueError):
    """A flag with a value we cannot use."""


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _add_state_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        nargs="+",
        required=True,
        metavar="FILE",
        help="YAML/JSON files of cluster objects (kubectl get ... -o yaml output, or a List)",
    )
    parser.add_argument("--config", metavar="FILE", help="policy configuration (YAML)")


def cmd_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    state, state_items = load_state_objects(args.state)
    existing = index_objects(state_items)
    changes = [item for path in args.file for item in read_objects(path)]
    for item in changes:
        check_object(item)
    engine = Engine(config)
    results = []
    denied = False
    for item in changes:
        request = proposed_request(item.obj, existing.get(object_key(item.obj)))
        decision = engine.evaluate(request, state)
        response = decision_response(request.uid, decision)
        denied |= not decision.allowed
        results.append((item, request, decision, response))
    if args.output == "json":
        _print_json(
            {
                "allowed": not denied,
                "results": [
                    {
                        "file": item.path,
                        "operation": request.operation,
                        "resource": request.ref.to_json(),
                        "allowed": decision.allowed,
                        "verdicts": [v.to_json() for v in decision.verdicts],
                    }
                    for item, request, decision, _ in results
                ],
            }
        )
    else:
        for item, request, _, response in results:
            for line in kubectl_lines(response, request, item.path):
                print(line)
    return EXIT_FINDINGS if denied else EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    try:
        now = parse_now(args.now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    config = load_config(args.config)
    state, _ = load_state_objects(args.state)
    report = run_audit(Engine(config), state, now)
    if args.output == "json":
        _print_json(report.to_json())
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(report.to_json(), sort_keys=False, width=100))
    else:
        sys.stdout.write(render_text(report))
    return exit_code(report.verdicts)


def cmd_policies(args: argparse.Namespace) -> int:
    sys.stdout.write(policy_reference())
    return EXIT_OK


def policy_reference() -> str:
    """The policy reference as Markdown: ids, scope, default action and why."""
    lines = ["# gpu-guard policies", ""]
    for policy in ALL_POLICIES:
        scope = "; ".join(f"{kind} {', '.join(sorted(ops))}" for kind, ops in policy.scope.items())
        lines += [
            f"## `{policy.id}`",
            "",
            policy.summary,
            "",
            f"- applies to: {scope}",
            f"- default action: **{policy.default_action.label}**: {policy.default_reason}",
            f"- when the policy itself fails: {policy.failure_action.label}",
            f"- audits existing objects: {'yes' if policy.audit else 'no (it judges changes)'}",
            "",
        ]
    return "\n".join(lines)


def cmd_certs(args: argparse.Namespace) -> int:
    hosts = list(args.host or []) + service_dns_names(args.service, args.namespace)
    ca = make_ca()
    serving = make_serving_cert(ca, hosts, days=args.days)
    written = write_bundle(args.out, ca, serving)
    for name, path in written.items():
        print(f"wrote {path}" + (" (private key, mode 0600)" if name.endswith(".key") else ""))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    state, _ = load_state_objects(args.state)
    shared = ServerState(engine=Engine(config), view=state, max_body=args.max_body)
    logging.getLogger("gpu-guard").info("state loaded: %s", state.counts())
    try:
        asyncio.run(
            serve(shared, host=args.host, port=args.port, cert=args.tls_cert, key=args.tls_key)
        )
    except FileNotFoundError as exc:
        raise UsageError(f"--tls-cert/--tls-key: no such file: {exc}") from None
    except OSError as exc:
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    example = Path(args.example)
    if not (example / "cluster.yaml").is_file():
        raise UsageError(f"--example: {example}/cluster.yaml not found (run from the repository)")
    return run_demo(example, args.now)


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
    serve_p.set_defaults(func=cmd_serve)

    check_p = sub.add_parser("check", help="evaluate proposed objects as admission would")
    check_p.add_argument("-f", "--file", nargs="+", required=True, metavar="FILE")
    _add_state_args(check_p)
    check_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    check_p.set_defaults(func=cmd_check)

    audit_p = sub.add_parser("audit", help="every policy over every existing object")
    _add_state_args(audit_p)
    audit_p.add_argument("--now", metavar="RFC3339", help="measure durations to this time")
    audit_p.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    audit_p.set_defaults(func=cmd_audit)

    policies_p = sub.add_parser("policies", help="print the policy reference")
    policies_p.set_defaults(func=cmd_policies)

    certs_p = sub.add_parser("certs", help="make a CA and a serving certificate")
    certs_p.add_argument("--out", required=True, metavar="DIR")
    certs_p.add_argument("--service", default="gpu-guard")
    certs_p.add_argument("--namespace", default="gpu-guard")
    certs_p.add_argument(
        "--host",
        action="append",
        metavar="NAME",
        help="extra DNS name or IP for the certificate (repeatable)",
    )
    certs_p.add_argument("--days", type=int, default=365)
    certs_p.set_defaults(func=cmd_certs)

    demo_p = sub.add_parser("demo", help="the home-lab incident: serve, send the changes, audit")
    demo_p.add_argument("--example", default="examples/homelab", metavar="DIR")
    demo_p.add_argument(
        "--now",
        default=DEMO_NOW,
        metavar="RFC3339",
        help=f"audit time (default {DEMO_NOW}, 112 days into the incident)",
    )
    demo_p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
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
