"""Orphan recovery against real PostgreSQL and the mock integrator over HTTP: ask first, repair
without a new number, resend with the same number, alarm, reject, back off, give up.

Orphans are made with the real domain operations (a draft, then ``claim_for_sending``: number
pinned, SENDING, lease taken) and, for the lost-response kind, POSTed to the mock directly, as a
worker whose answer never arrived. ``gapless recovery --once --stuck-after 0`` then settles them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    REJECTED_TAX_ID,
    audit,
    define_series,
    events,
    invoice_rows,
    kinds,
    last_no,
    make_sending,
    post,
    recovery_once,
)


async def test_lost_response_orphans_are_repaired_and_never_sent_ones_resent_with_their_number(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    orphans = await make_sending(engine, [f"inv-{i}" for i in range(10)])
    accepted = {s.invoice_id: post(mock_integrator, s) for s in orphans[:6]}  # answer lost
    before = await invoice_rows(engine)

    result = recovery_once(integrated_env)

    assert "claimed 10 orphan(s): repaired 6, resent 4" in result.stdout
    after = await invoice_rows(engine)
    for invoice_id, row in after.items():
        assert row.status == Status.ISSUED, (invoice_id, row.status, row.last_error)
        # The same number as before: recovery never reserves a new one.
        assert (row.reserved_no, row.number) == (before[invoice_id].reserved_no,
                                                 before[invoice_id].number)
        if invoice_id in accepted:
            assert row.integrator_ref == accepted[invoice_id]
    assert await last_no(engine) == 10
    ledger = {(d["number"], d["invoice_id"]) for d in mock_integrator.ledger()}
    assert ledger == {(row.number, row.invoice_id) for row in after.values()}
    stats = mock_integrator.stats()
    assert stats["lookups"] == 10  # asked first, about every orphan
    assert stats["max_posts_per_number"] == 1  # the repaired six were not sent again
    assert stats["posts"] == 10
    history = await events(engine, "inv-0")
    assert (history[-1].kind, history[-1].actor, history[-1].to_status) == (
        "recovered", "recovery", "ISSUED")

    code, report = audit(integrated_env, "--integrator")
    assert (code, report["violations"]) == (0, [])
    assert report["integrator"]["documents"] == 10


async def test_number_held_by_another_invoice_is_an_alarm_never_retried(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    [orphan] = await make_sending(engine, ["inv-a"])
    post(mock_integrator, orphan, invoice_id="someone-else")

    result = recovery_once(integrated_env)

    assert "alarm 1" in result.stdout
    # The alarm names the number and the invoice the integrator holds it for, and what to do.
    assert (f"ALARM (1): acme: number {orphan.number} is held by invoice 'someone-else' at the "
            "integrator") in result.stdout
    assert "run `gapless audit --integrator`" in result.stdout
    row = (await invoice_rows(engine))["inv-a"]
    assert row.status == Status.ERROR
    assert row.next_attempt_at is None  # parked: never claimed again by itself
    assert row.last_error.startswith("ALARM")
    assert "someone-else" in row.last_error
    assert mock_integrator.stats()["posts"] == 1  # the alarm sent nothing
    assert "claimed 0 orphan(s)" in recovery_once(integrated_env).stdout
    code, report = audit(integrated_env, "--integrator")
    assert code == 1
    assert kinds(report) == {"invoice_id_mismatch"}


async def test_resend_that_is_rejected_keeps_its_number(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    [orphan] = await make_sending(engine, ["inv-r"], tax_id=REJECTED_TAX_ID)

    assert "rejected 1" in recovery_once(integrated_env).stdout

    row = (await invoice_rows(engine))["inv-r"]
    assert (row.status, row.number, row.last_error) == (Status.REJECTED, orphan.number,
                                                        "invalid tax id")
    code, report = audit(integrated_env)
    assert code == 0  # a REJECTED number is reported, not a violation
    assert [(n["number"], n["status"]) for n in report["not_issued"]] == [
        (orphan.number, "REJECTED")]


async def test_fresh_leases_and_errors_not_yet_due_are_left_alone(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await make_sending(engine, ["fresh", "later"])
    async with engine.begin() as conn:
        await conn.execute(text(
            "UPDATE invoices SET status = 'ERROR', next_attempt_at = now() + interval '1 hour', "
            "last_error = 'x' WHERE invoice_id = 'later'"))

    result = recovery_once(integrated_env, "--stuck-after", "300")

    assert "claimed 0 orphan(s)" in result.stdout
    stats = mock_integrator.stats()
    assert stats["lookups"] == stats["posts"] == 0
    rows = await invoice_rows(engine)
    assert (rows["fresh"].status, rows["later"].status) == (Status.SENDING, Status.ERROR)


async def test_once_claims_a_single_batch(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await make_sending(engine, ["a", "b", "c"])

    assert "claimed 2 orphan(s): repaired 0, resent 2" in recovery_once(
        integrated_env, "--batch", "2").stdout
    assert sorted(r.status for r in (await invoice_rows(engine)).values()) == [
        Status.ISSUED, Status.ISSUED, Status.SENDING]


async def test_transient_failures_back_off_per_invoice_then_park_after_max_attempts(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    [orphan] = await make_sending(engine, ["flaky"])  # attempt 1 was the worker's
    mock_integrator.set_faults(transient_rate=1.0)
    env = {**integrated_env, "GAPLESS_RETRY_ATTEMPTS": "1", "GAPLESS_BREAKER_FAIL_MAX": "50"}
    flags = ("--max-attempts", "3", "--backoff-base", "30")

    started = datetime.now(UTC)
    assert "error 1" in recovery_once(env, *flags).stdout
    row = (await invoice_rows(engine))["flaky"]
    assert (row.status, row.attempts) == (Status.ERROR, 2)
    # Attempt 2 failed: due again after 2·30 s, jittered over the upper half (30..60 s).
    wait = (row.next_attempt_at - started).total_seconds()
    assert 29 <= wait <= 61, wait
    assert "claimed 0 orphan(s)" in recovery_once(env, *flags).stdout  # not due yet

    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET next_attempt_at = now()"))
    assert "parked 1" in recovery_once(env, *flags).stdout
    row = (await invoice_rows(engine))["flaky"]
    assert (row.status, row.attempts, row.next_attempt_at) == (Status.ERROR, 3, None)
    assert "gave up after 3 attempts" in row.last_error
    assert row.number == orphan.number

    # Past --max-attempts it is never claimed again, even when made due by hand.
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET next_attempt_at = now()"))
    lookups = mock_integrator.stats()["lookups"]
    assert "claimed 0 orphan(s)" in recovery_once(env, *flags).stdout
    assert mock_integrator.stats()["lookups"] == lookups


async def test_refuses_to_start_on_another_cluster(
        engine: AsyncEngine, integrated_env: dict[str, str]) -> None:
    from tests.helpers import run_gapless

    result = run_gapless(["recovery", "--once"], {**integrated_env, "GAPLESS_CLUSTER_ID": "7"})
    assert result.returncode == 1
    assert "GAPLESS_CLUSTER_ID is 7" in result.stderr
