"""``gapless audit``: passes on a clean database; catches a planted fault of every kind (I1–I3,
I4's horizon, I7 against the mock integrator's ledger, I8 the chain) and exits 1.

Faults are planted the only way they can be, by going around the schema's own defences: the
unique indexes are dropped to plant a duplicate, the guard trigger is disabled to delete or
renumber a numbered invoice, a counter is moved by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.base import DuplicateOfAnother, Receipt, load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.ledger.invoices import (
    Draft,
    mark_alarm,
    mark_error,
    mark_issued,
    mark_rejected,
    upsert_draft,
    void,
)
from gapless.ops.audit import check_integrator
from gapless.settings import Settings
from tests.helpers import ledger, run_gapless
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import audit, define_series, kinds, make_sending, message, post


async def issue(engine: AsyncEngine, mock: MockIntegratorClient, ids: list[str], *,
                tenant: str = "acme", series: str = "ABC") -> None:
    """Issue invoices the way the worker does: pinned, sent to the integrator, ISSUED."""
    for sending in await make_sending(engine, ids, tenant=tenant, series=series):
        ref = post(mock, sending)
        assert await mark_issued(ledger(engine), sending.pk,
                                 Receipt(sending.tenant, sending.number, sending.invoice_id, ref))


async def sql(engine: AsyncEngine, *statements: str) -> None:
    async with engine.begin() as conn:
        for statement in statements:
            await conn.execute(text(statement))


@pytest.fixture
async def five_issued(engine: AsyncEngine, mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, [f"inv-{n}" for n in range(1, 6)])  # numbers 1..5


def violation(report: dict[str, Any], kind: str) -> dict[str, Any]:
    [found] = [v for v in report["violations"] if v["kind"] == kind]
    return found


async def test_clean_database_passes_and_every_number_not_issued_is_explained(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await define_series(engine, "beta", "XYZ")
    await issue(engine, mock_integrator, ["ok-1", "ok-2"])
    await issue(engine, mock_integrator, ["beta-1"], tenant="beta", series="XYZ")
    rejected, errored, voided, alarmed, sending = await make_sending(
        engine, ["rejected", "errored", "voided", "alarmed", "sending"])
    await mark_rejected(ledger(engine), rejected, "invalid tax id")
    await mark_error(ledger(engine), errored, "TransientIntegratorError: HTTP 503", None)
    await mark_rejected(ledger(engine), voided, "customer not registered")
    await void(ledger(engine), "voided", "issued on paper instead", tenant="acme")
    await mark_alarm(ledger(engine), alarmed, DuplicateOfAnother(alarmed.number, "someone-else"))
    await upsert_draft(ledger(engine),
                       Draft("no-number-yet", "acme", "ABC", 1, message("no-number-yet")))

    code, report = audit(integrated_env, "--integrator")

    assert (code, report["ok"], report["violations"]) == (0, True, [])
    assert report["integrator"]["documents"] == 3
    where = {n["number"]: (n["status"], n["reason"]) for n in report["not_issued"]}
    assert where == {
        rejected.number: ("REJECTED", "invalid tax id"),
        errored.number: ("ERROR", "TransientIntegratorError: HTTP 503 (parked for an operator)"),
        voided.number: ("VOIDED", "issued on paper instead"),
        alarmed.number: ("ERROR", f"ALARM: number {alarmed.number} is held by invoice "
                                  "'someone-else' at the integrator (parked for an operator)"),
        sending.number: ("SENDING", where[sending.number][1]),
    }
    assert "within the horizon" in where[sending.number][1]
    counters = {(c["tenant"], c["series"]): (c["last_no"], c["issued"]) for c in
                report["counters"]}
    assert counters == {("acme", "ABC"): (7, 2), ("beta", "XYZ"): (1, 1)}
    assert report["chain"] == {"chains": 2, "sealed": 8, "checkpoints": None,
                               "latest_checkpoint": None, "anchored": 0}

    table = run_gapless(["audit"], {**integrated_env, "COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert "audit: clean" in table.stdout
    assert "chain: 2 chain(s), 8 sealed number(s) recomputed" in table.stdout
    assert "REJECTED" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80


async def test_gap_is_caught(engine: AsyncEngine, five_issued: None,
                             integrated_env: dict[str, str]) -> None:
    await sql(engine, "ALTER TABLE invoices DISABLE TRIGGER invoices_guard",
              "DELETE FROM invoices WHERE reserved_no IN (2, 3)",
              "ALTER TABLE invoices ENABLE TRIGGER invoices_guard")

    code, report = audit(integrated_env)

    assert code == 1
    # The chain fails too: the seals of 2 and 3 name invoices nothing holds (I8).
    assert kinds(report) == {"gap", "chain_broken"}
    gap = violation(report, "gap")
    assert (gap["numbers"], gap["count"]) == ("2..3", 2)
    assert violation(report, "chain_broken")["numbers"] == "2"
    table = run_gapless(["audit"], integrated_env)
    assert table.returncode == 1
    assert "gap" in table.stdout
    assert "audit: 2 violation(s)" in table.stdout


async def test_duplicate_is_caught(engine: AsyncEngine, five_issued: None,
                                   integrated_env: dict[str, str]) -> None:
    await sql(engine, "DROP INDEX invoices_counter_no_key", "DROP INDEX invoices_tenant_number_key",
              """INSERT INTO invoices (invoice_id, tenant, series, status, period_key,
                                       reserved_no, number, reserved_at, issued_at)
                 SELECT 'twin', tenant, series, 'ISSUED', period_key, reserved_no, number,
                        reserved_at, now()
                   FROM invoices WHERE reserved_no = 4""")

    code, report = audit(integrated_env)

    assert code == 1
    # The chain sees it too: the twin holds a number sealed for inv-4 (I8).
    assert kinds(report) == {"duplicate_number", "duplicate_printed", "chain_broken"}
    assert violation(report, "duplicate_number")["invoice_ids"] == ["inv-4", "twin"]
    # The integrator never saw the twin's number for the twin: I7 says so too.
    code, report = audit(integrated_env, "--integrator")
    assert "issued_unknown_to_integrator" not in kinds(report)  # the number itself is there
    assert "invoice_id_mismatch" in kinds(report)


async def test_a_message_changed_in_place_is_caught_by_the_chain(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    """Only the chain can see it (I1–I3 hold): the audit names the number (I8)."""
    await sql(engine, "SET LOCAL session_replication_role = replica",  # as a superuser could
              "UPDATE invoices SET payload = jsonb_set(payload, '{lines,0,unit_price}', "
              "'\"1.00\"') WHERE reserved_no = 3")

    code, report = audit(integrated_env)

    assert (code, kinds(report)) == (1, {"chain_broken"})
    broken = violation(report, "chain_broken")
    assert (broken["series"], broken["numbers"]) == ("ABC", "3")
    assert "the stored message is not the one sealed" in broken["detail"]
    table = run_gapless(["audit"], integrated_env)
    assert table.returncode == 1
    assert "audit: 1 violation(s): chain_broken" in table.stdout
    assert audit(integrated_env, "--no-chain")[0] == 0


async def test_counter_ahead_of_its_invoices_is_caught(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    await sql(engine, "UPDATE number_counters SET last_no = last_no + 2")

    code, report = audit(integrated_env)

    assert code == 1
    assert kinds(report) == {"counter_ahead", "chain_broken"}  # 6 and 7 have no seal record
    ahead = violation(report, "counter_ahead")
    assert (ahead["numbers"], ahead["count"]) == ("6..7", 2)


async def test_number_beyond_the_counter_is_caught(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    await sql(engine, "UPDATE number_counters SET last_no = 4")

    code, report = audit(integrated_env)

    assert (code, kinds(report)) == (1, {"beyond_counter", "chain_broken"})
    assert violation(report, "beyond_counter")["invoice_ids"] == ["inv-5"]


async def test_renumbered_invoice_is_caught(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    await sql(engine, "ALTER TABLE invoices DISABLE TRIGGER invoices_guard",
              "UPDATE invoices SET number = 'ABC2026000000099' WHERE reserved_no = 3",
              "ALTER TABLE invoices ENABLE TRIGGER invoices_guard")

    code, report = audit(integrated_env, "--integrator", "--deep")

    assert code == 1
    assert kinds(report) == {"number_mismatch", "issued_unknown_to_integrator",
                             "integrator_unknown_number", "chain_broken"}
    assert kinds(audit(integrated_env, "--deep")[1]) == {"number_mismatch", "chain_broken"}
    assert kinds(audit(integrated_env, "--deep", "--no-chain")[1]) == {"number_mismatch"}


async def test_issued_invoice_unknown_to_the_integrator_is_caught(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    [never_sent] = await make_sending(engine, ["ghost"])
    await mark_issued(ledger(engine), never_sent.pk,
                      Receipt("acme", never_sent.number, "ghost", "made-up"))

    assert audit(integrated_env)[0] == 0  # the database alone cannot tell

    code, report = audit(integrated_env, "--integrator")

    assert (code, kinds(report)) == (1, {"issued_unknown_to_integrator"})
    assert violation(report, "issued_unknown_to_integrator")["numbers"] == never_sent.number


async def test_integrator_document_not_issued_here_is_caught_unless_in_flight(
        engine: AsyncEngine, five_issued: None, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    errored, in_flight = await make_sending(engine, ["errored", "in-flight"])
    post(mock_integrator, errored)
    post(mock_integrator, in_flight)
    await mark_error(ledger(engine), errored, "TransientIntegratorError: HTTP 500", None)

    code, report = audit(integrated_env, "--integrator")

    assert (code, kinds(report)) == (1, {"integrator_not_issued"})
    assert violation(report, "integrator_not_issued")["invoice_ids"] == ["errored", "errored"]
    # SENDING within the horizon: the dual-write window recovery closes, reported only.
    assert [d["invoice_id"] for d in report["integrator"]["in_flight"]] == ["in-flight"]


async def test_sending_beyond_the_horizon_is_stuck(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    [orphan] = await make_sending(engine, ["orphan"])
    await sql(engine, "UPDATE invoices SET sending_since = now() - interval '2 hours' "
                      "WHERE invoice_id = 'orphan'")

    assert audit(integrated_env, "--horizon", "86400")[0] == 0
    code, report = audit(integrated_env)  # default horizon: 600 s

    assert (code, kinds(report)) == (1, {"stuck"})
    assert violation(report, "stuck")["numbers"] == str(orphan.reserved_no)
    assert "beyond the 600s horizon" in violation(report, "stuck")["detail"]


async def test_filters_scope_the_audit(engine: AsyncEngine, mock_integrator: MockIntegratorClient,
                                       integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await define_series(engine, "acme", "XYZ")
    await define_series(engine, "beta", "ABC")
    await issue(engine, mock_integrator, ["a-1", "a-2"])
    await issue(engine, mock_integrator, ["x-1", "x-2"], series="XYZ")
    await issue(engine, mock_integrator, ["b-1", "b-2"], tenant="beta")
    await sql(engine, "UPDATE number_counters SET last_no = 3 "
                      "WHERE tenant = 'acme' AND series = 'XYZ'")

    assert audit(integrated_env, "--tenant", "beta", "--integrator")[0] == 0
    assert audit(integrated_env, "--tenant", "acme", "--series", "ABC", "--integrator")[0] == 0
    code, report = audit(integrated_env, "--tenant", "acme", "--integrator")
    assert (code, kinds(report)) == (1, {"counter_ahead", "chain_broken"})
    assert violation(report, "counter_ahead")["series"] == "XYZ"
    assert violation(report, "chain_broken")["series"] == "XYZ"
    assert report["integrator"]["documents"] == 4


async def test_integrator_without_a_ledger_is_checked_by_lookups(
        engine: AsyncEngine, five_issued: None, settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    [never_sent] = await make_sending(engine, ["ghost"])
    await mark_issued(ledger(engine), never_sent.pk,
                      Receipt("acme", never_sent.number, "ghost", "x"))
    [lost] = await make_sending(engine, ["lost"])
    post(mock_integrator, lost)
    await mark_error(ledger(engine), lost, "TransientIntegratorError: HTTP 500", None)
    at_mock = settings.with_overrides(integrator_url=mock_integrator.url)
    guard = GuardedIntegrator(load_integrator(at_mock), at_mock, name="test-audit")
    try:
        # No /ledger at this address (404): the audit asks about every pinned number instead.
        violations, check = await check_integrator(
            ledger(engine), f"{mock_integrator.url}/no-ledger-here", guard, tenant=None,
            series=None, horizon_s=600, timeout_s=10)
    finally:
        await guard.aclose()

    assert check.source == "lookup"
    assert check.documents == 6
    assert sorted((v.kind, v.numbers) for v in violations) == [
        ("integrator_not_issued", lost.number), ("issued_unknown_to_integrator", never_sent.number)]
    assert mock_integrator.stats()["lookups"] == 7


async def test_audit_sees_one_snapshot(engine: AsyncEngine, five_issued: None,
                                       integrated_env: dict[str, str]) -> None:
    """Reservations committed while the audit runs never show up half-done as gaps."""
    ids = [f"busy-{n}" for n in range(30)]

    async def reserve_more() -> None:
        await make_sending(engine, ids)

    async def audits() -> list[int]:
        return [await asyncio.to_thread(lambda: audit(integrated_env)[0]) for _ in range(3)]

    _, codes = await asyncio.gather(reserve_more(), audits())
    assert codes == [0, 0, 0]


async def test_numbers_the_database_lost_are_named_with_what_to_do(
        engine: AsyncEngine, five_issued: None, integrated_env: dict[str, str]) -> None:
    # What a failover to a standby that had only seals 1..3 leaves: inv-4 and inv-5 gone (the
    # integrator accepted both), the counter at 3; then a new invoice sealed no 4 again. The
    # loss is simulated by editing the tables, which the chain rightly reports as tampering (a
    # real failover loses the chain records with the seals): the audit runs with --no-chain.
    await sql(engine, "ALTER TABLE invoices DISABLE TRIGGER invoices_guard",
              "DELETE FROM invoices WHERE invoice_id IN ('inv-4', 'inv-5')",
              "ALTER TABLE invoices ENABLE TRIGGER invoices_guard",
              "UPDATE number_counters SET last_no = 3")
    [newcomer] = await make_sending(engine, ["newcomer"])
    await mark_alarm(ledger(engine), newcomer, DuplicateOfAnother(newcomer.number, "inv-4"))
    four, five = newcomer.number, newcomer.number[:-1] + "5"
    period = four[3:7]

    code, report = audit(integrated_env, "--integrator", "--no-chain")

    assert code == 1
    assert kinds(report) == {"invoice_id_mismatch", "integrator_ahead_of_counter"}
    held = violation(report, "invoice_id_mismatch")
    assert (held["numbers"], held["series"], held["period_key"]) == (four, "ABC", period)
    assert held["detail"] == (f"{four} is inv-4 at the integrator but newcomer (ERROR) here "
                              f"(no 4, counter acme/ABC/{period} at 4); inv-4 is not in this "
                              "database")
    assert held["todo"].startswith("the integrator holds this number for its invoice")
    assert "gapless invoice void" in held["todo"]
    ahead = violation(report, "integrator_ahead_of_counter")
    assert (ahead["numbers"], ahead["series"], ahead["period_key"]) == (five, "ABC", period)
    assert ahead["detail"] == (f"the integrator accepted {five} (no 5) for inv-5, but the "
                               f"counter acme/ABC/{period} is at 4: this database lost the seal "
                               "and would hand no 5 out again; inv-5 is not in this database")
    assert ahead["invoice_ids"] == ["inv-5"]
    assert "gapless series bump TENANT SERIES --past NUMBER" in ahead["todo"]
    table = run_gapless(["audit", "--integrator", "--no-chain"], integrated_env)
    assert table.returncode == 1
    assert "what to do (integrator_ahead_of_counter): this database lost the seal" in " ".join(
        table.stdout.split())

    # The counter raised past the highest number the integrator holds: nothing is ahead any
    # more; no 5 stays on no invoice here, and the audit keeps naming it.
    bumped = run_gapless(["series", "bump", "acme", "ABC", "--past", five], integrated_env)
    assert bumped.returncode == 0, bumped.stderr
    assert bumped.stdout.strip() == (f"counter acme/ABC/{period}: 4 -> 5; the next seal of this "
                                     "period takes no 6")
    again = run_gapless(["series", "bump", "acme", "ABC", "--past", four], integrated_env)
    assert again.stdout.strip() == (f"counter acme/ABC/{period}: already at 5, past {four}; "
                                    "unchanged")
    code, report = audit(integrated_env, "--integrator", "--no-chain")
    assert kinds(report) == {"invoice_id_mismatch", "integrator_unknown_number", "counter_ahead"}
    unknown = violation(report, "integrator_unknown_number")
    assert unknown["detail"] == (f"the integrator accepted {five} for inv-5; no invoice here "
                                 f"holds it (no 5, counter acme/ABC/{period} at 5); inv-5 is not "
                                 "in this database")
    [sealed_next] = await make_sending(engine, ["after-bump"])
    assert sealed_next.reserved_no == 6


def test_bump_refuses_a_number_its_series_cannot_have_printed(
        integrated_env: dict[str, str], five_issued: None) -> None:
    refused = run_gapless(["series", "bump", "acme", "ABC", "--past", "XYZ2026000000009"],
                          integrated_env)
    assert refused.returncode == 1
    assert "'XYZ2026000000009' is not a number of series 'ABC'" in refused.stderr
