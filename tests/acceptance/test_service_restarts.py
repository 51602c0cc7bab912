"""gapless keeps going through restarts of its servers, losing nothing.

Against a *private* PostgreSQL and RabbitMQ (tests/private_services.py: the shared servers are
never touched), with ``gapless mock-integrator`` (20–50 ms per call), two ``gapless worker`` and
one ``gapless recovery``, each scenario publishes 600 invoices with confirms, waits until the
workers are well into them, and then takes a server away in the middle of consumption:

- ``rabbitmq``: a full RabbitMQ restart (``rabbitmqctl shutdown``: the node process exits; then a
  new node on the same data directory);
- ``rabbitmq-kill``: the same with the node killed (SIGKILL): a broker crash, after which every
  confirmed persistent message must still be there;
- ``postgres-fast``: ``pg_ctl stop -m fast`` (clients disconnected, clean shutdown), then start;
- ``postgres-immediate``: ``pg_ctl stop -m immediate`` (every server process quits at once, no
  checkpoint: a crash; the start replays the WAL).

The server stays down until every gapless process has noticed (a log event of each) and for at
least ``MIN_OUTAGE_S``; meanwhile 200 more invoices are published, each republished until the
broker confirms it (republishing is safe: same ``invoice_id``). Then the server comes back, and
nothing of gapless is restarted: the processes must recover by themselves.

Once everything has settled the chaos checker (tests/chaos/checker.py) verifies every confirmed
publish is an invoice row and ISSUED (I4), I1 unique, I2 gap-free, I3 one number per invoice, I6
the feed poller (``events_after`` over SQL, following the whole run, outage included) saw every
event exactly once, I7 the ISSUED set equals the mock's ledger, every transition was allowed and
nothing was dead-lettered. The processes must still be the ones started at the beginning, each
must have done its work again after the server came back (alive is not enough), and each exits 0
on SIGTERM. The counts go to the "service restarts" section of the terminal summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.db import make_engine
from gapless.migrations import migrate
from gapless.numbering import add_series, build_series_spec
from gapless.publisher import Publisher, PublishUnconfirmed, queue_depths
from gapless.settings import Settings
from tests.chaos.checker import Expectations, History, check
from tests.chaos.scenario import Poller, read_dead_letters
from tests.helpers import GaplessProcess, await_until, wait_until
from tests.mock_client import MockIntegratorClient
from tests.private_services import PrivatePostgres, PrivateRabbitMQ, ShutdownMode
from tests.recovery_support import Processes, message

BEFORE_FAULT = 600
DURING_OUTAGE = 200
TOTAL = BEFORE_FAULT + DURING_OUTAGE
#: The fault comes once this many invoices are ISSUED: consumption is under way, far from done.
ISSUED_BEFORE_FAULT = 120
#: The server stays down at least this long (and until every process has noticed); longer
#: outages for a manual run: GAPLESS_RESTART_OUTAGE_S=30.
MIN_OUTAGE_S = float(os.environ.get("GAPLESS_RESTART_OUTAGE_S", "") or 3.0)
#: Everything must be settled this long after the server is back.
SETTLE_S = 90.0
#: Publishes of the outage's invoices awaiting their confirm at once.
PUBLISH_WINDOW = 20
#: Wait before republishing an unconfirmed message (a client's retry backoff).
REPUBLISH_BACKOFF_S = 0.5
#: Give up republishing a message after this long.
PUBLISH_DEADLINE_S = 60.0

#: Short leases so that an invoice whose outcome was lost in the outage is settled in-run.
PROCESS_ENV = {"GAPLESS_LEASE_S": "3", "GAPLESS_INTEGRATOR_TIMEOUT_S": "5",
               "GAPLESS_LOG_LEVEL": "info"}
RECOVERY_ARGS = ("--interval", "1", "--stuck-after", "3", "--backoff-base", "1",
                 "--backoff-max", "3", "--max-attempts", "1000", "--drain-timeout", "10")

#: Log events by which a process shows it met the outage (any one of them, per process).
DATABASE_TROUBLE = ("database_unavailable", "outcome_write_retry", "recovery_round_failed",
                    "orphan_failed")
BROKER_TROUBLE = ("amqp_connection_lost",)


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def private_template(private_postgres: PrivatePostgres) -> str:
    """The schema migrated once into the private server; every scenario clones it."""
    name = "gapless_template"
    migrate(private_postgres.url(name), 0)
    return name


@pytest.fixture
def scenario(private_postgres: PrivatePostgres, private_rabbitmq: PrivateRabbitMQ,
             private_template: str) -> Iterator[Settings]:
    """A fresh database and queue prefix on the private servers; both servers are running
    again afterwards, whatever the test did to them."""
    name = f"restarts_{uuid.uuid4().hex[:10]}"
    admin = private_postgres.url("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(private_template)))
    try:
        yield Settings(database_url=private_postgres.url(name),
                       amqp_url=private_rabbitmq.amqp_url, queue=name)
    finally:
        if not private_postgres.running():
            private_postgres.start()
        if private_rabbitmq.server_pid is None:
            private_rabbitmq.start()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


# --------------------------------------------------------------------------------------- a run


@dataclass
class Outage:
    """What the scenario did to a server, and what it saw."""

    kind: str
    stopped_after_issued: int = 0
    seconds: float = 0.0
    noticed_by: list[str] = field(default_factory=list)


class RestartRun:
    """One scenario: the processes, the load, the poller, and what they recorded."""

    def __init__(self, settings: Settings, mock: MockIntegratorClient, log_dir: Path) -> None:
        self.settings = settings
        self.mock = mock
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("GAPLESS_")}
        env.update({
            "GAPLESS_DATABASE_URL": settings.database_url,
            "GAPLESS_AMQP_URL": settings.amqp_url,
            "GAPLESS_QUEUE": settings.queue,
            "GAPLESS_CLUSTER_ID": "0",
            "GAPLESS_INTEGRATOR_URL": mock.url,
            "GAPLESS_LOG_FORMAT": "json",
            **PROCESS_ENV,
        })
        self.processes = Processes(env, log_dir)
        self.workers: list[GaplessProcess] = []
        self.recovery: GaplessProcess | None = None
        self.engine: AsyncEngine = make_engine(settings.database_url, actor="test",
                                               application_name="gapless-restart-test",
                                               pool_size=2)
        self.poller = Poller(settings.database_url)
        self.publisher = Publisher(settings, confirm_timeout=10)
        self.history = History()
        self.counts: Counter[str] = Counter()
        self._poller_stop = asyncio.Event()
        self._poller_task: asyncio.Task[None] | None = None

    @property
    def all_processes(self) -> list[GaplessProcess]:
        return [*self.workers, *([self.recovery] if self.recovery else [])]

    async def start(self) -> None:
        async with self.engine.begin() as conn:
            await add_series(conn, build_series_spec("acme", "ABC"))
        self.mock.set_faults(latency_ms=[20, 50])
        await self.publisher.start()  # declares the topology before any worker consumes
        self.workers = [self.processes.start(f"worker-{n}", ["worker", "--concurrency", "8",
                                                             "--shutdown-timeout", "10"])
                        for n in range(2)]
        self.recovery = self.processes.start("recovery", ["recovery", *RECOVERY_ARGS])

        def all_ready() -> bool:
            for proc in self.all_processes:
                assert proc.alive(), proc.output()[-3000:]
            return all(_logged(w, "worker_started") for w in self.workers) and \
                _logged(self.recovery, "recovery_round_started")

        await asyncio.to_thread(wait_until, all_ready, 60, message="workers and recovery")
        self._poller_task = asyncio.create_task(self.poller.follow(self._poller_stop))

    # -- load ----------------------------------------------------------------------------------

    async def publish(self, invoice_ids: list[str]) -> None:
        """Publish each invoice until the broker confirms it, PUBLISH_WINDOW at a time."""
        window = asyncio.Semaphore(PUBLISH_WINDOW)

        async def one(invoice_id: str) -> None:
            async with window:
                await self._publish_confirmed(invoice_id)

        await asyncio.gather(*(one(invoice_id) for invoice_id in invoice_ids))

    async def _publish_confirmed(self, invoice_id: str) -> None:
        deadline = time.monotonic() + PUBLISH_DEADLINE_S
        body = message(invoice_id)
        while True:
            self.counts["publish attempts"] += 1
            try:
                await self.publisher.publish(body)
            except PublishUnconfirmed:
                self.counts["publishes unconfirmed (retried)"] += 1
                if time.monotonic() > deadline:
                    raise AssertionError(f"{invoice_id}: no confirm for "
                                         f"{PUBLISH_DEADLINE_S:g}s") from None
                await asyncio.sleep(REPUBLISH_BACKOFF_S)  # a client's retry backoff
                continue
            self.history.publish(invoice_id, "acme", "ABC", "issued")
            return

    # -- observations ----------------------------------------------------------------------------

    async def scalar(self, query: str) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(text(query))).scalar_one())

    async def issued(self) -> int:
        return await self.scalar("SELECT count(*) FROM invoices WHERE status = 'ISSUED'")

    async def settled(self) -> bool:
        """Every confirmed publish ISSUED and nothing left in the queue."""
        if await self.issued() < len(self.history.published):
            return False
        depths = await queue_depths(self.settings)
        return depths[self.settings.queue] == 0

    def log_offsets(self) -> dict[str, int]:
        return {proc.name: proc.log_path.stat().st_size for proc in self.all_processes}

    def noticed(self, since: dict[str, int], events: tuple[str, ...]) -> list[str]:
        """The processes that logged one of ``events`` after the offsets ``since``."""
        return [proc.name for proc in self.all_processes
                if any(_logged(proc, name, since=since[proc.name]) for name in events)]

    # -- the end -------------------------------------------------------------------------------

    async def finish(self) -> dict[str, int]:
        """Stop the poller (after a last drain) and the processes (SIGTERM); their exit codes."""
        self._poller_stop.set()
        if self._poller_task is not None:
            await self._poller_task
        await self.poller.drain()
        self.history.feed = list(self.poller.seen)
        self.history.ledger = self.mock.ledger()
        self.history.dead_letters = await read_dead_letters(self.settings)  # must be none

        def terminate_all() -> dict[str, int]:
            return {proc.name: proc.terminate(timeout=40) for proc in self.all_processes}

        return await asyncio.to_thread(terminate_all)

    async def close(self) -> None:
        self._poller_stop.set()
        if self._poller_task is not None:
            self._poller_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller_task
        with contextlib.suppress(Exception):
            await self.publisher.close()
        await self.poller.close()
        await self.engine.dispose()
        self.processes.close()


def _logged(proc: GaplessProcess | None, event: str, *, since: int = 0) -> bool:
    """Whether ``proc`` logged a JSON record with this ``event`` after byte ``since``."""
    if proc is None:
        return False
    with proc.log_path.open("rb") as log:
        log.seek(since)
        chunk = log.read().decode(errors="replace")
    needle = f'"event": "{event}"'
    return any(needle in line for line in chunk.splitlines() if line.startswith("{"))


def _count_events(proc: GaplessProcess, names: tuple[str, ...]) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in proc.output().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                event = json.loads(line).get("event")
                if event in names:
                    found[event] += 1
    return found


# ---------------------------------------------------------------------------------- the faults


@dataclass(frozen=True)
class Fault:
    """How a scenario takes a server away and brings it back, and who must notice."""

    kind: str
    stop: Callable[[], object]
    start: Callable[[], object]
    #: Log events by which a process shows it met the outage (any one of them).
    trouble: tuple[str, ...]
    #: Whether recovery uses the server (it never talks to RabbitMQ).
    recovery_notices: bool


def _fault(kind: str, pg: PrivatePostgres, rabbit: PrivateRabbitMQ) -> Fault:
    if kind == "rabbitmq":
        return Fault(kind, rabbit.stop, rabbit.start, BROKER_TROUBLE, recovery_notices=False)
    if kind == "rabbitmq-kill":
        return Fault(kind, lambda: rabbit.stop("kill"), rabbit.start, BROKER_TROUBLE,
                     recovery_notices=False)
    mode: ShutdownMode = "fast" if kind == "postgres-fast" else "immediate"
    return Fault(kind, lambda: pg.stop(mode), pg.start, DATABASE_TROUBLE, recovery_notices=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["rabbitmq", "rabbitmq-kill", "postgres-fast",
                                  "postgres-immediate"])
async def test_workers_and_recovery_keep_going_through_a_server_restart(
        kind: str, scenario: Settings, private_postgres: PrivatePostgres,
        private_rabbitmq: PrivateRabbitMQ, mock_integrator: MockIntegratorClient,
        log_dir: Path, summary_line: Callable[[str], None]) -> None:
    started = time.monotonic()
    run = RestartRun(scenario, mock_integrator, log_dir)
    fault = _fault(kind, private_postgres, private_rabbitmq)
    outage = Outage(kind)
    try:
        await run.start()
        must_notice = {proc.name for proc in (
            run.all_processes if fault.recovery_notices else run.workers)}
        ids = [f"restart-{n:04d}" for n in range(TOTAL)]
        await run.publish(ids[:BEFORE_FAULT])

        async def under_way() -> bool:
            return await run.issued() >= ISSUED_BEFORE_FAULT

        await await_until(under_way, 60, interval=0.1,
                          message=f"{ISSUED_BEFORE_FAULT} invoices ISSUED")
        outage.stopped_after_issued = await run.issued()
        assert outage.stopped_after_issued < BEFORE_FAULT, "the fault must hit a run under way"

        # -- the outage: down until every process using the server has noticed, and for at
        # least MIN_OUTAGE_S; invoices keep being published meanwhile.
        before = run.log_offsets()
        went_down = time.monotonic()
        await asyncio.to_thread(fault.stop)
        publishing = asyncio.create_task(run.publish(ids[BEFORE_FAULT:]))

        def noticed() -> bool:
            outage.noticed_by = run.noticed(before, fault.trouble)
            return set(outage.noticed_by) >= must_notice and \
                time.monotonic() - went_down >= MIN_OUTAGE_S

        await asyncio.to_thread(wait_until, noticed, MIN_OUTAGE_S + 30, interval=0.1,
                                message=f"{sorted(must_notice)} to notice the {kind} outage")
        await asyncio.to_thread(fault.start)
        outage.seconds = time.monotonic() - went_down
        after = run.log_offsets()
        await asyncio.wait_for(publishing, PUBLISH_DEADLINE_S + 30)
        assert len(run.history.published) == TOTAL

        # -- settle, with nothing of gapless restarted
        back = time.monotonic()
        settled = True
        try:
            await await_until(run.settled, SETTLE_S, interval=0.25,
                              message=f"{TOTAL} invoices ISSUED after the {kind} restart")
        except AssertionError:
            settled = False  # the checker below names every invoice that is not
        settle_s = time.monotonic() - back

        dead = [f"{proc.name} exited {proc.proc.returncode}:\n{proc.output()[-3000:]}"
                for proc in run.all_processes if not proc.alive()]
        assert not dead, "a gapless process did not survive the restart:\n" + "\n".join(dead)
        # Alive is not enough: each one did its work again after the server came back.
        idle = [w.name for w in run.workers if not _logged(w, "invoice_issued",
                                                             since=after[w.name])]
        if fault.recovery_notices and not _logged(run.recovery, "recovery_round_finished",
                                                  since=after["recovery"]):
            idle.append("recovery")
        exit_codes = await run.finish()

        report = check(scenario.database_url, run.history,
                       Expectations(all_issued=True, error_ok=False))
        seen = Counter[str]()
        for proc in run.all_processes:
            seen += _count_events(proc, (*DATABASE_TROUBLE, *BROKER_TROUBLE, "amqp_reconnected",
                                         "orphan_repaired", "orphan_resent"))
        summary_line(
            f"{kind}: published {TOTAL} ({run.counts['publish attempts']} attempts, "
            f"{run.counts['publishes unconfirmed (retried)']} unconfirmed and retried), "
            f"confirmed {len(run.history.published)}, "
            f"issued {report.counts['  ISSUED']}, ledger {len(run.history.ledger)}, "
            f"events {report.counts['events in table']} "
            f"(feed saw {len(run.history.feed)}, poller errors {run.poller.errors}); "
            f"down {outage.seconds:.1f}s after {outage.stopped_after_issued} issued, "
            f"noticed by {', '.join(sorted(outage.noticed_by))}; "
            f"settled {settle_s:.1f}s after; "
            f"logged {', '.join(f'{k} {v}' for k, v in sorted(seen.items())) or 'nothing'}; "
            f"exit codes {exit_codes}; {time.monotonic() - started:.0f}s in all")
        print(report.summary())
        report.raise_for_violations()
        assert settled, "not settled, yet the checker found no violation"
        assert report.counts["  ISSUED"] == TOTAL
        assert not idle, f"alive but did nothing after the restart: {idle}"
        assert set(exit_codes.values()) == {0}, exit_codes
    finally:
        await run.close()
