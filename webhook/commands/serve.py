"""``gpu-guard serve``: the composition of the admission server.

From files, a fixed state and one audit at start-up (for the metrics). Live, the state comes
from list/watch: the server answers at once, /readyz stays 503 until every kind has synced,
nothing is denied on knowledge that is not fresh, denials naming pods are confirmed with the
API server; the background audit and the certificate manager (``--manage-certs``) run beside it.
With ``--leader-elect`` the background audit runs only on the replica that holds the Lease.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from functools import partial
from typing import Any

from webhook.admission.pipeline import Admission
from webhook.admission.server import Lifecycle, serve
from webhook.admission.slow_clients import ClientTimeouts
from webhook.audit.background import BackgroundAudit
from webhook.audit.election import ElectionConfig, default_identity, own_namespace
from webhook.commands.common import (
    EXIT_OK,
    UsageError,
    follow_configuration,
    load_frozen_state,
    state_files_read,
)
from webhook.config import load_config
from webhook.coverage import StateCoverage
from webhook.engine import Engine


def run(args: argparse.Namespace) -> int:
    engine = Engine(load_config(args.config, args.device_taint_rules))
    try:
        if args.state:
            state = load_frozen_state(args.state)
            follow_configuration(state, engine)
            ignored = state_files_read(state, args.state, announce=False)
            log = logging.getLogger("gpu-guard")
            log.info("state loaded: %s", state.counts())
            if ignored is not None:
                log.warning("state: %s", ignored)
            if args.leader_elect:
                log.info("--leader-elect ignored with --state: this server audits alone")
            admission = Admission(
                engine=engine,
                view=state,
                max_body=args.max_body,
                timeouts=client_timeouts(args),
                freshness=StateCoverage(state.seen_kinds()),  # "not judged" as check says it
            )
            asyncio.run(_serve_static(args, admission))
        else:
            asyncio.run(_serve_live(args, engine, election_config(args)))
    except FileNotFoundError as exc:
        raise UsageError(f"--tls-cert/--tls-key: no such file: {exc}") from None
    except OSError as exc:
        raise UsageError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    return EXIT_OK


def election_config(args: argparse.Namespace) -> ElectionConfig | None:
    """The Lease to campaign for with --leader-elect (None without it); unsafe durations are a
    usage error, as client-go refuses them."""
    if not args.leader_elect:
        return None
    config = ElectionConfig(
        namespace=args.leader_election_namespace or own_namespace(args.namespace),
        name=args.leader_election_lease_name,
        identity=args.leader_election_identity or default_identity(),
        lease_duration=args.leader_election_lease_duration,
        renew_deadline=args.leader_election_renew_deadline,
        retry_period=args.leader_election_retry_period,
    )
    if problem := config.problem():
        raise UsageError(f"--leader-elect: {problem}")
    return config


def client_timeouts(args: argparse.Namespace) -> ClientTimeouts:
    return ClientTimeouts(
        headers=args.headers_timeout, body=args.body_timeout, idle=args.idle_timeout
    )


def _serve_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "host": args.host,
        "port": args.port,
        "cert": args.tls_cert,
        "key": args.tls_key,
        "drain_delay": args.drain_delay,
        "config_path": args.config,
        "config_loader": partial(load_config, device_taint_rules=args.device_taint_rules),
        "client_ca": args.client_ca,
        "max_connections": args.max_connections,
    }


async def _serve_static(args: argparse.Namespace, admission: Admission) -> None:
    """A fixed state from files: the audit runs once at start-up, for the metrics."""
    if args.audit_interval > 0:
        await BackgroundAudit(admission.engine, admission.view, admission.metrics).run_once()
    await serve(admission, **_serve_options(args))


async def _serve_live(
    args: argparse.Namespace, engine: Engine, election: ElectionConfig | None
) -> None:
    """Serves at once: /readyz stays 503 until every kind has synced, and nothing is denied on
    knowledge that is not fresh. With --manage-certs the certificate comes from the Secret.
    With an election, only the Lease holder audits, writes reports and keeps the record the API
    server's policy reads (each on its own interval, 0 off); on the way out it
    releases the Lease before the client closes."""
    from webhook.audit.leader import LeaderElector, stop
    from webhook.audit.publish import ReportPublisher
    from webhook.audit.record import RecordKeeper
    from webhook.certs.sync import write_serving_files
    from webhook.commands.certs import cert_sync
    from webhook.commands.cluster import connect
    from webhook.state.client import TRANSIENT
    from webhook.state.failures import cannot_read, server_of
    from webhook.state.live import LiveState
    from webhook.state.snapshot import close

    api = await connect(args)
    tasks: list[asyncio.Task[None]] = []
    elector: LeaderElector | None = None
    campaign: asyncio.Task[None] | None = None
    live = LiveState(api, stale_after=args.stale_after)
    follow_configuration(live.state, engine)
    try:
        if args.manage_certs:
            sync = cert_sync(api, args)
            try:  # the server needs a certificate before it can listen
                await sync.sync_once()
            except TRANSIENT as exc:
                raise UsageError(f"--manage-certs: {cannot_read(exc, server_of(api))}") from None
            if sync.material is None:
                raise UsageError("--manage-certs: could not read or create the TLS Secret")
            write_serving_files(sync.material, args.tls_cert, args.tls_key)
            tasks.append(
                asyncio.create_task(sync.run(args.cert_check_interval, args.tls_cert, args.tls_key))
            )
        await live.start()
        admission = Admission(
            engine=engine,
            view=live.state,
            max_body=args.max_body,
            timeouts=client_timeouts(args),
            freshness=live,
            confirm=live.refresh_pods_on,
        )
        admission.metrics.watch_state(live.sync_status)
        admission.metrics.watch_api(live.reachability)
        if args.audit_interval > 0 or args.record_interval > 0:
            if election is not None:
                elector = LeaderElector(api, election, admission.metrics)
            holds = elector.holds if elector else lambda: True

            def ready() -> bool:
                return live.not_ready_reason() is None

            leaders_work: list[BackgroundAudit | RecordKeeper] = []
            if args.audit_interval > 0:
                leaders_work.append(
                    BackgroundAudit(
                        engine,
                        live.state,
                        admission.metrics,
                        publisher=ReportPublisher(api, holds, args.report_format)
                        if args.publish_reports
                        else None,
                        interval=args.audit_interval,
                        ready=ready,
                    )
                )
            if args.record_interval > 0:
                namespace = election.namespace if election else own_namespace(args.namespace)
                leaders_work.append(
                    RecordKeeper(
                        api,
                        engine,
                        live.state,
                        namespace,
                        holds=holds,
                        ready=ready,
                        interval=args.record_interval,
                    )
                )

            async def lead() -> None:
                """The leader's work: the audit and the record the API server's policy reads."""
                await asyncio.gather(*(work.run() for work in leaders_work))

            if elector is not None:
                campaign = asyncio.create_task(elector.run(lead))
            else:
                admission.metrics.leader.set(1)  # the one writer: no election asked for
                tasks.append(asyncio.create_task(lead()))
        if args.record_interval <= 0:
            logging.getLogger("gpu-guard.record").warning(
                "--record-interval 0: the record is not kept; with gpu-guard down the API "
                "server's policy judges node relabels on the record as last written, or on none"
            )
        lifecycle = Lifecycle(not_ready_reason=live.not_ready_reason)
        await serve(admission, lifecycle, **_serve_options(args))
    finally:
        if elector is not None and campaign is not None:
            await stop(elector, campaign)
        for task in tasks:
            task.cancel()
        await close(live)
