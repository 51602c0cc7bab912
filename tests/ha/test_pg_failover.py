"""PostgreSQL failover: a primary lost under load, its standby promoted, every gapless process
following on its own — and what a failover to an *asynchronous* standby costs, shown and named.

Each test starts a private primary with a streaming standby (tests/ha/pg_pair.py; the shared
PostgreSQL is never touched) and gives every process the multi-host URL
``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/DB?target_session_attrs=read-write``. RabbitMQ
is the shared broker, isolated by a queue prefix of the test's own (nothing is done to it); the
integrator is ``gapless mock-integrator`` (20–50 ms a call).

* **synchronous standby** — a few hundred invoices, two workers, recovery and the API; the
  primary is killed (``pg_ctl stop -m immediate``) with the workers in full flow, and the
  standby promoted once every process has met the loss. Nothing of gapless is restarted: each
  invoice ends ISSUED exactly once, the chaos checker finds I1–I4, I6, I7 intact, the audit is
  clean with the integrator, the integrator's ledger holds each number once.
* **asynchronous standby** — the same, but the standby's WAL receiver is stopped first (see
  ``PrivatePostgresPair.cut_replication``), so the invoices issued next are sealed, sent and
  acknowledged on the primary alone: exactly what an asynchronous standby may lack when the
  primary dies, made deterministic. ``gapless doctor`` warns of it beforehand; after the
  promotion the counter is behind the integrator, new seals hand out numbers the integrator
  holds for the lost invoices, the integrator refuses them (409), and the worker's and
  recovery's alarms and ``gapless audit --integrator`` name every one of those numbers;
  ``gapless series bump`` then ends the collisions.
* **a commit waiting for the standby is never cancelled** — with the synchronous standby
  stopped, a seal's commit waits; its task is cancelled, and a worker is sent SIGTERM in the
  same state. PostgreSQL's log shows no "canceling wait for synchronous replication" from them
  (a raw psycopg connection cancelled the same way shows it, and its row stays on the primary
  alone), the cancelled callers wait until the standby is back, and then the seal is on both
  servers. ``statement_timeout`` does not reach that wait either (PostgreSQL disables it before
  the commit).

What each scenario saw goes to the terminal summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher
from gapless.ledger.database import RECONNECT_TIMEOUT_S, Database, make_engine
from gapless.ledger.invoices import Draft, intake
from gapless.ledger.queries import invoices as invoice_queries
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.chaos.checker import Expectations, History, check
from tests.chaos.scenario import Poller, read_dead_letters
from tests.conftest import ApiServers
from tests.ha import pg_pair
from tests.ha.pg_pair import PrivatePostgresPair
from tests.helpers import (
    GaplessProcess,
    await_until,
    ledger,
    run_gapless,
    text_after,
    wait_until,
)
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import make_sending, message
from tests.restart_support import DATABASE_TROUBLE, PROCESS_ENV, RECOVERY_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ha-postgres")]

#: The pair fixtures of tests/ha/pg_pair.py (a fresh pair per test), for this module's tests.
sync_pair = pg_pair.sync_pair
async_pair = pg_pair.async_pair

#: The server log line of a commit whose wait for the synchronous standby was cancelled.
CANCELLED_WAIT = "canceling wait for synchronous replication"
SETTLE_S = 90.0


# ------------------------------------------------------------------------------------ the scene


def logged(proc: GaplessProcess, event: str, *, since: int = 0) -> list[dict[str, Any]]:
    """The JSON records of ``proc`` with this ``event``, after byte ``since`` of its log."""
    chunk = text_after(proc.log_path, since)
    found = []
    for line in chunk.splitlines():
        if line.startswith("{") and f'"event": "{event}"' in line:
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


def events_since(proc: GaplessProcess, since: int) -> dict[str, int]:
    """How many times ``proc`` logged each event after byte ``since`` (what a failure shows)."""
    events: Counter[str] = Counter()
    for line in text_after(proc.log_path, since).splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events[str(json.loads(line).get("event"))] += 1
    return dict(events)


class Scene:
    """One database on a pair, the gapless processes on its multi-host URL, and the load."""

    def __init__(self, pair: PrivatePostgresPair, queue: str, mock: MockIntegratorClient,
                 log_dir: Path) -> None:
        self.pair = pair
        self.name = f"ha_{uuid.uuid4().hex[:10]}"
        self.url = pair.clone_template(self.name)
        self.settings = Settings(database_url=self.url, queue=queue)
        self.mock = mock
        self.log_dir = log_dir
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("GAPLESS_")}
        self.env.update({"GAPLESS_DATABASE_URL": self.url,
                         "GAPLESS_AMQP_URL": self.settings.amqp_url, "GAPLESS_QUEUE": queue,
                         "GAPLESS_CLUSTER_ID": "0", "GAPLESS_INTEGRATOR_URL": mock.url,
                         "GAPLESS_LOG_FORMAT": "json", **PROCESS_ENV})
        self.engine: AsyncEngine = make_engine(self.url, actor="test",
                                               application_name="gapless-ha-test", pool_size=2)
        self.publisher = Publisher(self.settings, confirm_timeout=10)
        self.history = History()
        self.workers: list[GaplessProcess] = []
        self.recovery: GaplessProcess | None = None
        self.api = ApiServers(self.env, log_dir)
        self.api_url: str | None = None
        self.api_token = secrets.token_urlsafe(24)

    @property
    def processes(self) -> list[GaplessProcess]:
        return [*self.workers, *([self.recovery] if self.recovery else [])]

    async def start(self, *, workers: int = 2, api: bool = False) -> None:
        async with ledger(self.engine).transaction() as tx:
            await add_series(tx, build_series_spec("acme", "ABC"))
        self.mock.set_faults(latency_ms=[20, 50])
        await self.publisher.start()  # the topology exists before any worker consumes
        self.workers = [GaplessProcess(["worker", "--concurrency", "8",
                                        "--shutdown-timeout", "10"], self.env, self.log_dir,
                                       f"worker-{n}") for n in range(workers)]
        self.recovery = GaplessProcess(["recovery", *RECOVERY_ARGS], self.env, self.log_dir,
                                       "recovery")
        if api:
            self.api_url, _ = await asyncio.to_thread(self.api.start,
                                                      f"acme:{self.api_token}")

        def ready() -> bool:
            for proc in self.processes:
                assert proc.alive(), proc.output()[-3000:]
            return all(logged(w, "worker_started") for w in self.workers) and \
                bool(self.recovery and logged(self.recovery, "recovery_round_started"))

        await asyncio.to_thread(wait_until, ready, 60, message="workers and recovery")

    async def publish(self, invoice_ids: list[str]) -> None:
        for invoice_id in invoice_ids:
            await self.publisher.publish(message(invoice_id))
            self.history.publish(invoice_id, "acme", "ABC", "issued")

    async def scalar(self, query: str, **params: Any) -> Any:
        async with self.engine.connect() as conn:
            return (await conn.execute(text(query), params)).scalar_one()

    async def count(self, status: str, ids: list[str]) -> int:
        return int(await self.scalar(
            "SELECT count(*) FROM invoices WHERE status = :s AND invoice_id = ANY(:ids)",
            s=status, ids=ids))

    async def settled(self, ids: list[str], status: str = "ISSUED") -> bool:
        """Every invoice of ``ids`` in ``status`` and nothing left in the queue."""
        try:
            if await self.count(status, ids) < len(ids):
                return False
            return (await queue_depths(self.settings))[self.settings.queue] == 0
        except Exception:  # the database is away (a failover under way): not yet
            return False

    def offsets(self) -> dict[str, int]:
        return {proc.name: proc.log_path.stat().st_size for proc in self.processes}

    def noticed(self, since: dict[str, int]) -> list[str]:
        return [proc.name for proc in self.processes
                if any(logged(proc, event, since=since[proc.name])
                       for event in DATABASE_TROUBLE)]

    def doctor(self) -> tuple[int, dict[str, dict[str, Any]]]:
        result = run_gapless(["doctor", "--json", "--timeout", "10"], self.env, timeout=60)
        checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
        return result.returncode, checks

    def audit(self) -> tuple[int, dict[str, Any]]:
        result = run_gapless(["audit", "--integrator", "--json"], self.env, timeout=120)
        assert result.returncode in (0, 1), result.stderr
        return result.returncode, json.loads(result.stdout)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.publisher.close()
        await self.engine.dispose()
        for proc in self.processes:
            proc.close()
        self.api.close()


@pytest.fixture
async def scene_of(queue_prefix: str, mock_integrator: MockIntegratorClient,
                   log_dir: Path) -> AsyncIterator[Callable[[PrivatePostgresPair], Scene]]:
    made: list[Scene] = []

    def make(pair: PrivatePostgresPair) -> Scene:
        made.append(Scene(pair, queue_prefix, mock_integrator, log_dir))
        return made[-1]

    yield make
    for scene in made:
        await scene.close()


def ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{n:04d}" for n in range(count)]


def terminate_all(processes: list[GaplessProcess]) -> dict[str, int]:
    return {proc.name: proc.terminate(timeout=40) for proc in processes}


def events_of(processes: list[GaplessProcess], names: tuple[str, ...]) -> Counter[str]:
    seen: Counter[str] = Counter()
    for proc in processes:
        for name in names:
            seen[name] += len(logged(proc, name))
    return +seen


# ------------------------------------------------------------- a synchronous standby: no loss

SYNC_BEFORE = 240
SYNC_AFTER = 60
SYNC_ISSUED_AT_CRASH = 60
#: No primary for at least this long (a failover manager takes seconds to promote): the workers
#: wait paused, without a requeue loop.
SYNC_MIN_OUTAGE_S = 3.0
#: Deliveries a worker may requeue for the database in one outage: what it had in flight
#: (--concurrency 8) and what arrived before its consumer was cancelled.
REQUEUES_PER_WORKER = 16


@pytest.mark.timeout(240)
async def test_a_synchronous_standby_promoted_under_load_loses_nothing(
        sync_pair: PrivatePostgresPair, scene_of: Callable[[PrivatePostgresPair], Scene],
        summary_line: Callable[[str], None]) -> None:
    started = time.monotonic()
    pair = sync_pair
    scene = scene_of(pair)
    code, checks = await asyncio.to_thread(scene.doctor)
    assert code == 0, checks
    assert checks["replication"]["status"] == "ok", checks["replication"]
    assert checks["replication"]["detail"].startswith("commits wait for standby 'standby'")

    await scene.start(api=True)
    poller = Poller(scene.url)
    stop_polling = asyncio.Event()
    polling = asyncio.create_task(poller.follow(stop_polling))
    everything = ids("sync", SYNC_BEFORE + SYNC_AFTER)
    # Published while the workers consume, the crash included (RabbitMQ is not touched).
    publishing = asyncio.create_task(scene.publish(everything[:SYNC_BEFORE]))
    try:

        async def under_way() -> bool:
            return await scene.count("ISSUED", everything) >= SYNC_ISSUED_AT_CRASH

        await await_until(under_way, 60, interval=0.05, message="the load under way")
        at_crash = await scene.count("ISSUED", everything)
        assert at_crash < SYNC_BEFORE, "the crash must hit a run under way"

        # -- the primary dies; the standby is promoted once every process has met the loss
        before = scene.offsets()
        crash_s = await asyncio.to_thread(pair.crash_primary)
        went_down = time.monotonic()
        must_notice = {proc.name for proc in scene.processes}

        def all_noticed() -> bool:
            return set(scene.noticed(before)) >= must_notice and \
                time.monotonic() - went_down >= SYNC_MIN_OUTAGE_S

        await asyncio.to_thread(wait_until, all_noticed, 30, interval=0.1,
                                message=f"{sorted(must_notice)} to meet the lost primary")
        requeued = {w.name: len(logged(w, "database_unavailable", since=before[w.name]))
                    for w in scene.workers}
        assert max(requeued.values()) <= REQUEUES_PER_WORKER, requeued
        # What a process logs from here on, it logs on the new primary: nothing is reachable
        # until the promotion (read before it, a process quick to reconnect cannot slip its
        # first record in between the promotion and the reading).
        after = scene.offsets()
        promote_s = await asyncio.to_thread(pair.promote)
        down_s = time.monotonic() - went_down
        await publishing
        await scene.publish(everything[SYNC_BEFORE:])

        # -- settle, nothing of gapless restarted
        promoted_at = time.monotonic()
        await await_until(lambda: scene.settled(everything), SETTLE_S, interval=0.25,
                          message=f"{len(everything)} invoices ISSUED after the promotion")
        settle_s = time.monotonic() - promoted_at

        dead = [f"{p.name} exited {p.proc.returncode}:\n{p.output()[-3000:]}"
                for p in scene.processes if not p.alive()]
        assert not dead, "a gapless process did not survive the failover:\n" + "\n".join(dead)

        # Alive is not enough: each is back at work on the new primary, by itself (a worker
        # that was paused may find the work done by the other: then its resumption counts).
        def at_work(proc: GaplessProcess) -> bool:
            events = (("recovery_round_finished",) if proc is scene.recovery
                      else ("invoice_issued", "database_available"))
            return any(logged(proc, event, since=after[proc.name]) for event in events)

        try:
            await asyncio.to_thread(
                wait_until, lambda: all(at_work(proc) for proc in scene.processes), 30,
                message="every process back at work after the promotion")
        except AssertionError as timed_out:
            # Only now every event each idle process logged is read (not at every poll).
            idle = [f"{proc.name} logged {events_since(proc, after[proc.name])}"
                    for proc in scene.processes if not at_work(proc)]
            raise AssertionError(f"{timed_out}; not at work: {idle}") from None
        back_s = time.monotonic() - promoted_at
        # The API reads from the new primary too, without a restart. Its first request after
        # the promotion may meet a pool still backing off from the outage: it answers 503
        # "retry later" (the contract's answer to an unreachable database), and a client that
        # retries as told is served from the new primary within the pool's reconnect bound.
        answers: list[int] = []
        async with httpx.AsyncClient(timeout=15, headers={
                "Authorization": f"Bearer {scene.api_token}"}) as http:

            async def served() -> bool:
                shown = await http.get(f"{scene.api_url}/v1/invoices/{everything[0]}")
                answers.append(shown.status_code)
                assert shown.status_code in (200, 503), shown.text
                return shown.status_code == 200 and shown.json()["status"] == "ISSUED"

            await await_until(served, 2 * RECONNECT_TIMEOUT_S, interval=0.5,
                              message="the API to read the invoice from the new primary")
        assert answers[-1] == 200

        stop_polling.set()
        await polling
        await poller.drain()
        scene.history.feed = list(poller.seen)
        scene.history.ledger = scene.mock.ledger()
        scene.history.dead_letters = await read_dead_letters(scene.settings)
        seen = events_of(scene.processes, (*DATABASE_TROUBLE, "consumer_paused",
                                           "database_available", "consumer_resumed",
                                           "orphan_repaired", "orphan_resent"))
        exit_codes = await asyncio.to_thread(terminate_all, scene.processes)

        report = await asyncio.to_thread(check, scene.url, scene.history,
                                          Expectations(all_issued=True, error_ok=False))
        print(report.summary())
        report.raise_for_violations()
        numbers = Counter(entry["number"] for entry in scene.history.ledger)
        assert len(numbers) == len(everything), "each invoice accepted once"
        assert max(numbers.values()) == 1, "the integrator has each number once"
        code, audited = await asyncio.to_thread(scene.audit)
        assert (code, audited["violations"]) == (0, []), audited["violations"]
        assert audited["integrator"]["documents"] == len(everything)
        assert set(exit_codes.values()) == {0}, exit_codes
        code, checks = await asyncio.to_thread(scene.doctor)
        # The promoted server has no standby of its own: a warning, exit 0.
        assert (code, checks["replication"]["status"]) == (0, "warn"), checks["replication"]
        assert checks["replication"]["detail"].startswith("no standby")
        summary_line(
            f"postgres failover, synchronous standby: published {len(everything)}, crash after "
            f"{at_crash} issued (pg_ctl stop -m immediate {crash_s:.2f}s), promoted after "
            f"{down_s:.1f}s (promote {promote_s:.2f}s), requeued for the database meanwhile "
            f"{requeued}; settled {settle_s:.1f}s after, every process back at work "
            f"{back_s:.1f}s after; issued "
            f"{report.counts['  ISSUED']}, ledger {len(scene.history.ledger)} (each number "
            f"once), feed saw {len(scene.history.feed)} (poller errors {poller.errors}); "
            f"logged {', '.join(f'{k} {v}' for k, v in sorted(seen.items()))}; audit clean; "
            f"exit codes {sorted(set(exit_codes.values()))}; pair started in "
            f"{pair.timings['migrated']:.1f}s; {time.monotonic() - started:.0f}s in all")
    finally:
        publishing.cancel()
        stop_polling.set()
        polling.cancel()
        for task in (publishing, polling):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await poller.close()


# ----------------------------------------------- an asynchronous standby: the loss, named

#: Issued and replicated before the cut; issued after it (lost with the primary); sealed after
#: the promotion by the workers and, as orphans, by recovery; issued after the counter is bumped.
ASYNC_KEPT = 100
ASYNC_LOST = 60
ASYNC_AFTER = 20
ASYNC_ORPHANS = 3
ASYNC_BUMPED = 5


def printed_no(number: str) -> int:
    return int(number[-9:])


@pytest.mark.timeout(240)
async def test_an_asynchronous_standby_promoted_loses_seals_and_every_lost_number_is_named(
        async_pair: PrivatePostgresPair, scene_of: Callable[[PrivatePostgresPair], Scene],
        summary_line: Callable[[str], None]) -> None:
    started = time.monotonic()
    pair = async_pair
    scene = scene_of(pair)
    code, checks = await asyncio.to_thread(scene.doctor)
    assert code == 0, checks  # a warning, not a failure
    warning = checks["replication"]
    assert warning["status"] == "warn", warning
    assert "a failover could hand out a sealed number twice" in warning["detail"]
    assert "'standby' asynchronous" in warning["detail"]

    await scene.start()
    kept, lost, after = ids("kept", ASYNC_KEPT), ids("lost", ASYNC_LOST), ids("after", ASYNC_AFTER)
    await scene.publish(kept)
    await await_until(lambda: scene.settled(kept), 60, interval=0.1, message="kept ISSUED")
    await asyncio.to_thread(pair.wait_caught_up)
    cut_at = await asyncio.to_thread(pair.cut_replication)
    # Sealed, sent, accepted, ISSUED and acknowledged — on the primary alone.
    await scene.publish(lost)
    await await_until(lambda: scene.settled(lost), 60, interval=0.1, message="lost ISSUED")
    ledger_before = {e["invoice_id"]: e["number"] for e in scene.mock.ledger()}
    lost_numbers = {ledger_before[i] for i in lost}
    assert len(lost_numbers) == ASYNC_LOST

    await asyncio.to_thread(pair.crash_primary)
    await asyncio.to_thread(pair.promote)
    # The promoted standby has what it had received at the cut: the kept invoices only.
    assert await scene.count("ISSUED", lost) == 0
    counter = int(await scene.scalar("SELECT last_no FROM number_counters"))
    assert counter == ASYNC_KEPT

    # New work seals numbers the integrator holds for the lost invoices: every send is refused
    # (409) and the worker raises its alarm.
    offsets = scene.offsets()
    await scene.publish(after)
    await await_until(lambda: scene.settled(after, "ERROR"), 60, interval=0.1,
                      message="the new invoices alarmed")
    # Sealed by a worker that died before sending (made here with the domain operations):
    # recovery asks the integrator about each number first, finds it another invoice's, and
    # raises its alarm.
    orphans = await make_sending(scene.engine, ids("orphan", ASYNC_ORPHANS))
    async with scene.engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET sending_since = now() - interval '1 hour' "
                                "WHERE invoice_id LIKE 'orphan-%'"))
    orphan_ids = [o.invoice_id for o in orphans]
    await await_until(lambda: scene.settled(orphan_ids, "ERROR"), 60, interval=0.1,
                      message="recovery's alarms")

    worker_alarms = [record for w in scene.workers
                     for record in logged(w, "number_held_by_another", since=offsets[w.name])]
    assert scene.recovery is not None
    recovery_alarms = logged(scene.recovery, "orphan_alarm", since=offsets["recovery"])
    alarmed = {r["number"]: r["holder_invoice_id"] for r in worker_alarms + recovery_alarms}
    assert len(worker_alarms) == ASYNC_AFTER
    assert len(recovery_alarms) == ASYNC_ORPHANS
    # Each alarm names the number and the lost invoice the integrator holds it for.
    assert alarmed == {number: invoice_id for invoice_id, number in ledger_before.items()
                       if number in alarmed}
    assert set(alarmed) <= lost_numbers
    assert {printed_no(n) for n in alarmed} == set(
        range(counter + 1, counter + ASYNC_AFTER + ASYNC_ORPHANS + 1))
    assert all("gapless audit --integrator" in r["hint"]
               for r in worker_alarms + recovery_alarms)

    # The audit names every lost number: held here by another invoice, or above the counter.
    code, audited = await asyncio.to_thread(scene.audit)
    assert code == 1
    by_kind: dict[str, set[str]] = {}
    for violation in audited["violations"]:
        by_kind.setdefault(violation["kind"], set()).add(violation["numbers"])
        assert violation["todo"], violation
    assert set(by_kind) == {"invoice_id_mismatch", "integrator_ahead_of_counter"}, by_kind
    assert by_kind["invoice_id_mismatch"] == set(alarmed)
    top = counter + ASYNC_AFTER + ASYNC_ORPHANS
    assert by_kind["integrator_ahead_of_counter"] == {
        n for n in lost_numbers if printed_no(n) > top}
    assert by_kind["invoice_id_mismatch"] | by_kind["integrator_ahead_of_counter"] == \
        lost_numbers

    # The damage bounded: the counter raised past the highest number the integrator holds,
    # new invoices are issued without a collision.
    highest = max(lost_numbers, key=printed_no)
    bumped = await asyncio.to_thread(run_gapless, ["series", "bump", "acme", "ABC", "--past",
                                                   highest], scene.env)
    assert bumped.returncode == 0, bumped.stderr
    fresh = ids("bumped", ASYNC_BUMPED)
    await scene.publish(fresh)
    await await_until(lambda: scene.settled(fresh), 60, interval=0.1,
                      message="invoices ISSUED after the bump")
    ledger = {e["invoice_id"]: e["number"] for e in scene.mock.ledger()}
    assert sorted(printed_no(ledger[i]) for i in fresh) == list(
        range(printed_no(highest) + 1, printed_no(highest) + ASYNC_BUMPED + 1))
    exit_codes = await asyncio.to_thread(terminate_all, scene.processes)
    assert set(exit_codes.values()) == {0}, exit_codes
    summary_line(
        f"postgres failover, asynchronous standby: doctor said WARN before; replication cut at "
        f"{cut_at} after {ASYNC_KEPT} issued; {ASYNC_LOST} more issued on the primary alone, "
        f"then it crashed and the standby was promoted with the counter at {counter}; "
        f"{len(worker_alarms)} worker alarms and {len(recovery_alarms)} recovery alarms named "
        f"numbers {min(alarmed)}..{max(alarmed)}; the audit named all {len(lost_numbers)} lost "
        f"numbers ({len(by_kind['invoice_id_mismatch'])} held here by another invoice, "
        f"{len(by_kind['integrator_ahead_of_counter'])} above the counter); after `series "
        f"bump --past {highest}` {ASYNC_BUMPED} issued from {printed_no(highest) + 1}; "
        f"{time.monotonic() - started:.0f}s in all")


# --------------------------------------------------- a commit waiting for the standby is kept


def cancelled_waits(pair: PrivatePostgresPair) -> list[int]:
    """Backend pids whose wait for the synchronous standby was cancelled (the primary's log)."""
    pids = []
    for line in pair.log_of(pair.primary).splitlines():
        if CANCELLED_WAIT in line:
            found = re.search(r"\[(\d+)\]", line)
            if found:
                pids.append(int(found.group(1)))
    return pids


def waiting_for_standby(pair: PrivatePostgresPair, application: str) -> list[int]:
    """Backends of ``application`` waiting for the synchronous standby (wait event SyncRep)."""
    with psycopg.connect(pair.primary_url(), autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                            "AND wait_event = 'SyncRep'", (application,)).fetchall()
    return [row[0] for row in rows]


def seal_on(url: str, invoice_id: str) -> tuple[str, str] | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT status, number FROM invoices WHERE invoice_id = %s",
                           (invoice_id,)).fetchone()
    return None if row is None else (row[0], row[1])


@pytest.fixture
def stopped_standby(sync_pair: PrivatePostgresPair) -> Iterator[PrivatePostgresPair]:
    """The synchronous pair; the test stops its standby, and it is running again after."""
    yield sync_pair
    if not sync_pair._standby.running():
        sync_pair.start_standby()


@pytest.mark.timeout(180)
async def test_a_commit_waiting_for_the_standby_is_never_cancelled(
        stopped_standby: PrivatePostgresPair, scene_of: Callable[[PrivatePostgresPair], Scene],
        summary_line: Callable[[str], None]) -> None:
    pair = stopped_standby
    scene = scene_of(pair)
    # A series for each seal: a seal waiting for the standby holds its counter row until the
    # standby answers, so seals of one series would queue behind it.
    async with ledger(scene.engine).transaction() as tx:
        for code in ("RAW", "ABC", "WRK"):
            await add_series(tx, build_series_spec("acme", code))
    primary_db = pair.primary_url(scene.name)
    # statement_timeout does not reach the wait either: PostgreSQL disables it before the
    # commit (set here for every session of the database, gapless's included).
    with psycopg.connect(primary_db, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = '300ms'").format(
            sql.Identifier(scene.name)))
    await asyncio.to_thread(pair.stop_standby)
    code, checks = await asyncio.to_thread(scene.doctor)
    assert (code, checks["replication"]["status"]) == (1, "fail"), checks["replication"]
    assert "every commit waits until one is" in checks["replication"]["detail"]

    # -- the contrast: a raw psycopg connection, its task cancelled while the seal waits
    raw = await psycopg.AsyncConnection.connect(scene.url, autocommit=True,
                                                application_name="raw-psycopg")
    raw_pid = raw.info.backend_pid
    params = {"invoice_id": "raw-1", "tenant": "acme", "series": "RAW", "priority": 4,
              "payload": json.dumps(message("raw-1", series="RAW")), "lease_s": 60,
              "lock_timeout_ms": 5000, "profile_version": None, "at": None}
    raw_seal = asyncio.create_task(raw.execute(invoice_queries.INTAKE, params))
    await asyncio.to_thread(wait_until, lambda: waiting_for_standby(pair, "raw-psycopg"), 30,
                            message="the raw seal to wait for the standby")
    raw_seal.cancel()
    with pytest.raises(asyncio.CancelledError):
        await raw_seal
    await raw.close()
    # PostgreSQL kept it, on the primary alone, and said so in its log.
    assert seal_on(primary_db, "raw-1") is not None
    assert raw_pid in cancelled_waits(pair)

    # -- gapless's seal, its task cancelled the same way
    db = await Database.open(scene.url, actor="worker", size=1,
                             application_name="gapless-ha-seal")
    try:
        seal = asyncio.create_task(intake(
            db, Draft("seal-1", "acme", "ABC", 4, message("seal-1")), lease_s=60,
            lock_timeout_ms=5000, profile_version=None))
        pids = await asyncio.to_thread(wait_until,
                                       lambda: waiting_for_standby(pair, "gapless-ha-seal"), 30,
                                       message="the seal to wait for the standby")
        seal.cancel()
        await asyncio.sleep(1.0)  # well past statement_timeout, and time for a cancel to land
        assert not seal.done(), "the cancelled caller waits for the commit"
        assert waiting_for_standby(pair, "gapless-ha-seal") == pids, "still waiting, uncancelled"
        assert seal_on(primary_db, "seal-1") is None, "not visible before the standby has it"

        # -- a worker sent SIGTERM while its seal waits: it waits too, then exits 0
        worker = GaplessProcess(["worker", "--concurrency", "2", "--shutdown-timeout", "1"],
                                scene.env, scene.log_dir, "worker-sigterm")
        scene.workers.append(worker)  # closed with the scene
        await scene.publisher.start()
        await asyncio.to_thread(wait_until, lambda: logged(worker, "worker_started"), 60,
                                message="the worker to start")
        await scene.publisher.publish(message("seal-2", series="WRK"))
        worker_pids = await asyncio.to_thread(
            wait_until, lambda: waiting_for_standby(pair, "gapless-worker"), 30,
            message="the worker's seal to wait for the standby")
        worker.proc.send_signal(15)
        await asyncio.sleep(3.0)  # three times its shutdown timeout
        assert worker.alive(), worker.output()[-3000:]
        assert waiting_for_standby(pair, "gapless-worker") == worker_pids

        restarted = time.monotonic()
        await asyncio.to_thread(pair.start_standby)
        with pytest.raises(asyncio.CancelledError):
            # The commit completes; then the cancellation takes effect.
            await asyncio.wait_for(seal, 30)
        code = await asyncio.to_thread(worker.proc.wait, 30)
        waited_s = time.monotonic() - restarted
        assert code == 0, worker.output()[-3000:]
        assert logged(worker, "message_abandoned"), "the delivery was left for redelivery"
    finally:
        await db.close()

    await asyncio.to_thread(pair.wait_caught_up)
    standby_db = pair.standby_url(scene.name)
    for invoice_id in ("seal-1", "seal-2"):
        on_primary = seal_on(primary_db, invoice_id)
        assert on_primary is not None
        assert on_primary[0] == "SENDING"
        assert on_primary == seal_on(standby_db, invoice_id), "the standby has the seal too"
    assert set(cancelled_waits(pair)) == {raw_pid}, "only the raw connection cancelled a commit"
    summary_line(
        f"postgres commit never cancelled: with the synchronous standby stopped, a raw psycopg "
        f"seal cancelled was kept on the primary alone ('{CANCELLED_WAIT}' in the log); "
        f"gapless's cancelled seal and a worker's seal under SIGTERM (--shutdown-timeout 1) "
        f"kept waiting (statement_timeout 300ms did not end the wait) and completed "
        f"{waited_s:.1f}s after the standby came back, on both servers; the worker exited 0")
