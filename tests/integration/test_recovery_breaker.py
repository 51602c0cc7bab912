"""The recovery loop in front of a failing integrator (in-process loop, real guard, real mock).

While the breaker refuses calls a round claims nothing; orphans claimed when it opens mid-round
are put back exactly as they were (no attempt burned); when the integrator is back a single
probe goes first, then everything is settled with its own number.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from gapless.integrator.base import TransientIntegratorError, load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.issuing.outcome import Backoff
from gapless.ledger.database import make_engine
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.helpers import await_until, ledger
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    define_series,
    events,
    invoice_rows,
    make_orphans,
    make_sending,
    post,
)

RESET_S = 1.0


@pytest.fixture
def recovery_engine(engines: Callable[..., AsyncEngine]) -> AsyncEngine:
    return engines("recovery")


@pytest.fixture
async def guard(settings: Settings,
                mock_integrator: MockIntegratorClient) -> AsyncIterator[GuardedIntegrator]:
    guarded = settings.with_overrides(integrator_url=mock_integrator.url, breaker_fail_max=2,
                                      breaker_reset_timeout_s=RESET_S, retry_attempts=1)
    integrator = GuardedIntegrator(load_integrator(guarded), guarded, name="test-recovery")
    yield integrator
    await integrator.aclose()


def options(**overrides: object) -> RecoveryOptions:
    base: dict[str, object] = {"interval_s": 0.1, "stuck_after_s": 0, "batch": 50,
                               "concurrency": 1, "backoff": Backoff(0.01, 0.05),
                               "breaker_reset_s": RESET_S}
    return RecoveryOptions(**{**base, **overrides})  # type: ignore[arg-type]


async def orphans_behind_an_open_breaker(engine: AsyncEngine, guard: GuardedIntegrator,
                                         mock: MockIntegratorClient, count: int) -> None:
    """``count`` invoices stuck in SENDING, and the breaker opened by a down integrator."""
    await define_series(engine)
    await make_sending(engine, [f"inv-{i}" for i in range(count)])
    mock.set_faults(down=True)
    for _ in range(2):
        with pytest.raises(TransientIntegratorError):
            await guard.lookup("acme", "nothing")


async def event_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM invoice_events"))).scalar_one())


async def test_open_breaker_skips_the_round_without_claiming(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await orphans_behind_an_open_breaker(engine, guard, mock_integrator, 5)
    assert (guard.state, guard.accepting()) == ("open", False)
    before, events_before = await invoice_rows(engine), await event_count(engine)

    summary = await RecoveryLoop(ledger(recovery_engine), guard, options()).run_round()

    assert (summary.skipped, summary.claimed) == ("breaker_open", 0)
    assert "integrator work skipped (breaker_open)" in summary.line()
    assert await invoice_rows(engine) == before  # not even a lease was taken
    assert await event_count(engine) == events_before
    assert mock_integrator.stats()["down"] == 2  # only the calls that opened it


async def test_breaker_opening_mid_round_puts_unstarted_orphans_back_then_all_settle(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    orphans = await make_sending(engine, [f"inv-{i}" for i in range(6)])
    for sending in orphans[:3]:
        post(mock_integrator, sending)  # accepted, answer lost
    before = await invoice_rows(engine)
    mock_integrator.set_faults(down=True)
    loop = RecoveryLoop(ledger(recovery_engine), guard, options())

    summary = await loop.run_round()

    # Two lookups fail (fail_max 2) and open the breaker; the other four are never started.
    assert summary.claimed == 6
    assert (summary.outcomes["error"], summary.outcomes["released"]) == (2, 4)
    assert summary.skipped == "breaker_open"
    assert mock_integrator.stats()["down"] == 2
    rows = await invoice_rows(engine)
    failed = [i for i, row in rows.items() if row.status == Status.ERROR]
    assert len(failed) == 2
    for invoice_id, row in rows.items():
        if invoice_id in failed:
            assert row.attempts == before[invoice_id].attempts + 1
            # Not due before the breaker may half-open.
            assert row.next_attempt_at is not None
        else:  # put back exactly as it was: same lease, same attempt count
            assert (row.status, row.attempts, row.sending_since) == (
                Status.SENDING, before[invoice_id].attempts, before[invoice_id].sending_since)
        # History: recovery's claim is the one 'resent' (its attempt counted); the put-back is
        # written as 'released', giving that attempt back, never as a second 'resent'.
        history = [(event.kind, event.attempts) for event in await events(engine, invoice_id)]
        claimed = before[invoice_id].attempts + 1
        assert history[-2:] == ([("resent", claimed), ("error", claimed)] if invoice_id in failed
                                else [("resent", claimed), ("released", claimed - 1)]), history

    # The next round, breaker still open: nothing claimed, nothing called.
    assert (await loop.run_round()).claimed == 0
    assert mock_integrator.stats()["down"] == 2

    mock_integrator.set_faults(down=False)
    task = asyncio.create_task(loop.run())
    try:
        async def settled() -> bool:
            return all(r.status == Status.ISSUED for r in (await invoice_rows(engine)).values())
        await await_until(settled, 30, message="every orphan ISSUED")
    finally:
        loop.request_stop()
        await asyncio.wait_for(task, 10)
    assert guard.state == "closed"
    rows = await invoice_rows(engine)
    assert {r.number for r in rows.values()} == {s.number for s in orphans}
    stats = mock_integrator.stats()
    assert stats["max_posts_per_number"] == 1
    assert stats["ledger_size"] == 6


async def test_half_open_breaker_is_probed_with_one_orphan_first(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await orphans_behind_an_open_breaker(engine, guard, mock_integrator, 4)
    async def ready() -> bool:
        return guard.accepting()
    await await_until(ready, 10, message="the breaker ready for a trial")
    loop = RecoveryLoop(ledger(recovery_engine), guard, options(concurrency=4))

    # Still down: the probe fails and re-opens the breaker; the other three are not claimed.
    summary = await loop.run_round()
    assert (summary.claimed, summary.skipped, guard.state) == (1, "breaker_open", "open")
    assert mock_integrator.stats()["down"] == 3
    statuses = [r.status for r in (await invoice_rows(engine)).values()]
    assert sorted(statuses) == [Status.ERROR, Status.SENDING, Status.SENDING, Status.SENDING]

    mock_integrator.set_faults(down=False)
    await await_until(ready, 10, message="the breaker ready for a trial")
    summary = await loop.run_round()
    assert guard.state == "closed"
    assert summary.skipped is None
    # The probe, then the rest in the same round (the failed one is due again by now).
    assert (summary.claimed, summary.outcomes["resent"]) == (4, 4)
    assert {r.status for r in (await invoice_rows(engine)).values()} == {Status.ISSUED}


async def test_a_round_that_cannot_reach_the_database_is_logged_and_retried(
        db_url: str, guard: GuardedIntegrator) -> None:
    from prometheus_client import REGISTRY

    from gapless.ledger.conninfo import with_database

    def failed_rounds() -> float:
        return REGISTRY.get_sample_value("gapless_recovery_rounds_total",
                                         {"result": "failed"}) or 0.0

    missing = with_database(db_url, "gapless_no_such_database")
    engine = make_engine(missing, actor="recovery", pool_size=1)
    loop = RecoveryLoop(ledger(engine), guard, options(interval_s=0.05))
    before = failed_rounds()
    task = asyncio.create_task(loop.run())
    try:
        async def failed_twice() -> bool:
            return failed_rounds() >= before + 2
        await await_until(failed_twice, 30, message="two failed rounds")
        assert not task.done()  # the daemon keeps going
    finally:
        loop.request_stop()
        await asyncio.wait_for(task, 10)
        await engine.dispose()


async def test_a_round_claims_again_while_claims_come_back_full(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await make_orphans(engine, [f"inv-{i:02d}" for i in range(23)])
    loop = RecoveryLoop(ledger(recovery_engine), guard, options(batch=5, concurrency=3,
                                                        claims_per_round=3))

    first = await loop.run_round()
    assert (first.claimed, first.batch_full) == (15, True)  # three full claims
    second = await loop.run_round()
    assert (second.claimed, second.batch_full) == (8, False)  # 5, then 3: the round ends
    assert second.outcomes["resent"] == 8
    assert mock_integrator.stats()["max_posts_per_number"] == 1


async def test_a_refill_never_claims_the_rounds_own_orphans_in_flight(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await make_orphans(engine, [f"inv-{i:02d}" for i in range(12)])
    mock_integrator.set_faults(latency_ms=[300, 300])
    # stuck_after 0: by age alone, a lease taken a moment ago would already be an orphan.
    loop = RecoveryLoop(ledger(recovery_engine), guard, options(batch=4, concurrency=4,
                                                        claims_per_round=5))

    summary = await loop.run_round()

    assert (summary.claimed, summary.outcomes["resent"]) == (12, 12)
    stats = mock_integrator.stats()
    assert (stats["lookups"], stats["posts"], stats["max_posts_per_number"]) == (12, 12, 1)
