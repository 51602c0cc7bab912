"""The ``gapless recovery`` process: Prometheus metrics, and a graceful stop on SIGTERM that
finishes in-flight orphans, puts unstarted ones back untouched, and exits 0."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from tests.helpers import free_port, wait_until
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    Processes,
    define_series,
    invoice_rows,
    log_events,
    make_orphans,
)

ORPHANS = 10


async def stale_orphans(engine: AsyncEngine) -> dict[str, object]:
    await define_series(engine)
    await make_orphans(engine, [f"inv-{i:02d}" for i in range(ORPHANS)])
    return await invoice_rows(engine)


def metric(body: str, name: str) -> float:
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not exported")


async def test_sigterm_finishes_in_flight_orphans_puts_the_rest_back_and_exits_0(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient, procs: Processes) -> None:
    before = await stale_orphans(engine)
    mock_integrator.set_faults(latency_ms=[1500, 1500])  # every call takes 1.5 s
    port = free_port()
    recovery = procs.recovery("recovery", "--interval", "0.2", "--stuck-after", "60",
                              "--concurrency", "2", "--metrics-port", str(port))
    wait_until(lambda: len(log_events(recovery, "orphan_found")) == 2, 30,
               message="two orphans in flight")

    async with httpx.AsyncClient(timeout=10) as http:
        body = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert metric(body, 'gapless_recovery_orphans_found_total{was="SENDING"}') == ORPHANS
    assert metric(body, 'gapless_breaker_state{name="recovery"}') == 0
    assert metric(body, "gapless_recovery_in_flight") == 2
    assert metric(body, 'gapless_recovery_rounds_total{result="completed"}') == 0

    assert recovery.terminate(timeout=30) == 0
    assert log_events(recovery, "recovery_stopped")
    rows = await invoice_rows(engine)
    finished = {i for i, r in rows.items() if r.status == Status.ISSUED}
    assert len(finished) == 2  # the two in flight completed (lookup, then resend)
    for invoice_id, row in rows.items():
        if invoice_id not in finished:  # never started: exactly as before the claim
            assert (row.status, row.attempts, row.sending_since) == (
                Status.SENDING, before[invoice_id].attempts,  # type: ignore[attr-defined]
                before[invoice_id].sending_since)  # type: ignore[attr-defined]
    assert mock_integrator.stats()["lookups"] == 2


async def test_drain_timeout_cuts_off_a_stuck_call_and_still_exits_0(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient, procs: Processes) -> None:
    await stale_orphans(engine)
    mock_integrator.set_faults(latency_ms=[60_000, 60_000])
    recovery = procs.recovery("recovery", "--stuck-after", "60", "--concurrency", "1",
                              "--drain-timeout", "3")
    wait_until(lambda: log_events(recovery, "orphan_found"), 30, message="an orphan in flight")

    assert recovery.terminate(timeout=20) == 0
    assert log_events(recovery, "recovery_drain_timeout")
    rows = await invoice_rows(engine)
    # The cut-off one stays SENDING under recovery's lease; a later round asks first again.
    assert {r.status for r in rows.values()} == {Status.SENDING}
    assert sorted(r.attempts for r in rows.values()) == [1] * (ORPHANS - 1) + [2]
