"""Two recovery loops over one database: SKIP LOCKED claims and leases mean no orphan is handled
twice — each is looked up once, and sent at most once."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from gapless.integrator.base import load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.ledger.database import make_engine
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.helpers import await_until, ledger
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import define_series, invoice_rows, last_no, make_orphans, post

ORPHANS = 240


async def test_two_loops_never_handle_the_same_orphan(
        engine: AsyncEngine, db_url: str, settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    orphans = await make_orphans(engine, [f"inv-{i:04d}" for i in range(ORPHANS)])
    for sending in orphans[::2]:
        post(mock_integrator, sending)  # half of them arrived, the answer was lost
    mock_integrator.set_faults(latency_ms=[2, 15])
    env = settings.with_overrides(integrator_url=mock_integrator.url)
    options = RecoveryOptions(interval_s=0.05, stuck_after_s=60, batch=15, concurrency=6)

    loops, tasks, closers = [], [], []
    for n in range(2):
        rec_engine = make_engine(db_url, actor="recovery", pool_size=4)
        guard = GuardedIntegrator(load_integrator(env), env, name=f"test-recovery-{n}")
        loop = RecoveryLoop(ledger(rec_engine), guard, options)
        loops.append(loop)
        closers.append((rec_engine, guard))
        tasks.append(asyncio.create_task(loop.run()))
    try:
        async def settled() -> bool:
            rows = (await invoice_rows(engine)).values()
            return all(r.status == Status.ISSUED for r in rows)
        await await_until(settled, 120, interval=0.2, message="every orphan ISSUED")
    finally:
        for loop in loops:
            loop.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for rec_engine, guard in closers:
            await guard.aclose()
            await rec_engine.dispose()

    stats = mock_integrator.stats()
    assert stats["lookups"] == ORPHANS  # each orphan asked about exactly once
    assert stats["max_posts_per_number"] == 1  # never sent twice
    assert stats["posts"] == ORPHANS  # the half we posted, plus one resend each for the rest
    assert stats["ledger_size"] == ORPHANS
    assert await last_no(engine) == ORPHANS  # no number reserved by recovery
    rows = await invoice_rows(engine)
    assert sorted(r.number for r in rows.values()) == sorted(s.number for s in orphans)
    async with engine.connect() as conn:
        claims = (await conn.execute(text(
            "SELECT count(*) FROM invoice_events WHERE kind = 'resent'"))).scalar_one()
    assert claims == ORPHANS  # one recovery claim per orphan, never two
