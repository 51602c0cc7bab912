"""``gapless doctor``: can gapless work here, as configured? One line per check.

Checks, each bounded by ``--timeout``:

* **postgres** — connect to GAPLESS_DATABASE_URL and run a query;
* **rabbitmq** — connect to GAPLESS_AMQP_URL;
* **integrator** — look up a probe number through the configured adapter, as a paused worker
  does (consumes no number, changes nothing): "not found" means reachable;
* **schema** — the database's Alembic revision against this gapless's head: up to date, behind
  (run ``gapless migrate``), ahead (this gapless is older than the database), or no schema;
* **cluster** — GAPLESS_CLUSTER_ID against the cluster id ``gapless migrate`` stored.

Each line says ``ok``, ``FAIL`` with a hint, or ``skip`` when a check cannot run because the one
it depends on failed (schema and cluster need the database). Exit 1 when any check fails, 0 when
all pass. Read-only: nothing is created, migrated or declared.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import typer

from gapless.cli.common import (
    DATABASE_HINT,
    INTEGRATOR_HINT,
    AmqpUrlOption,
    ClusterIdOption,
    DatabaseUrlOption,
    IntegratorUrlOption,
    describe_unreachable,
    first_line,
    installed_version,
    probe_integrator,
    run,
    settings_from,
)
from gapless.settings import Settings

OK, FAIL, SKIP = "ok", "fail", "skip"
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | fail | skip
    detail: str
    hint: str | None = None

    def line(self) -> str:
        label = {OK: "ok", FAIL: "FAIL", SKIP: "skip"}[self.status]
        text = f"{label:<5} {self.name:<11} {self.detail}"
        return f"{text}; hint: {self.hint}" if self.hint else text


@dataclass(frozen=True)
class DatabaseFacts:
    """What the postgres check read for the schema and cluster checks (None: absent)."""

    revision: str | None
    cluster_id: int | None


async def bounded(name: str, timeout_s: float, hint: str,
                  check: Callable[[], Awaitable[Check]]) -> Check:
    """Run one check under its deadline; a failure of any kind is its FAIL line, never a crash."""
    try:
        async with asyncio.timeout(timeout_s):
            return await check()
    except TimeoutError:
        return Check(name, FAIL, f"no answer within {timeout_s:g} s", hint)
    except Exception as exc:
        failure = describe_unreachable(exc)
        if failure is not None:
            return Check(name, FAIL, failure.summary, failure.hint)
        first = first_line(str(exc))
        return Check(name, FAIL, f"{type(exc).__name__}: {first}" if first
                     else type(exc).__name__, hint)


async def check_postgres(settings: Settings, facts: list[DatabaseFacts]) -> Check:
    from gapless.db import make_engine, stored_cluster_id
    from gapless.errors import NotMigratedError
    from gapless.migrations import current_revision
    from gapless.publisher import redact_url

    engine = make_engine(settings.database_url, actor="operator", pool_size=1, pre_ping=False)
    try:
        async with engine.connect() as conn:
            version = (await conn.exec_driver_sql("SHOW server_version")).scalar_one()
            revision = await conn.run_sync(current_revision)
            cluster_id: int | None = None
            if revision is not None:
                try:
                    cluster_id = await stored_cluster_id(conn)
                except NotMigratedError:
                    cluster_id = None
    finally:
        await engine.dispose()
    facts.append(DatabaseFacts(revision, cluster_id))
    return Check("postgres", OK,
                 f"PostgreSQL {str(version).split()[0]} at {redact_url(settings.database_url)}")


async def check_rabbitmq(settings: Settings) -> Check:
    from gapless.broker import node_label, node_urls
    from gapless.publisher import connect_once, redact_url

    connection = await connect_once(settings)
    try:
        server = connection.transport.connection.server_properties if connection.transport \
            else {}
        product = str(server.get("product") or "broker")
        version = str(server.get("version") or "").strip()
        node = node_label(str(getattr(connection, "url", "")))
    finally:
        await connection.close()
    where = redact_url(settings.amqp_url)
    if len(node_urls(settings.amqp_url)) > 1:
        where = f"{node} (first of {where} to answer)"
    return Check("rabbitmq", OK, f"{product} {version} at {where}, "
                 f"{settings.queue_type} queues".replace("  ", " "))


async def check_integrator(settings: Settings) -> Check:
    from gapless.publisher import redact_url

    answer = await probe_integrator(settings)
    said = "not found (as expected)" if answer is None else "found"
    return Check("integrator", OK, f"{redact_url(settings.integrator_url)} answers a probe "
                 f"lookup: {said}")


def check_schema(settings: Settings, facts: DatabaseFacts | None) -> Check:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from gapless.errors import ConfigurationError
    from gapless.migrations import alembic_config

    if facts is None:
        return Check("schema", SKIP, "needs the database")
    try:
        script = ScriptDirectory.from_config(alembic_config(settings.database_url))
        head = script.get_current_head()
    except ConfigurationError as exc:
        return Check("schema", FAIL, str(exc), "reinstall gapless or fix GAPLESS_SCHEMA_DIR")
    if facts.revision is None:
        return Check("schema", FAIL, "no gapless schema in this database",
                     "run `gapless migrate`")
    if facts.revision == head:
        return Check("schema", OK, f"up to date (revision {head})")
    try:
        known = script.get_revision(facts.revision) is not None
    except CommandError:
        known = False
    if known:
        return Check("schema", FAIL, f"behind: the database is at revision {facts.revision}, "
                     f"this gapless's head is {head}", "run `gapless migrate`")
    return Check("schema", FAIL, f"ahead: the database is at revision {facts.revision}, which "
                 f"this gapless does not know (its head is {head})",
                 "this gapless is older than the database: upgrade it (or check "
                 "GAPLESS_DATABASE_URL)")


def check_cluster(settings: Settings, facts: DatabaseFacts | None) -> Check:
    if facts is None:
        return Check("cluster", SKIP, "needs the database")
    if facts.cluster_id is None:
        return Check("cluster", SKIP, "no cluster id stored (no gapless schema)")
    if facts.cluster_id != settings.cluster_id:
        return Check("cluster", FAIL, f"GAPLESS_CLUSTER_ID is {settings.cluster_id} but the "
                     f"database belongs to cluster {facts.cluster_id}",
                     f"set GAPLESS_CLUSTER_ID={facts.cluster_id} or point GAPLESS_DATABASE_URL "
                     "at the right database")
    return Check("cluster", OK, f"cluster id {settings.cluster_id}, as stored in the database")


async def diagnose(settings: Settings, *, timeout_s: float) -> list[Check]:
    """Every check, the three services at once; schema and cluster from what postgres read."""
    from gapless.publisher import BROKER_HINT

    facts: list[DatabaseFacts] = []
    postgres, rabbitmq, integrator = await asyncio.gather(
        bounded("postgres", timeout_s, DATABASE_HINT, lambda: check_postgres(settings, facts)),
        bounded("rabbitmq", timeout_s, BROKER_HINT, lambda: check_rabbitmq(settings)),
        bounded("integrator", timeout_s, INTEGRATOR_HINT, lambda: check_integrator(settings)))
    known = facts[0] if facts and postgres.status == OK else None
    return [postgres, rabbitmq, integrator, check_schema(settings, known),
            check_cluster(settings, known)]


def doctor(
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0.1,
                                  help="Seconds each check may take."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
    integrator_url: str | None = IntegratorUrlOption,
    cluster_id: int | None = ClusterIdOption,
) -> None:
    """Check PostgreSQL, RabbitMQ, the integrator, the schema version and the cluster id; one
    line each (ok / FAIL with a hint); exit 1 when any fails."""
    settings = settings_from(database_url=database_url, amqp_url=amqp_url,
                             integrator_url=integrator_url, cluster_id=cluster_id)
    started = time.monotonic()
    checks = run(diagnose(settings, timeout_s=timeout))
    healthy = all(check.status != FAIL for check in checks)
    if as_json:
        document: dict[str, Any] = {
            "ok": healthy, "version": installed_version(),
            "seconds": round(time.monotonic() - started, 3),
            "checks": [asdict(check) for check in checks]}
        typer.echo(json.dumps(document))
    else:
        for check in checks:
            typer.echo(check.line())
    if not healthy:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
