"""``gpu-guard``: argument parsing and the glue between files, the engine and the terminal.

Exit codes: 0 allowed/clean, 1 denied/deny-level findings, 2 bad input (a file, a field or a
flag, named in one line on stderr, never a traceback).

The modules that talk to a cluster (``live``, ``snapshot``, ``certsync``, ``report_sync``) are
imported inside the live-mode functions: they bring in kubernetes_asyncio (about 0.5 s and
60 MiB), which ``serve --state``, ``check --state`` and ``audit --state`` never use.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import yaml

from policies.model import JSONObject
from policies.reference import reference_text
from webhook.admission.changes import ObjectKey, index_objects, object_key, proposed_request
from webhook.admission.connections import DEFAULT_MAX_CONNECTIONS
from webhook.admission.review import decision_response
from webhook.admission.server import DEFAULT_MAX_BODY, ServerState, serve
from webhook.audit.background import DEFAULT_INTERVAL as DEFAULT_AUDIT_INTERVAL
from webhook.audit.background import BackgroundAudit
from webhook.audit.report import exit_code, parse_now, run_audit
from webhook.certs.issue import make_ca, make_serving_cert, service_dns_names, write_bundle
from webhook.certs.rotation import TlsMaterial
from webhook.config import ConfigError, load_config
from webhook.demo import DEMO_NOW, run_demo
from webhook.engine import Engine
from webhook.logs import configure as configure_logging
from webhook.render.kubectl import kubectl_lines
from webhook.render.text import render_text
from webhook.state.cluster import ClusterState
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.files import (
    LoadedObject,
    StateFileError,
    check_object,
    load_state,
    load_state_objects,
    read_objects,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from webhook.certs.sync import CertSync
    from webhook.state.live import LiveState

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
T = TypeVar("T")


class UsageError(Exception):
    """A flag with a value we cannot use. Not a ValueError: the handlers that turn a cluster's
    ValueErrors into "cannot reach the cluster" must let it through as it is."""


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


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


def _live_state(args: argparse.Namespace) -> LiveState:
    """A synced live state, its watches already stopped: one consistent read of the cluster."""
    from webhook.state.snapshot import LiveStateError, close, synced

    async def read() -> LiveState:
        live = await synced(args.kubeconfig, args.context, args.sync_timeout)
        await close(live)
        return live

    try:
        return asyncio.run(read())
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None


def cmd_check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    changes = [item for path in args.file for item in read_objects(path)]
    for item in changes:
        check_object(item)
    if args.state:
        state, state_items = load_state_objects(args.state)
        existing = index_objects(state_items)
    else:
        state, existing = _live_state_and_existing(args, changes)
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


def _live_state_and_existing(
    args: argparse.Namespace, changes: list[LoadedObject]
) -> tuple[ClusterState, dict[ObjectKey, JSONObject]]:
    """The live state, and the live version of each object the change files name."""
    from webhook.state.live import RESOURCE_OF
    from webhook.state.snapshot import LiveStateError, close, synced

    async def read() -> tuple[ClusterState, dict[ObjectKey, JSONObject]]:
        live = await synced(args.kubeconfig, args.context, args.sync_timeout)
        try:
            existing = {}
            for item in changes:
                key = object_key(item.obj)
                resource = RESOURCE_OF.get(key[0])
                if resource is not None:
                    obj = await live.get_object(resource, key[1], key[2])
                    if obj is not None:
                        existing[key] = obj
            return live.state, existing
        finally:
            await close(live)

    try:
        return asyncio.run(read())
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None


def cmd_audit(args: argparse.Namespace) -> int:
    import shutil

    from webhook.render.markdown import render_markdown
    from webhook.render.policyreport import render_policy_reports
    from webhook.render.progress import progress_bar, status
    from webhook.render.table import render_table

    try:
        now = parse_now(args.now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    config = load_config(args.config)
    live = not args.state
    if args.state:
        state = load_state(args.state)
    else:
        with status(sys.stderr, "reading the cluster"):
            state = _live_state(args).state
    with progress_bar(sys.stderr, enabled=live) as track:
        report = run_audit(Engine(config), state, now, track)
    if args.output == "json":
        _print_json(report.to_json())
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(report.to_json(), sort_keys=False, width=100))
    elif args.output == "policyreport":
        sys.stdout.write(render_policy_reports(report))
    elif args.output == "markdown":
        sys.stdout.write(render_markdown(report))
    elif args.output == "text":
        sys.stdout.write(render_text(report))
    else:
        tty = sys.stdout.isatty()
        width = max(60, shutil.get_terminal_size((100, 24)).columns) if tty else 100
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(render_table(report, width=width, color=tty, encoding=encoding))
    return exit_code(report.verdicts)


def cmd_policies(args: argparse.Namespace) -> int:
    sys.stdout.write(policy_reference())
    return EXIT_OK


def policy_reference() -> str:
    """The policy reference as Markdown: ids, scope, default action and why."""
    return reference_text()


def _cert_sync(api: Any, args: argparse.Namespace) -> CertSync:
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


def cmd_certs(args: argparse.Namespace) -> int:
    from webhook.certs.sync import encode_secret

    if args.apply:
        return _apply_certs(args)
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


async def _connect(args: argparse.Namespace) -> ApiClient:
    """The cluster's API client, or a UsageError saying why the credentials would not load."""
    from webhook.state.live import connect

    try:
        return await connect(args.kubeconfig, args.context)
    except Exception as exc:
        raise UsageError(f"cannot load cluster credentials: {exc}") from None


def _with_cluster(
    args: argparse.Namespace, work: Callable[[ApiClient], Awaitable[T]], failing: str
) -> T:
    """Runs ``work`` with a connected API client, closed after; a failure of the cluster's
    becomes one line: ``failing``, the error's type and message."""
    from webhook.state.live import TRANSIENT

    async def run() -> T:
        api = await _connect(args)
        try:
            return await work(api)
        finally:
            await api.close()

    try:
        return asyncio.run(run())
    except TRANSIENT as exc:
        raise UsageError(f"{failing}: {type(exc).__name__}: {exc}") from None


def _apply_certs(args: argparse.Namespace) -> int:
    """Creates or renews the Secret and injects the caBundles in the cluster, once."""

    async def apply(api: ApiClient) -> list[str]:
        sync = _cert_sync(api, args)
        reasons = await sync.sync_once()
        if not sync.settled:
            reasons.append(
                "a webhook configuration is missing: apply the manifests, then run this again"
            )
        return reasons

    reasons = _with_cluster(args, apply, "cannot reach the cluster")
    for reason in reasons or ["certificates and caBundles already current"]:
        print(reason)
    return EXIT_OK


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _serve_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "host": args.host,
        "port": args.port,
        "cert": args.tls_cert,
        "key": args.tls_key,
        "drain_delay": args.drain_delay,
        "config_path": args.config,
        "client_ca": args.client_ca,
        "max_connections": args.max_connections,
    }


async def _serve_live(args: argparse.Namespace, engine: Engine) -> None:
    """Serves at once: /readyz stays 503 until every kind has synced, and nothing is denied on
    knowledge that is not fresh. With --manage-certs the certificate comes from the Secret."""
    from webhook.audit.publish import ReportPublisher
    from webhook.certs.sync import write_serving_files
    from webhook.state.live import LiveState
    from webhook.state.snapshot import close

    api = await _connect(args)
    tasks: list[asyncio.Task[None]] = []
    live = LiveState(api, stale_after=args.stale_after)
    try:
        if args.manage_certs:
            sync = _cert_sync(api, args)
            await sync.sync_once()  # the server needs a certificate before it can listen
            if sync.material is None:
                raise UsageError("--manage-certs: could not read or create the TLS Secret")
            write_serving_files(sync.material, args.tls_cert, args.tls_key)
            tasks.append(
                asyncio.create_task(sync.run(args.cert_check_interval, args.tls_cert, args.tls_key))
            )
        await live.start()
        shared = ServerState(
            engine=engine,
            view=live.state,
            max_body=args.max_body,
            not_ready_reason=live.not_ready_reason,
            freshness=live,
            confirm=live.refresh_pods_on,
        )
        shared.metrics.watch_state(live.sync_status)
        if args.audit_interval > 0:
            audit = BackgroundAudit(
                engine,
                live.state,
                shared.metrics,
                publisher=ReportPublisher(api) if args.reports else None,
                interval=args.audit_interval,
                ready=lambda: live.not_ready_reason() is None,
            )
            tasks.append(asyncio.create_task(audit.run()))
        await serve(shared, **_serve_options(args))
    finally:
        for task in tasks:
            task.cancel()
        await close(live)


async def _serve_static(args: argparse.Namespace, shared: ServerState) -> None:
    """A fixed state from files: the audit runs once at start-up, for the metrics."""
    if args.audit_interval > 0:
        await BackgroundAudit(shared.engine, shared.view, shared.metrics).run_once()
    await serve(shared, **_serve_options(args))


def cmd_serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    engine = Engine(config)
    try:
        if args.state:
            state = load_state(args.state)
            logging.getLogger("gpu-guard").info("state loaded: %s", state.counts())
            shared = ServerState(engine=engine, view=state, max_body=args.max_body)
            asyncio.run(_serve_static(args, shared))
        else:
            asyncio.run(_serve_live(args, engine))
    except FileNotFoundError as exc:
        raise UsageError(f"--tls-cert/--tls-key: no such file: {exc}") from None
    except OSError as exc:
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    from webhook.state.snapshot import collect, write_state_file

    objects = _with_cluster(args, collect, "cannot read the cluster")
    write_state_file(objects, args.output)
    if args.output != "-":
        print(f"wrote {len(objects)} objects to {args.output}", file=sys.stderr)
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
    serve_p.set_defaults(func=cmd_serve)

    check_p = sub.add_parser("check", help="evaluate proposed objects as admission would")
    check_p.add_argument("-f", "--file", nargs="+", required=True, metavar="FILE")
    _add_state_args(check_p)
    check_p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    check_p.set_defaults(func=cmd_check)

    audit_p = sub.add_parser("audit", help="every policy over every existing object")
    _add_state_args(audit_p)
    audit_p.add_argument("--now", metavar="RFC3339", help="measure durations to this time")
    audit_p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "policyreport", "markdown", "text"],
        default="table",
    )
    audit_p.set_defaults(func=cmd_audit)

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
    snapshot_p.set_defaults(func=cmd_snapshot)

    policies_p = sub.add_parser("policies", help="print the policy reference")
    policies_p.set_defaults(func=cmd_policies)

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
