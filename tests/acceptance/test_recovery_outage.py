"""``gapless recovery`` through an integrator outage: the breaker opens, calls during the outage
stay bounded (one trial per reset period, not a batch per round), and every orphan is settled
with its own number once the integrator is back."""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from tests.helpers import await_until, wait_until
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    Processes,
    audit,
    define_series,
    invoice_rows,
    last_no,
    log_events,
    make_orphans,
    post,
)

ORPHANS = 40
CONCURRENCY = 8
FAIL_MAX = 3
RESET_S = 1.0


async def test_outage_opens_the_breaker_bounds_calls_and_all_orphans_settle_after(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes) -> None:
    await define_series(engine)
    orphans = await make_orphans(engine, [f"inv-{i:03d}" for i in range(ORPHANS)])
    for sending in orphans[::2]:
        post(mock_integrator, sending)  # accepted, answer lost
    mock_integrator.set_faults(down=True)
    env = {"GAPLESS_BREAKER_FAIL_MAX": str(FAIL_MAX),
           "GAPLESS_BREAKER_RESET_TIMEOUT_S": str(RESET_S),
           "GAPLESS_RETRY_ATTEMPTS": "2", "GAPLESS_RETRY_WAIT_S": "0.05"}

    outage_started = time.monotonic()
    recovery = procs.recovery(
        "recovery", "--interval", "0.2", "--stuck-after", "60", "--concurrency",
        str(CONCURRENCY), "--backoff-base", "0.2", "--backoff-max", "1", env=env)
    # Let the outage last through several reset periods of the breaker.
    wait_until(lambda: len(log_events(recovery, "recovery_round_skipped")) >= 8, 60,
               message="several skipped rounds")
    calls_during_outage = mock_integrator.stats()["down"]
    outage_s = time.monotonic() - outage_started
    mock_integrator.set_faults(down=False)

    # The first round's wave (at most CONCURRENCY calls in flight when the breaker opened), then
    # one trial call per reset period: never a batch per round.
    assert log_events(recovery, "breaker_opened")
    bound = CONCURRENCY + outage_s / RESET_S + 2
    assert calls_during_outage <= bound, (calls_during_outage, bound)

    async def settled() -> bool:
        return all(r.status == Status.ISSUED for r in (await invoice_rows(engine)).values())
    await await_until(settled, 60, interval=0.2, message="every orphan ISSUED after the outage")

    assert recovery.terminate() == 0
    assert log_events(recovery, "breaker_closed")
    rows = await invoice_rows(engine)
    assert sorted(r.number for r in rows.values()) == sorted(s.number for s in orphans)
    assert await last_no(engine) == ORPHANS
    stats = mock_integrator.stats()
    assert stats["max_posts_per_number"] == 1  # the lost-response half was never resent
    assert stats["ledger_size"] == ORPHANS
    code, report = audit(integrated_env, "--integrator")
    assert (code, report["violations"]) == (0, [])
