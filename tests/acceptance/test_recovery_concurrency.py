"""Two ``gapless recovery`` processes and two ``gapless worker`` processes at once, over orphans
of both kinds and fresh traffic: no invoice is handled twice (one lookup per orphan, one send
per number), no number is duplicated, and the integrator agrees with the database."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from tests.faults import fault_env
from tests.helpers import await_until, wait_until
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    Processes,
    audit,
    count_status,
    define_series,
    invoice_rows,
    last_no,
    publish_demo,
)

LOST = 12
NEVER_SENT = 2
FRESH = 60


async def test_two_recoveries_and_two_workers_never_handle_an_invoice_twice(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes) -> None:
    await define_series(engine)
    # Orphans, kind 1: accepted by the integrator, the answer lost, the worker killed.
    mock_integrator.set_faults(lost_response_rate=1.0, lost_response_mode="timeout",
                               lost_response_delay_s=120)
    worker = procs.worker("worker-lost", "--concurrency", "16",
                          env={"GAPLESS_INTEGRATOR_TIMEOUT_S": "120"})
    publish_demo(integrated_env, LOST)
    wait_until(lambda: len(mock_integrator.ledger()) == LOST, 60, message="lost responses")
    worker.kill9()
    mock_integrator.set_faults(lost_response_rate=0.0)
    # Kind 2: reserved, never sent (the worker dies right after its reservation commits).
    for n in range(NEVER_SENT):
        publish_demo(integrated_env, 1)
        procs.doomed_worker(f"worker-dies-{n}", "--concurrency", "1",
                            env=fault_env(kill_at="after_reserve_commit:1"))
    orphans = LOST + NEVER_SENT
    assert await count_status(engine, "SENDING") == orphans
    assert mock_integrator.stats()["lookups"] == 0

    mock_integrator.set_faults(latency_ms=[5, 20])
    for n in range(2):
        procs.recovery(f"recovery-{n}", "--interval", "0.2", "--stuck-after", "4",
                       "--batch", "5", "--concurrency", "4")
    for n in range(2):
        procs.worker(f"worker-{n}", "--concurrency", "8")
    publish_demo(integrated_env, FRESH)

    total = orphans + FRESH

    async def all_issued() -> bool:
        return await count_status(engine, Status.ISSUED) == total
    await await_until(all_issued, 120, interval=0.25, message="every invoice ISSUED")
    for proc in procs.started:
        if proc.alive():
            assert proc.terminate() == 0, proc.output()[-2000:]

    stats = mock_integrator.stats()
    assert stats["lookups"] == orphans  # each orphan asked about once, by one recovery
    assert stats["max_posts_per_number"] == 1  # one send per number
    assert stats["posts"] == total
    rows = await invoice_rows(engine)
    assert len(rows) == total
    assert sorted(r.reserved_no for r in rows.values()) == list(range(1, total + 1))
    assert await last_no(engine) == total
    async with engine.connect() as conn:
        claims = (await conn.execute(text(
            "SELECT invoice_id, count(*) AS n FROM invoice_events "
            "WHERE actor = 'recovery' AND kind IN ('resent', 'retried') GROUP BY invoice_id"
        ))).all()
    assert len(claims) == orphans
    assert {row.n for row in claims} == {1}  # never claimed twice
    code, report = audit(integrated_env, "--integrator")
    assert (code, report["violations"]) == (0, [])
