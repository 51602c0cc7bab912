"""``gapless demo``: the whole system, on this machine's PostgreSQL and RabbitMQ, in one command.

The demo drops and re-creates its database (``gapless_demo``): only a database it created itself
(marked with a comment), or none of that name. An existing one without the mark is refused in one
line, exit 2, before anything is dropped or started, unless ``--force``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gapless.cli.options import AmqpUrlOption, DatabaseUrlOption, run, settings_from
from gapless.cli.printable import echo
from gapless.settings import Settings

#: The demo drops and re-creates its database: only names with this prefix are accepted.
DEMO_DATABASE_PREFIX = "gapless_demo"


def demo(
    invoices: int = typer.Option(2000, "--invoices", min=1, max=1_000_000,
                                 help="Invoices to publish (two tenants, user and batch)."),
    workers: int = typer.Option(2, "--workers", min=1, max=32, help="Worker processes."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=1000,
                                    help="Deliveries in flight per worker."),
    keep: bool = typer.Option(
        False, "--keep",
        help="Keep the demo database and queues after the run (for gapless status / dead "
             "list); by default they are dropped. Every run starts with a fresh database."),
    database: str = typer.Option(
        DEMO_DATABASE_PREFIX, "--database",
        help=f"Demo database name (must start with {DEMO_DATABASE_PREFIX}; it is dropped and "
             "re-created, if the demo created it). Server and credentials come from "
             "GAPLESS_DATABASE_URL."),
    force: bool = typer.Option(
        False, "--force",
        help="Drop an existing database of that name although gapless demo did not create it "
             "(the demo marks its own database with a comment)."),
    kill: bool = typer.Option(True, "--kill/--no-kill",
                              help="Kill one worker with SIGKILL midway, then restart it."),
    seed: int = typer.Option(7, "--seed", help="Seed of the load and the integrator's faults."),
    deadline: float | None = typer.Option(
        None, "--deadline", min=1,
        help="Seconds for the run to settle (default: 90 + 0.1 per invoice)."),
    log_dir: Path | None = typer.Option(None, "--log-dir",
                                        help="Where the processes' logs go (default: a temp "
                                             "directory, printed at the end)."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
) -> None:
    """Migrate a fresh demo database, start the mock integrator (with faults), workers and
    recovery, publish a mixed load, kill -9 and restart a worker midway, and end with the audit.

    Progress goes to stderr, the audit table and a summary to stdout. Exit code: the audit's
    (0 clean, 1 violations), or 1 when the run does not settle before the deadline.
    """
    from rich.console import Console

    from gapless.demo.runner import DemoConfig, foreign_database, run_demo

    if not database.startswith(DEMO_DATABASE_PREFIX):
        raise typer.BadParameter(
            f"--database: the demo drops its database, so the name must start with "
            f"{DEMO_DATABASE_PREFIX!r}, got {database!r}")
    settings = settings_from(database_url=database_url, amqp_url=amqp_url)
    _reach_services(settings)
    foreign = foreign_database(settings, database)
    if foreign is not None and not force:
        raise typer.BadParameter(foreign)
    if foreign is not None:
        echo(f"warning: --force: dropping database {database!r}, which gapless demo did not "
             "create", err=True)
    config = DemoConfig(invoices=invoices, workers=workers, concurrency=concurrency, keep=keep,
                        database=database, seed=seed, deadline_s=deadline, kill_worker=kill,
                        log_dir=log_dir, force=force)
    err = Console(stderr=True)
    try:
        result = run(run_demo(settings, config, err=err, out=Console()))
    except KeyboardInterrupt:
        # run_demo has stopped its processes and cleaned up on the way out.
        err.print("demo: interrupted; every process it started is stopped")
        raise typer.Exit(130) from None
    raise typer.Exit(result.exit_code)


def _reach_services(settings: Settings) -> None:
    """Connect to PostgreSQL and RabbitMQ once before anything is dropped or started, so an
    outage is the CLI's one line (exit 1) and not a half-started demo."""
    from gapless.amqp.connection import connect_once
    from gapless.ledger.migrations import reach_server

    # The server's maintenance database: the demo database itself is about to be re-created.
    reach_server(settings.database_url)

    async def broker() -> None:
        await (await connect_once(settings)).close()

    run(broker())


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
