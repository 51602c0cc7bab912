"""Orphans made by real ``gapless worker`` processes, settled by real ``gapless recovery`` ones.

* lost response: the mock accepts every document and withholds the answer; the workers are
  killed while they wait. Recovery finds each number at the integrator and repairs it — no
  second send, no new number — and ``gapless audit --integrator`` agrees.
* never sent: a worker dies right after its reservation committed (test-only
  ``GAPLESS_FAULT_KILL_AT=after_reserve_commit``). Recovery resends under the pinned number.
"""

from __future__ import annotations

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
    recovery_once,
)


async def test_lost_response_orphans_of_killed_workers_are_repaired_without_a_new_number(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes) -> None:
    count = 24
    await define_series(engine)
    # Accept every document, then keep the answer until the client hangs up.
    mock_integrator.set_faults(lost_response_rate=1.0, lost_response_mode="timeout",
                               lost_response_delay_s=120)
    slow_client = {"GAPLESS_INTEGRATOR_TIMEOUT_S": "120"}
    workers = [procs.worker(f"worker-{n}", "--concurrency", "16", env=slow_client)
               for n in range(2)]
    publish_demo(integrated_env, count)
    wait_until(lambda: len(mock_integrator.ledger()) == count, 60,
               message="every document accepted by the integrator")
    for worker in workers:
        worker.kill9()
    assert await count_status(engine, "SENDING") == count  # the dual-write case, 24 times
    before = await invoice_rows(engine)
    mock_integrator.set_faults(lost_response_rate=0.0)

    result = recovery_once(integrated_env)

    assert f"claimed {count} orphan(s): repaired {count}, resent 0" in result.stdout
    after = await invoice_rows(engine)
    ledger = {d["number"]: d for d in mock_integrator.ledger()}
    for invoice_id, row in after.items():
        assert row.status == Status.ISSUED
        assert row.number == before[invoice_id].number  # the number it was sent with
        assert ledger[row.number]["invoice_id"] == invoice_id
        assert ledger[row.number]["ref"] == row.integrator_ref
    assert await last_no(engine) == count  # no number reserved by recovery
    stats = mock_integrator.stats()
    assert stats["posts"] == count  # nothing was sent twice
    code, report = audit(integrated_env, "--integrator")
    assert (code, report["violations"], report["integrator"]["documents"]) == (0, [], count)


async def test_orphans_never_sent_are_resent_with_their_pinned_numbers(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes) -> None:
    orphans = 3
    await define_series(engine)
    publish_demo(integrated_env, orphans)
    die_after_reserving = fault_env(kill_at="after_reserve_commit:1")
    for n in range(orphans):
        # Each worker acks the redelivered (BUSY) message of its predecessor, reserves the next
        # number, and dies before calling the integrator.
        procs.doomed_worker(f"worker-{n}", "--concurrency", "1", env=die_after_reserving)

    async def all_pinned() -> bool:
        return await count_status(engine, "SENDING") == orphans
    await await_until(all_pinned, 10, message="three SENDING orphans")
    before = await invoice_rows(engine)
    assert mock_integrator.stats()["posts"] == 0
    assert sorted(r.reserved_no for r in before.values()) == [1, 2, 3]

    result = recovery_once(integrated_env)

    assert f"claimed {orphans} orphan(s): repaired 0, resent {orphans}" in result.stdout
    after = await invoice_rows(engine)
    assert {i: (r.status, r.number) for i, r in after.items()} == {
        i: (Status.ISSUED, r.number) for i, r in before.items()}
    assert {(d["number"], d["invoice_id"]) for d in mock_integrator.ledger()} == {
        (r.number, i) for i, r in after.items()}
    assert await last_no(engine) == orphans
    code, _ = audit(integrated_env, "--integrator")
    assert code == 0
