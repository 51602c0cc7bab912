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

A crash can cost a single RabbitMQ node more than gapless can answer for: on RabbitMQ 3.10 a
durable queue (its record, and with it every message it held) now and then does not come back
from a SIGKILL, whatever its storage version (docs/operations.md, "A crash of a single RabbitMQ
node"). ``rabbitmq-kill`` therefore counts the node's durable queues before the crash and those it
says it recovered; when it recovered fewer, the scenario does what a producer must then do,
publishes again every confirmed invoice the database does not know (safe: same ``invoice_id``),
says so in its summary, and checks every invariant as strictly as ever.

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
import gc
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from gapless.ledger.migrations import migrate
from gapless.settings import Settings
from tests.chaos.checker import Expectations, check
from tests.helpers import await_until, wait_until
from tests.mock_client import MockIntegratorClient
from tests.private_services import PrivatePostgres, PrivateRabbitMQ, ShutdownMode
from tests.restart_support import (
    BROKER_TROUBLE,
    DATABASE_TROUBLE,
    PUBLISH_DEADLINE_S,
    Outage,
    RestartRun,
    count_events,
    logged,
)

#: Clients of this process (the publisher, the feed poller) whose server was killed under them
#: leave objects the drivers cannot close: aiormq's close coroutine of a connection that vanished,
#: psycopg's connection to a server that is gone. They are collected at each test's end (the
#: fixture below), here, rather than whenever the garbage collector next runs, in some other
#: test; that they exist is what these tests do, not a leak.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <coroutine object Connection.close"
        ":pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function BaseConnection.__del__"
        ":pytest.PytestUnraisableExceptionWarning"),
]

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
        gc.collect()  # the killed servers' client objects, within this test (see pytestmark)
    finally:
        if not private_postgres.running():
            private_postgres.start()
        if private_rabbitmq.server_pid is None:
            private_rabbitmq.start()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


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
        durable = (await asyncio.to_thread(private_rabbitmq.durable_classic_queues)
                   if kind == "rabbitmq-kill" else [])
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
        node_log = private_rabbitmq.node_log_size()
        await asyncio.to_thread(fault.start)
        outage.seconds = time.monotonic() - went_down
        after = run.log_offsets()
        await asyncio.wait_for(publishing, PUBLISH_DEADLINE_S + 30)
        assert len(run.history.published) == TOTAL
        broker = ""
        if kind == "rabbitmq-kill":
            recovered = await asyncio.to_thread(private_rabbitmq.recovered_classic_queues,
                                                node_log)
            broker = (f"the node recovered {recovered} of {len(durable)} durable classic "
                      "queues" if recovered is not None else
                      "the node's log gave no count of the queues it recovered")
            if recovered is not None and recovered < len(durable):
                # The broker lost a queue and the confirmed messages in it: publish again.
                lost = await run.published_without_row()
                await run.publish(lost)
                broker += f" (a queue lost in the crash: {len(lost)} published again)"
                print(f"the private RabbitMQ's log:\n{private_rabbitmq.log_tail(200)}")
            broker += "; "

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
        idle = [w.name for w in run.workers if not logged(w, "invoice_issued",
                                                             since=after[w.name])]
        if fault.recovery_notices and not logged(run.recovery, "recovery_round_finished",
                                                  since=after["recovery"]):
            idle.append("recovery")
        exit_codes = await run.finish()

        report = check(scenario.database_url, run.history,
                       Expectations(all_issued=True, error_ok=False))
        seen = Counter[str]()
        for proc in run.all_processes:
            seen += count_events(proc, (*DATABASE_TROUBLE, *BROKER_TROUBLE, "amqp_reconnected",
                                         "orphan_repaired", "orphan_resent"))
        summary_line(
            f"{kind}: published {TOTAL} ({run.counts['publish attempts']} attempts, "
            f"{run.counts['publishes unconfirmed (retried)']} unconfirmed and retried), "
            f"confirmed {len(run.history.published)}, "
            f"issued {report.counts['  ISSUED']}, ledger {len(run.history.ledger)}, "
            f"events {report.counts['events in table']} "
            f"(feed saw {len(run.history.feed)}, poller errors {run.poller.errors}); "
            f"down {outage.seconds:.1f}s after {outage.stopped_after_issued} issued, {broker}"
            f"noticed by {', '.join(sorted(outage.noticed_by))}; "
            f"settled {settle_s:.1f}s after; "
            f"logged {', '.join(f'{k} {v}' for k, v in sorted(seen.items())) or 'nothing'}; "
            f"exit codes {exit_codes}; {time.monotonic() - started:.0f}s in all")
        print(report.summary())
        if report.violations and kind.startswith("rabbitmq"):
            # What the broker said of its recovery (an unclean shutdown, its queues' indices):
            # a confirmed message the broker no longer holds is the broker's to explain.
            print(f"the private RabbitMQ's log:\n{private_rabbitmq.log_tail(200)}")
        report.raise_for_violations()
        assert settled, "not settled, yet the checker found no violation"
        assert report.counts["  ISSUED"] == TOTAL
        assert not idle, f"alive but did nothing after the restart: {idle}"
        assert set(exit_codes.values()) == {0}, exit_codes
    finally:
        await run.close()
