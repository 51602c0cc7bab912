"""``gapless doctor``'s checks: can gapless work here, as configured? One :class:`Check` each.

Checks (the three services each bounded by ``gapless doctor --timeout``):

* **postgres** — connect to GAPLESS_DATABASE_URL and run a query;
* **rabbitmq** — connect to GAPLESS_AMQP_URL;
* **integrator** — one line per integrator account (the global settings, then each account of
  GAPLESS_INTEGRATORS_FILE): look up a probe document through its adapter, as a paused worker
  does (consumes no number, changes nothing): "not found" means reachable;
* **schema** — the database's Alembic revision against this gapless's head: up to date, behind
  (run ``gapless migrate``), ahead (this gapless is older than the database), or no schema;
* **cluster** — GAPLESS_CLUSTER_ID against the cluster id ``gapless migrate`` stored;
* **replication** — whether a commit waits for a standby (:func:`classify_replication`): ``ok``
  naming the synchronous standbys; ``WARN`` when commits are acknowledged before any standby has
  them (asynchronous standbys, or none: a failover or a restore could then hand out a sealed
  number twice); ``FAIL`` when commits cannot complete (a synchronous standby is asked for and
  none is connected) or the server is a standby.

Each check ends ``ok``, ``warn`` with a hint (gapless works, with a risk to know about),
``fail`` with a hint, or ``skip`` when it cannot run because the one it depends on failed
(schema, cluster and replication need the database); :func:`diagnose` never raises for a service
that fails or hangs, it says so in that check. The system is :func:`healthy` when no check
fails (a warning is not a failure). Read-only: nothing is created, migrated or declared; the
integrator probe consumes no number.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapless.ops.unreachable import (
    DATABASE_HINT,
    describe_unreachable,
    first_line,
    integrator_hint,
)
from gapless.settings import Settings

if TYPE_CHECKING:
    from gapless.ledger.database import Database

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``detail`` says what was found, ``hint`` what to do (warn, fail)."""

    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    hint: str | None = None


@dataclass(frozen=True)
class Standby:
    """One row of ``pg_stat_replication`` (None: hidden from this role, or not reported)."""

    name: str | None
    state: str | None
    sync_state: str | None


@dataclass(frozen=True)
class ReplicationFacts:
    """What the replication check reads, as this session's commits see it."""

    in_recovery: bool
    synchronous_commit: str
    standby_names: str
    role: str
    standbys: tuple[Standby, ...]


@dataclass(frozen=True)
class DatabaseFacts:
    """What the postgres check read for the schema, cluster and replication checks (None:
    absent; ``replication_error``: why replication could not be read)."""

    revision: str | None
    cluster_id: int | None
    replication: ReplicationFacts | None = None
    replication_error: str | None = None


#: ``synchronous_commit`` levels at which a commit waits for the synchronous standbys (``local``
#: and ``off`` never wait).
WAITING_LEVELS = ("on", "remote_write", "remote_apply")
#: ``FIRST 2 (a, b)``, ``ANY 1 (a, b)``, ``2 (a, b)``; a plain list ``a, b`` asks for one.
_STANDBY_COUNT = re.compile(r"^\s*(?:(first|any)\s+)?(\d+)\s*\(", re.IGNORECASE)
_DOCS = "see docs/operations.md"


def required_standbys(standby_names: str) -> tuple[int, bool]:
    """How many synchronous standbys ``synchronous_standby_names`` makes each commit wait for,
    and whether it is a quorum (``ANY``): ``(0, False)`` when it names none."""
    if not standby_names.strip():
        return 0, False
    found = _STANDBY_COUNT.match(standby_names)
    if found is None:
        return 1, False
    return int(found.group(2)), (found.group(1) or "").lower() == "any"


def _names(standbys: list[Standby]) -> str:
    return ", ".join(repr(s.name or "?") for s in standbys)


def classify_replication(facts: ReplicationFacts) -> Check:
    """The replication line: does a commit wait for a standby, so that a promoted standby has
    every number a client was told was sealed?"""
    name = "replication"
    if facts.in_recovery:
        return Check(name, FAIL, "this server is a standby in recovery: it takes no writes",
                     "point GAPLESS_DATABASE_URL at the primary: list every host, with "
                     "target_session_attrs=read-write")
    wanted, quorum = required_standbys(facts.standby_names)
    level = facts.synchronous_commit
    if wanted == 0 or level not in WAITING_LEVELS:
        why = ("synchronous_standby_names is empty" if wanted == 0
               else f"synchronous_commit = {level}")
        if not facts.standbys:
            return Check(name, WARN,
                         "no standby: commits are acknowledged by this server alone; if it is "
                         "lost, so are the numbers sealed since the last backup, and a restore "
                         "could hand them out again",
                         f"add a synchronous standby ({_DOCS})")
        return Check(name, WARN,
                     f"commits are acknowledged before a standby has them ({why}; "
                     f"{_names(list(facts.standbys))} asynchronous): a failover could hand "
                     "out a sealed number twice",
                     "name the standbys in synchronous_standby_names, with synchronous_commit "
                     f"= on or remote_apply ({_DOCS})")
    if facts.standbys and all(s.sync_state is None for s in facts.standbys):
        return Check(name, WARN,
                     f"{len(facts.standbys)} standby(s) connected, but role {facts.role!r} "
                     "cannot see whether they are synchronous",
                     f"GRANT pg_read_all_stats TO {facts.role} (or run doctor as a superuser)")
    synchronous = [s for s in facts.standbys
                   if s.state == "streaming" and s.sync_state in ("sync", "quorum")]
    if len(synchronous) < wanted:
        connected = f"{len(synchronous)} connected" + (
            f" ({_names(synchronous)})" if synchronous else "")
        return Check(name, FAIL,
                     f"synchronous_standby_names = {facts.standby_names!r} asks for {wanted} "
                     f"synchronous standby(s), {connected}: every commit waits until one is",
                     "start the standby (or clear synchronous_standby_names, and accept the "
                     f"risk: {_DOCS})")
    others = [s for s in facts.standbys if s not in synchronous]
    what = (f"{wanted} of {_names(synchronous)} (quorum)" if quorum
            else f"{'standby' if len(synchronous) == 1 else 'standbys'} {_names(synchronous)}")
    detail = f"commits wait for {what}; synchronous_commit = {level}"
    if others:
        detail += "; also connected: " + ", ".join(
            f"{s.name or '?'!r} ({s.sync_state or s.state or '?'})" for s in others)
    return Check(name, OK, detail)


def check_replication(facts: DatabaseFacts | None) -> Check:
    """The replication line from what the postgres check read (skip without the database)."""
    if facts is None:
        return Check("replication", SKIP, "needs the database")
    if facts.replication is None:
        return Check("replication", WARN, "cannot read the replication state: "
                     f"{facts.replication_error or 'no answer'}",
                     "run doctor as a role that may read pg_stat_replication")
    return classify_replication(facts.replication)


async def read_replication(db: Database) -> tuple[ReplicationFacts | None, str | None]:
    from gapless.ledger.queries import config as q

    try:
        row = await db.one(q.REPLICATION)
    except Exception as exc:  # reported on the replication line, not the postgres one
        return None, f"{type(exc).__name__}: {first_line(str(getattr(exc, 'orig', exc)))}"
    standbys = tuple(Standby(s.get("name"), s.get("state"), s.get("sync_state"))
                     for s in row.standbys or [])
    return ReplicationFacts(bool(row.in_recovery), str(row.synchronous_commit),
                            str(row.standby_names), str(row.role), standbys), None


async def bounded(name: str, timeout_s: float, hint: str,
                  check: Callable[[], Awaitable[Check]], settings: Settings) -> Check:
    """Run one check under its deadline; a failure of any kind is its FAIL line, never a crash
    (a service that cannot be reached is named as :mod:`gapless.ops.unreachable` says it)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await check()
    except TimeoutError:
        return Check(name, FAIL, f"no answer within {timeout_s:g} s", hint)
    except Exception as exc:
        failure = describe_unreachable(exc, settings)
        if failure is not None:
            return Check(name, FAIL, failure.summary, failure.hint)
        first = first_line(str(exc))
        return Check(name, FAIL, f"{type(exc).__name__}: {first}" if first
                     else type(exc).__name__, hint)


async def check_postgres(settings: Settings, facts: list[DatabaseFacts]) -> Check:
    """Connect, read the server's version, the schema revision, the stored cluster id and the
    replication state (appended to ``facts`` for the checks that need the database); read-only,
    one connection, no locks."""
    from gapless.errors import NotMigratedError
    from gapless.ledger.database import Database, make_engine, stored_cluster_id
    from gapless.ledger.migrations import current_revision
    from gapless.ledger.queries import config as q
    from gapless.urls import redact_url

    engine = make_engine(settings.database_url, actor="operator", pool_size=1, pre_ping=False)
    try:
        db = Database.borrowing(engine)
        version = (await db.one(q.SERVER_VERSION)).server_version
        async with engine.connect() as conn:  # the migrations' revision, as Alembic reads it
            revision = await conn.run_sync(current_revision)
        cluster_id: int | None = None
        if revision is not None:
            try:
                cluster_id = await stored_cluster_id(db)
            except NotMigratedError:
                cluster_id = None
        replication, replication_error = await read_replication(db)
    finally:
        await engine.dispose()
    facts.append(DatabaseFacts(revision, cluster_id, replication, replication_error))
    return Check("postgres", OK,
                 f"PostgreSQL {str(version).split()[0]} at {redact_url(settings.database_url)}")


async def check_rabbitmq(settings: Settings) -> Check:
    """Connect to the broker (the first node of GAPLESS_AMQP_URL to answer) and name it; declares
    nothing."""
    from gapless.amqp.connection import connect_once
    from gapless.urls import node_label, node_urls, redact_url

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
    """Look up the probe document through the adapter of the global settings
    (:func:`probe_integrator`)."""
    from gapless.integrator.base import endpoint
    from gapless.urls import redact_url

    answer = await probe_integrator(settings)
    said = "not found (as expected)" if answer is None else "found"
    return Check("integrator", OK, f"{redact_url(endpoint(settings)[0])} answers a probe "
                 f"lookup: {said}")


async def check_integrators(settings: Settings, *, timeout_s: float) -> list[Check]:
    """One check per integrator account, at once, each bounded by ``timeout_s``: without
    GAPLESS_INTEGRATORS_FILE the one line of the global settings, as ever; with it, each
    account's line names it and its tenants, and a failure's hint names the setting of its
    endpoint (the file's ``url`` key, or the adapter's variable)."""
    from dataclasses import replace

    from gapless.integrator.accounts import load_accounts

    plan = load_accounts(settings)
    if len(plan.accounts) == 1:
        return [await bounded("integrator", timeout_s, integrator_hint(settings),
                              lambda: check_integrator(settings), settings)]

    async def one(account: Any) -> Check:
        hint = f"is the integrator running? check {account.endpoint_setting}"
        check = await bounded("integrator", timeout_s, hint,
                              lambda: check_integrator(account.settings), account.settings)
        tenants = ", ".join(account.tenants)
        if account.is_global:
            tenants = "tenants the file does not name" + (f", and {tenants}" if tenants else "")
        return replace(check, detail=f"account {account.name} ({tenants}): {check.detail}",
                       hint=hint if check.hint is not None else None)

    return list(await asyncio.gather(*(one(account) for account in plan.accounts)))


def check_schema(settings: Settings, facts: DatabaseFacts | None) -> Check:
    """The database's revision against this gapless's head (read from the installed migrations):
    up to date, behind, ahead, or no schema; skip without the database."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from gapless.errors import ConfigurationError
    from gapless.ledger.migrations import alembic_config

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
    """GAPLESS_CLUSTER_ID against the id the database stores; skip without one."""
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
    """Every check, in the order they are shown: the three services at once (each bounded by
    ``timeout_s``), then schema, cluster and replication from what postgres read."""
    from gapless.amqp.connection import BROKER_HINT

    facts: list[DatabaseFacts] = []
    postgres, rabbitmq, integrators = await asyncio.gather(
        bounded("postgres", timeout_s, DATABASE_HINT, lambda: check_postgres(settings, facts),
                settings),
        bounded("rabbitmq", timeout_s, BROKER_HINT, lambda: check_rabbitmq(settings), settings),
        check_integrators(settings, timeout_s=timeout_s))
    known = facts[0] if facts and postgres.status == OK else None
    return [postgres, rabbitmq, *integrators, check_schema(settings, known),
            check_cluster(settings, known), check_replication(known)]


def healthy(checks: list[Check]) -> bool:
    """True when no check failed (a warning or a skip is not a failure)."""
    return all(check.status != FAIL for check in checks)


async def probe_integrator(settings: Settings, tenant: str | None = None) -> Any:
    """Look up the probe document UUID through the adapter of ``tenant``'s integrator account
    (without a tenant, the global settings' adapter), as a paused worker does: a lookup consumes
    no number and changes nothing. Returns the answer (None, "not found", is the expected one);
    raises TransientIntegratorError when the integrator cannot answer."""
    from gapless.integrator.accounts import load_accounts
    from gapless.integrator.base import load_integrator
    from gapless.issuing.outcome import PROBE_TENANT, PROBE_UUID

    if tenant is not None:
        settings = load_accounts(settings).of(tenant).settings
    integrator = load_integrator(settings)
    try:
        return await integrator.lookup_uuid(PROBE_TENANT, PROBE_UUID)
    finally:
        await integrator.aclose()
