"""``gapless worker`` processes against real RabbitMQ, PostgreSQL and the mock integrator.

Workers run as subprocesses; they are killed with SIGKILL at fault points (test-only
``GAPLESS_FAULT_KILL_AT``), stopped with SIGTERM, and restarted. The database, the mock's ledger
and the workers' own metrics are the oracles.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.harness import issued_before_on
from gapless.settings import Settings
from tests.conftest import create_database, database_url, drop_database
from tests.faults import fault_env
from tests.helpers import (
    GaplessProcess,
    await_sql,
    await_until,
    free_port,
    run_gapless,
    wait_until,
)
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes, log_events
from tests.worker_support import publish_many, rows, sale

#: True once the invoice a killed worker held has a lease older than the test's 2 s lease.
VICTIM_LEASE_STALE = ("SELECT sending_since < now() - interval '2 seconds' FROM invoices "
                      "WHERE invoice_id = 'victim'")


async def count_in(engine: AsyncEngine, status: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(
            "SELECT count(*) FROM invoices WHERE status = :s"), {"s": status})).scalar_one())


async def counter(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(
            "SELECT coalesce(max(last_no), 0) FROM number_counters"))).scalar_one())


def assert_issued_exactly(current: dict[str, Any], ids: set[str],
                          mock: MockIntegratorClient) -> None:
    """Every invoice ISSUED, numbers 1..N, and the integrator's ledger equals the database."""
    assert set(current) == ids
    assert {row.status for row in current.values()} == {"ISSUED"}
    assert sorted(row.reserved_no for row in current.values()) == list(range(1, len(ids) + 1))
    ledger = mock.ledger()
    assert len(ledger) == len(ids)  # nothing accepted twice
    assert {(e["number"], e["invoice_id"], e["ref"]) for e in ledger} == {
        (row.number, row.invoice_id, row.integrator_ref) for row in current.values()}


def scrape(port: int) -> dict[str, float]:
    samples: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("series")
async def test_1000_invoices_through_3_workers_with_latency_and_transient_failures(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[50, 200], transient_rate=0.1)
    # Enough attempts that a 10 % transient rate practically never exhausts them (10^-10 per
    # invoice), and a breaker that does not trip on a chance run of failures: this test is about
    # numbering under parallel load; the outage tests cover the breaker.
    knobs = {"GAPLESS_RETRY_ATTEMPTS": "10", "GAPLESS_RETRY_WAIT_S": "0.05",
             "GAPLESS_BREAKER_FAIL_MAX": "100"}
    ports = [free_port() for _ in range(3)]
    procs = [procs.worker(f"worker-{i}", "--concurrency", "8", "--metrics-port", str(port),
                           env=knobs) for i, port in enumerate(ports)]
    messages = [sale(f"bulk-{i:04d}") for i in range(1000)]
    await publish_many(settings, messages)

    async def all_issued() -> bool:
        return await count_in(engine, "ISSUED") == 1000

    await await_until(all_issued, 240, interval=0.5, message="1000 invoices ISSUED")
    current = await rows(engine)
    assert_issued_exactly(current, {m["invoice_id"] for m in messages}, mock_integrator)
    assert mock_integrator.stats()["transient"] > 0  # the failures did happen
    issued_by_worker = [scrape(port)['gapless_worker_messages_total{outcome="issued"}']
                        for port in ports]
    assert sum(issued_by_worker) == 1000
    assert all(count > 0 for count in issued_by_worker), issued_by_worker
    for proc in procs:
        assert proc.terminate(timeout=30) == 0


@pytest.mark.parametrize("step", ["before_reserve_commit", "after_reserve_commit", "during_call",
                                  "after_call", "after_outcome_commit"])
@pytest.mark.usefixtures("series")
async def test_kill_9_at_each_step_loses_no_number_and_the_redelivery_finishes_the_invoice(
        step: str, engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    # A short lease so the redelivered message may take the dead worker's lease over; with the
    # default lease it would be left to recovery (tested with recovery).
    lease = {"GAPLESS_LEASE_S": "2"}
    mock_integrator.set_faults(latency_ms=[300, 300])
    doomed = procs.worker("doomed", env={**lease, **fault_env(kill_at=step)})
    await publish_many(settings, [sale("victim")])
    wait_until(lambda: not doomed.alive(), 30, message="the worker to kill itself")
    assert doomed.proc.returncode == -9
    assert log_events(doomed, "fault_kill")[0]["step"] == step
    after_kill = await rows(engine)
    if step == "before_reserve_commit":
        # The intake (draft and claim, one transaction) never committed: no row, no number.
        assert "victim" not in after_kill
        assert await counter(engine) == 0
    else:
        assert after_kill["victim"].reserved_no == 1
        assert await counter(engine) == 1

    if "victim" in after_kill and after_kill["victim"].status == "SENDING":
        await await_sql(engine, VICTIM_LEASE_STALE, 10,
                        message="the dead worker's lease to go stale")
    mock_integrator.set_faults(latency_ms=[0, 0])
    survivor = procs.worker("survivor", env=lease)
    await publish_many(settings, [sale("next")])

    async def both_issued() -> bool:
        current = await rows(engine)
        return {row.status for row in current.values()} == {"ISSUED"} and len(current) == 2

    await await_until(both_issued, 30, message="both invoices ISSUED")
    current = await rows(engine)
    numbers = (current["victim"].reserved_no, current["next"].reserved_no)
    if step == "before_reserve_commit":
        # No number was taken before the kill: the redelivery and "next" race for 1 and 2.
        assert sorted(numbers) == [1, 2]
    else:
        assert numbers == (1, 2)
    assert await counter(engine) == 2
    assert_issued_exactly(current, {"victim", "next"}, mock_integrator)
    assert survivor.terminate(timeout=30) == 0


@pytest.mark.usefixtures("series")
async def test_external_kill_9_right_after_the_reservation_commits(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    lease = {"GAPLESS_LEASE_S": "2"}
    # The pause makes the moment between the reservation's commit and the call reachable.
    doomed = procs.worker("doomed", env={**lease,
                                          **fault_env(pause_at="after_reserve_commit:60")})
    await publish_many(settings, [sale("victim")])
    wait_until(lambda: log_events(doomed, "fault_pause"), 30, message="the pause after the commit")
    doomed.kill9()
    after_kill = (await rows(engine))["victim"]
    assert (after_kill.status, after_kill.reserved_no, after_kill.attempts) == ("SENDING", 1, 1)
    assert mock_integrator.stats()["posts"] == 0  # the call never happened

    await await_sql(engine, VICTIM_LEASE_STALE, 10,
                    message="the dead worker's lease to go stale")
    survivor = procs.worker("survivor", env=lease)

    async def issued() -> bool:
        return (await rows(engine))["victim"].status == "ISSUED"

    await await_until(issued, 30, message="victim ISSUED")
    current = await rows(engine)
    assert (current["victim"].reserved_no, current["victim"].attempts) == (1, 2)
    assert await counter(engine) == 1
    assert_issued_exactly(current, {"victim"}, mock_integrator)
    assert log_events(survivor, "lease_taken_over")
    assert survivor.terminate(timeout=30) == 0


@pytest.mark.usefixtures("series")
async def test_sigterm_during_load_drains_exits_0_and_a_restart_finishes_everything(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[100, 300])
    worker = procs.worker("first", "--concurrency", "8", "--shutdown-timeout", "10")
    messages = [sale(f"load-{i:03d}") for i in range(160)]
    await publish_many(settings, messages)

    async def some_issued() -> bool:
        return await count_in(engine, "ISSUED") >= 30

    await await_until(some_issued, 60, message="30 invoices ISSUED")
    started = time.monotonic()
    assert worker.terminate(timeout=20) == 0
    assert time.monotonic() - started < 10 + 5
    stopped = log_events(worker, "worker_stopped")
    assert stopped
    assert stopped[0]["abandoned"] == 0
    assert await count_in(engine, "SENDING") == 0  # in-flight work was finished, not dropped
    issued_at_stop = await count_in(engine, "ISSUED")
    assert issued_at_stop < 160  # it really was stopped under load

    restarted = procs.worker("restarted", "--concurrency", "8")

    async def all_issued() -> bool:
        return await count_in(engine, "ISSUED") == 160

    await await_until(all_issued, 120, interval=0.5, message="160 invoices ISSUED")
    assert_issued_exactly(await rows(engine), {m["invoice_id"] for m in messages},
                          mock_integrator)
    assert restarted.terminate(timeout=30) == 0


@pytest.mark.usefixtures("series")
async def test_shutdown_timeout_shorter_than_the_call_leaves_messages_for_redelivery(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    lease = {"GAPLESS_LEASE_S": "2"}
    mock_integrator.set_faults(latency_ms=[3000, 3000])
    worker = procs.worker("slow", "--concurrency", "4", "--shutdown-timeout", "0.5", env=lease)
    messages = [sale(f"slow-{i}") for i in range(6)]
    await publish_many(settings, messages)

    async def four_sending() -> bool:
        return await count_in(engine, "SENDING") == 4

    await await_until(four_sending, 30, message="4 invoices in flight")
    started = time.monotonic()
    assert worker.terminate(timeout=20) == 0
    assert time.monotonic() - started < 0.5 + 2.5  # the deadline, not the 3 s calls
    assert log_events(worker, "worker_stopped")[0]["abandoned"] == 4
    assert await counter(engine) == 4  # the two queued behind took no number

    await await_sql(engine, "SELECT bool_and(sending_since < now() - interval '2 seconds') "
                    "FROM invoices WHERE status = 'SENDING'", 10,
                    message="the abandoned leases to go stale")
    mock_integrator.set_faults(latency_ms=[0, 0])
    restarted = procs.worker("restarted", env=lease)

    async def all_issued() -> bool:
        return await count_in(engine, "ISSUED") == 6

    await await_until(all_issued, 60, message="6 invoices ISSUED")
    assert_issued_exactly(await rows(engine), {m["invoice_id"] for m in messages},
                          mock_integrator)
    assert restarted.terminate(timeout=30) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("series")
async def test_a_user_message_overtakes_a_2000_message_batch_backlog(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[20, 20])
    backlog = [sale(f"batch-{i:04d}", priority="batch") for i in range(2000)]
    await publish_many(settings, backlog)
    await publish_many(settings, [sale("urgent", priority="user")])  # after the whole backlog
    worker = procs.worker("worker", "--concurrency", "8")

    async def urgent_issued() -> bool:
        current = await rows(engine)
        return "urgent" in current and current["urgent"].status == "ISSUED"

    await await_until(urgent_issued, 60, message="the user invoice ISSUED")
    assert worker.terminate(timeout=30) == 0
    before_urgent = await issued_before_on(engine, "urgent")
    async with engine.connect() as conn:
        priority = (await conn.execute(text(
            "SELECT priority FROM invoices WHERE invoice_id = 'urgent'"))).scalar_one()
    assert before_urgent <= 200, before_urgent  # issued before at least 90 % of the backlog
    assert priority == 4


def test_worker_refuses_a_foreign_cluster_an_unmigrated_database_and_no_broker(
        gapless_env: dict[str, str], db_url: str, template_db: str) -> None:
    foreign = run_gapless(["worker"], {**gapless_env, "GAPLESS_CLUSTER_ID": "7"}, timeout=60)
    assert foreign.returncode == 1
    assert "cluster" in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1

    empty = f"{template_db}_empty_worker"
    create_database(empty)
    try:
        unmigrated = run_gapless(["worker"], {**gapless_env,
                                              "GAPLESS_DATABASE_URL": database_url(empty)},
                                 timeout=60)
    finally:
        drop_database(empty)
    assert unmigrated.returncode == 1
    assert "gapless migrate" in unmigrated.stderr
    assert len(unmigrated.stderr.strip().splitlines()) == 1

    nobroker = run_gapless(["worker"], {
        **gapless_env, "GAPLESS_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{free_port()}/"},
        timeout=60)
    assert nobroker.returncode == 1
    # aiormq logs its own line first; ours is the last, one line, no traceback.
    assert nobroker.stderr.strip().splitlines()[-1].startswith("gapless: cannot connect to "
                                                               "RabbitMQ")
    assert "Traceback" not in nobroker.stderr


def test_a_malformed_fault_variable_is_refused(gapless_env: dict[str, str]) -> None:
    result = run_gapless(["worker"], {**gapless_env, **fault_env(kill_at="nowhere")},
                         timeout=60)
    assert result.returncode == 1
    assert "GAPLESS_FAULT_KILL_AT" in result.stderr


def test_sigterm_while_the_database_is_unreachable_at_start_up_is_a_clean_stop(
        gapless_env: dict[str, str], log_dir: Path) -> None:
    """A worker that cannot reach its database yet keeps trying (a restart or a terminated backend
    must not end it), and a SIGTERM meanwhile is a graceful stop: exit 0."""
    env = {**gapless_env, "GAPLESS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/gapless"}
    proc = GaplessProcess(["worker"], env, log_dir, "worker-no-db")
    try:
        wait_until(lambda: "database_unavailable_at_start" in proc.output(), 30,
                   message="the worker to retry the unreachable database")
        assert proc.alive()
        assert proc.terminate(timeout=20) == 0
    finally:
        proc.close()
