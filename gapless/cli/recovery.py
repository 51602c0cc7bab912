"""``gapless recovery``: settle orphans (stuck SENDING, due ERROR), asking the integrator first;
and follow GİB's verdict on ISSUED documents (``GAPLESS_GIB_POLL_*``)."""

from __future__ import annotations

import typer

from gapless.cli.options import (
    ClusterIdOption,
    DatabaseUrlOption,
    IntegratorUrlOption,
    run,
    settings_from,
)
from gapless.cli.printable import echo
from gapless.settings import Settings


def recovery(
    interval: float = typer.Option(10.0, "--interval", min=0.01,
                                   help="Seconds between rounds (a full batch goes on at once)."),
    stuck_after: float | None = typer.Option(
        None, "--stuck-after", min=0,
        help="A SENDING invoice whose lease is older than this many seconds is an orphan "
             "(default: GAPLESS_LEASE_S, 300 — the lease after which a worker's redelivery "
             "takes an invoice over too: one setting for both)."),
    batch: int = typer.Option(
        100, "--batch", min=1, max=100_000,
        help="Orphans per claim; a round claims again while claims come back full (up to 10 "
             "claims), --once claims once."),
    max_attempts: int = typer.Option(
        10, "--max-attempts", min=1,
        help="After this many attempts a failing invoice stays ERROR for an operator."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=1000,
                                    help="Orphans reconciled at once."),
    backoff_base: float = typer.Option(
        10.0, "--backoff-base", min=0.001,
        help="Seconds before the first retry of a transient failure (doubles per attempt)."),
    backoff_max: float = typer.Option(900.0, "--backoff-max", min=0.001,
                                      help="Longest wait between retries, in seconds."),
    drain_timeout: float = typer.Option(
        30.0, "--drain-timeout", min=0,
        help="On SIGTERM/SIGINT, seconds to finish in-flight orphans before exiting."),
    once: bool = typer.Option(False, "--once", help="Run one round, print a summary, exit 0."),
    metrics_port: int | None = typer.Option(None, "--metrics-port", min=1, max=65535,
                                            help="Serve /metrics, /healthz, /readyz here."),
    metrics_host: str | None = typer.Option(
        None, "--metrics-host",
        help="Overrides GAPLESS_METRICS_HOST (127.0.0.1): the interface /metrics listens on "
             "(0.0.0.0: every interface)."),
    database_url: str | None = DatabaseUrlOption,
    integrator_url: str | None = IntegratorUrlOption,
    cluster_id: int | None = ClusterIdOption,
) -> None:
    """Run the orphan-recovery loop (ask the integrator first; resend with the same number), and
    follow GİB's verdict on issued documents."""
    from gapless.issuing.outcome import Backoff
    from gapless.ledger.verdicts import GibPolicy
    from gapless.recovery.loop import RecoveryOptions

    settings = settings_from(database_url=database_url, integrator_url=integrator_url,
                             cluster_id=cluster_id, metrics_host=metrics_host)
    if backoff_max < backoff_base:
        raise typer.BadParameter("--backoff-max must be at least --backoff-base")
    options = RecoveryOptions(
        interval_s=interval,
        stuck_after_s=settings.lease_s if stuck_after is None else stuck_after,
        batch=batch, max_attempts=max_attempts,
        concurrency=concurrency, backoff=Backoff(backoff_base, backoff_max),
        breaker_reset_s=settings.breaker_reset_timeout_s, drain_timeout_s=drain_timeout,
        gib=GibPolicy.from_settings(settings), settings=settings)
    summary = run(_recovery(settings, options, once=once, metrics_port=metrics_port))
    if summary is not None:
        echo(summary)


async def _recovery(settings: Settings, options: object, *, once: bool,
                    metrics_port: int | None) -> str | None:
    from dataclasses import replace

    from gapless.integrator.accounts import Accounts
    from gapless.ledger.database import Database, check_cluster
    from gapless.recovery import metrics
    from gapless.recovery.loop import RecoveryLoop, RecoveryOptions, serve

    assert isinstance(options, RecoveryOptions)
    db = await Database.open(settings.database_url, actor="recovery",
                             size=max(settings.db_pool_size, min(options.concurrency, 32)))
    try:
        await check_cluster(db, settings.cluster_id)
        guard = Accounts.open(settings, name="recovery")
        try:
            if once:
                # One claim of --batch orphans, settled, then exit.
                once_loop = RecoveryLoop(db, guard, replace(options, claims_per_round=1))
                return (await once_loop.run_round()).line()
            loop = RecoveryLoop(db, guard, options)
            if metrics_port is None:
                await serve(loop)
                return None
            # /metrics, /healthz and /readyz in this event loop.
            server = metrics.health_server(loop, settings.metrics_host, metrics_port)
            await server.start()
            try:
                await serve(loop)
            finally:
                await server.stop()
            return None
        finally:
            await guard.aclose()
    finally:
        await db.close()


def register(app: typer.Typer) -> None:
    app.command("recovery")(recovery)
