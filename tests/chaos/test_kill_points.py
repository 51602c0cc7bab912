"""``kill -9`` at each step of the issuing flow, made reachable deterministically with the
worker's test-only fault hooks (``tests.faults``, ``GAPLESS_FAULT_KILL_AT=<step>:2``).

One ``gapless worker --concurrency 1`` per step takes five queued invoices in order: the first
goes through, the second kills the process at the step. The state at that moment is checked
(what the step promises: rolled back, pinned, accepted by the integrator, committed), then a
clean worker and ``gapless recovery`` finish the job, and the chaos checker proves every invoice
ends ISSUED with no gap and no duplicate, the integrator agrees, and a poller that followed the
feed throughout saw every event once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.chaos.checker import Expectations, History, check
from tests.chaos.scenario import Poller, invoice_message, read_dead_letters
from tests.faults import fault_env
from tests.helpers import GaplessProcess, await_sql, await_until, ledger, run_gapless
from tests.mock_client import MockIntegratorClient

INVOICES = [f"kp-{n}" for n in range(1, 6)]
KILLED = INVOICES[1]  # the second message reaching the step
LEASE_S = 2.0


async def row(engine: AsyncEngine, invoice_id: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(
            "SELECT status, reserved_no, number FROM invoices WHERE invoice_id = :i"),
            {"i": invoice_id})).first()


async def last_no(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(text(
            "SELECT coalesce(max(last_no), 0) FROM number_counters"))).scalar_one()
    return int(value)


def ledger_numbers(mock: MockIntegratorClient) -> dict[str, str]:
    return {entry["invoice_id"]: entry["number"] for entry in mock.ledger()}


async def at_before_reserve_commit(engine: AsyncEngine, mock: MockIntegratorClient) -> None:
    # The intake (draft and claim, one transaction) died uncommitted: no row, nothing consumed,
    # nothing sent.
    assert await row(engine, KILLED) is None
    assert await last_no(engine) == 1
    assert set(ledger_numbers(mock)) == {INVOICES[0]}


async def at_after_reserve_commit(engine: AsyncEngine, mock: MockIntegratorClient) -> None:
    # Number pinned and committed, the integrator never called: an orphan for recovery.
    killed = await row(engine, KILLED)
    assert (killed.status, killed.reserved_no) == ("SENDING", 2)
    assert set(ledger_numbers(mock)) == {INVOICES[0]}


async def at_during_call(engine: AsyncEngine, mock: MockIntegratorClient) -> None:
    # The call was in flight: whether the integrator took it is unknown to the database.
    killed = await row(engine, KILLED)
    assert (killed.status, killed.reserved_no) == ("SENDING", 2)


async def at_after_call(engine: AsyncEngine, mock: MockIntegratorClient) -> None:
    # The dual-write case: the integrator accepted the number, the database never heard of it.
    killed = await row(engine, KILLED)
    assert (killed.status, killed.reserved_no) == ("SENDING", 2)
    assert ledger_numbers(mock)[KILLED] == killed.number


async def at_after_outcome_commit(engine: AsyncEngine, mock: MockIntegratorClient) -> None:
    # Outcome committed, message never acked: it comes back and must change nothing.
    killed = await row(engine, KILLED)
    assert (killed.status, killed.reserved_no) == ("ISSUED", 2)
    assert ledger_numbers(mock)[KILLED] == killed.number


def kill_steps(log: str) -> list[str]:
    """The steps of the ``fault_kill`` lines of a worker's JSON log."""
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [event["step"] for event in events if event.get("event") == "fault_kill"]


STEPS: dict[str, Callable[[AsyncEngine, MockIntegratorClient], Awaitable[None]]] = {
    "before_reserve_commit": at_before_reserve_commit,
    "after_reserve_commit": at_after_reserve_commit,
    "during_call": at_during_call,
    "after_call": at_after_call,
    "after_outcome_commit": at_after_outcome_commit,
}


@pytest.mark.chaos
@pytest.mark.usefixtures("quiet_logs")
@pytest.mark.parametrize("step", list(STEPS))
async def test_kill_at_each_step_then_restart_ends_all_issued_without_gap_or_duplicate(
        step: str, settings: Settings, engine: AsyncEngine, chaos_env: dict[str, str],
        chaos_mock: MockIntegratorClient, log_dir: Path) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    # A call slow enough that "during_call" lands while it is in flight (kill after 50 ms).
    chaos_mock.set_faults(latency_ms=[150, 150])
    env = {**chaos_env, "GAPLESS_LEASE_S": str(LEASE_S), "GAPLESS_LOG_LEVEL": "info"}
    history = History()
    poller = Poller(settings.database_url)
    stop_poller = asyncio.Event()
    follow = asyncio.create_task(poller.follow(stop_poller))
    processes: list[GaplessProcess] = []
    try:
        async with Publisher(settings) as publisher:
            for invoice_id in INVOICES:
                message: dict[str, Any] = invoice_message(
                    invoice_id, "acme", "ABC", "user", "1234567890", random.Random(invoice_id))
                await publisher.publish(json.dumps(message).encode(), priority=4,
                                        message_id=invoice_id)
                history.publish(invoice_id, "acme", "ABC", "issued")

        faulty = GaplessProcess(["worker", "--concurrency", "1"],
                                {**env, **fault_env(kill_at=f"{step}:2")}, log_dir,
                                f"worker-kill-{step}")
        processes.append(faulty)

        async def died() -> bool:
            return not faulty.alive()

        await await_until(died, 60, interval=0.1, message=f"the worker to die at {step}")
        assert faulty.proc.returncode == -9, faulty.output()[-3000:]
        assert kill_steps(faulty.output()) == [step]
        await STEPS[step](engine, chaos_mock)

        chaos_mock.set_faults(latency_ms=[0, 0])
        processes.append(GaplessProcess(["worker", "--concurrency", "2"], env, log_dir,
                                        "worker-clean"))
        processes.append(GaplessProcess(
            ["recovery", "--interval", "0.5", "--stuck-after", str(LEASE_S),
             "--backoff-base", "0.5", "--backoff-max", "2"], env, log_dir, "recovery"))

        await await_sql(engine, "SELECT count(*) = :n FROM invoices WHERE status = 'ISSUED'", 60,
                        interval=0.2, message="every invoice ISSUED", n=len(INVOICES))
        for proc in processes[1:]:
            assert proc.terminate(timeout=40) == 0, proc.output()[-3000:]
    finally:
        stop_poller.set()
        with contextlib.suppress(Exception):
            await follow
        for proc in processes:
            proc.close()

    await poller.drain()
    history.feed = list(poller.seen)
    await poller.close()
    history.ledger = chaos_mock.ledger()
    history.dead_letters = await read_dead_letters(settings)
    history.faults[f"kill_at_{step}"] += 1
    report = check(settings.database_url, history, Expectations(all_issued=True, error_ok=False))
    print(f"\nkill at {step}\n{report.summary()}")
    report.raise_for_violations()
    assert len(history.ledger) == len(INVOICES)
    chain = run_gapless(["chain", "verify"], chaos_env)  # I8: the chain survived the kill
    assert chain.returncode == 0, chain.stdout[-4000:] + chain.stderr[-2000:]
