"""The chaos checker is itself tested: a clean history passes, and a planted violation of each
invariant is detected with the exact violating row.

Each test builds a small real database (cloned from the migrated template) through the domain
operations — ISSUED, REJECTED, ERROR invoices in a yearly and a daily series of two tenants —
records the history a run would (ledger, feed, dead letters), then plants one violation, going
around the schema's own guards where needed (dropping the unique indexes, disabling a trigger).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.base import Receipt
from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.feed import events_after
from gapless.ledger.invoices import (
    ClaimKind,
    Draft,
    Sending,
    claim_for_sending,
    mark_error,
    mark_issued,
    mark_rejected,
    upsert_draft,
)
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.chaos.checker import (
    DeadLetter,
    Expectations,
    FeedRecord,
    History,
    InvariantViolation,
    Report,
    check,
)
from tests.helpers import ledger

ISSUED = [("acme", "ABC", f"acme-{i}") for i in range(1, 5)] + [
    ("acme", "DLY", "acme-d1"), ("acme", "DLY", "acme-d2"), ("beta", "XYZ", "beta-1")]
REJECTED = [("beta", "XYZ", "beta-rej")]
ERRORED = [("beta", "XYZ", "beta-err")]


@dataclass
class World:
    """A settled little run: its database and the history recorded for it."""

    engine: AsyncEngine
    db_url: str
    history: History
    numbers: dict[str, str] = field(default_factory=dict)

    def sql(self, *statements: str, params: tuple[Any, ...] = ()) -> None:
        """Plant something with plain SQL, autocommit, as the superuser (around any guard)."""
        conninfo = driver_conninfo(self.db_url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement, params)  # type: ignore[arg-type]

    async def refresh_feed(self) -> None:
        """The poller's view: every committed event from cursor 0."""
        records: list[FeedRecord] = []
        cursor = 0
        while page := await events_after(ledger(self.engine), cursor, 100):
            records += [FeedRecord.of(event) for event in page]
            cursor = page[-1].sequence_id
        self.history.feed = records

    def check(self, **expect: bool) -> Report:
        return check(self.db_url, self.history, Expectations(**expect))


async def claim(engine: AsyncEngine, invoice_id: str, tenant: str = "acme") -> Sending:
    result = await claim_for_sending(ledger(engine), invoice_id, tenant=tenant, lease_s=60,
                                     lock_timeout_ms=5000)
    assert result.kind is ClaimKind.SEND
    assert result.sending is not None
    return result.sending


async def draft(engine: AsyncEngine, tenant: str, series: str, invoice_id: str) -> None:
    await upsert_draft(ledger(engine),
                       Draft(invoice_id, tenant, series, 1, {"invoice_id": invoice_id}))


@pytest.fixture
async def world(engine: AsyncEngine, db_url: str) -> World:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "DLY", reset="daily"))
        await add_series(tx, build_series_spec("beta", "XYZ", reset="never"))
    history = History()
    built = World(engine, db_url, history)
    for tenant, series, invoice_id in ISSUED + REJECTED + ERRORED:
        history.publish(invoice_id, tenant, series)
        await draft(engine, tenant, series, invoice_id)
        sending = await claim(engine, invoice_id, tenant)
        built.numbers[invoice_id] = sending.number
        if (tenant, series, invoice_id) in REJECTED:
            assert await mark_rejected(ledger(engine), sending, "customer not registered")
        elif (tenant, series, invoice_id) in ERRORED:
            assert await mark_error(ledger(engine), sending, "ALARM: parked for a person", None)
        else:
            ref = f"ref-{invoice_id}"
            assert await mark_issued(ledger(engine), sending.pk, Receipt(tenant, sending.number,
                                                                  invoice_id, ref))
            history.ledger.append({"tenant": tenant, "number": sending.number,
                                   "invoice_id": invoice_id, "ref": ref})
    history.publish("acme-1", "acme", "ABC")  # a duplicate publish changes nothing
    history.malformed["bad-1"] = "not json"
    history.dead_letters.append(DeadLetter("bad-1", "body is not valid JSON"))
    history.faults.update({"worker_kill": 2, "integrator_transient": 5})
    await built.refresh_feed()
    return built


def only(report: Report, invariant: str, what: str) -> tuple[dict[str, Any], ...]:
    """The rows of the one violation of ``invariant`` whose description contains ``what``."""
    found = [v for v in report.of(invariant) if what in v.what]
    assert len(found) == 1, report.violations
    return found[0].rows


async def test_a_clean_run_passes_and_prints_its_summary(world: World) -> None:
    report = world.check()

    assert report.ok, report.violations
    report.raise_for_violations()
    assert report.counts["published (valid)"] == 9
    assert report.counts["duplicate publishes"] == 1
    assert report.counts["  ISSUED"] == 7
    assert report.counts["  REJECTED"] == 1
    assert report.counts["  ERROR"] == 1
    assert report.counts["dead-lettered"] == 1
    assert report.counts["numbers reserved"] == 9
    assert report.counts["events seen by poller"] == report.counts["events in table"]
    summary = report.summary()
    assert "worker_kill" in summary
    assert "violations" in summary


async def test_a_gap_is_detected(world: World) -> None:
    # The counter advanced without pinning the number on an invoice.
    world.sql("UPDATE number_counters SET last_no = last_no + 1 "
              "WHERE tenant = 'acme' AND series = 'ABC'")

    report = world.check()

    assert only(report, "I2", "gap") == ({"tenant": "acme", "series": "ABC",
                                          "period_key": report_period(world, "acme-1"),
                                          "last_no": 5, "missing_no": 5},)
    with pytest.raises(InvariantViolation, match="missing_no=5"):
        report.raise_for_violations()


def report_period(world: World, invoice_id: str) -> str:
    conninfo = driver_conninfo(world.db_url)
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT period_key FROM invoices WHERE invoice_id = %s",
                           (invoice_id,)).fetchone()
    assert row is not None
    return str(row[0])


async def test_a_duplicate_number_in_the_database_is_detected(world: World) -> None:
    await draft(world.engine, "acme", "ABC", "acme-dup")
    world.history.publish("acme-dup", "acme", "ABC")
    world.sql("DROP INDEX invoices_counter_no_key", "DROP INDEX invoices_tenant_number_key")
    world.sql("UPDATE invoices d SET reserved_no = o.reserved_no, number = o.number, "
              "period_key = o.period_key FROM invoices o "
              "WHERE d.invoice_id = 'acme-dup' AND o.invoice_id = 'acme-2'")
    await world.refresh_feed()

    report = world.check()

    rows = only(report, "I1", "one counter value on several invoices")
    assert {row["invoice_id"] for row in rows} == {"acme-2", "acme-dup"}
    assert {row["number"] for row in rows} == {world.numbers["acme-2"]}
    assert {row["invoice_id"] for row in only(report, "I1", "printed number")} == {
        "acme-2", "acme-dup"}
    assert only(report, "I2", "more than one invoice")[0]["reserved_no"] == 2


async def test_a_number_accepted_twice_by_the_integrator_is_detected(world: World) -> None:
    twice = {"tenant": "acme", "number": world.numbers["acme-3"], "invoice_id": "intruder",
             "ref": "ref-x"}
    world.history.ledger.append(twice)

    report = world.check()

    rows = only(report, "I1", "integrator accepted one number several times")
    assert {row["invoice_id"] for row in rows} == {"acme-3", "intruder"}


async def test_an_invoice_stuck_in_sending_is_detected(world: World) -> None:
    await draft(world.engine, "acme", "DLY", "acme-stuck")
    world.history.publish("acme-stuck", "acme", "DLY")
    sending = await claim(world.engine, "acme-stuck")  # the worker "died" during the call
    await world.refresh_feed()

    report = world.check()

    (row,) = only(report, "I4", "not settled")
    assert (row["invoice_id"], row["status"], row["number"]) == (
        "acme-stuck", "SENDING", sending.number)
    assert len(report.violations) == 1


async def test_an_error_row_is_unsettled_when_errors_are_not_allowed(world: World) -> None:
    report = world.check(error_ok=False)

    (row,) = only(report, "I4", "not settled")
    assert (row["invoice_id"], row["status"]) == ("beta-err", "ERROR")


async def test_all_issued_expectation_flags_the_rejected_and_errored(world: World) -> None:
    report = world.check(all_issued=True)

    rows = only(report, "I4", "wrong outcome")
    assert {(row["invoice_id"], row["status"]) for row in rows} == {
        ("beta-rej", "REJECTED"), ("beta-err", "ERROR")}


async def test_a_forced_rejection_that_ended_issued_is_detected(world: World) -> None:
    world.history.published["acme-4"] = replace(world.history.published["acme-4"],
                                                expect="rejected")

    (row,) = only(world.check(), "I4", "wrong outcome")
    assert (row["invoice_id"], row["status"], row["expected"]) == (
        "acme-4", "ISSUED", "REJECTED")


async def test_a_lost_publish_and_an_unpublished_row_are_detected(world: World) -> None:
    world.history.publish("never-arrived", "acme", "ABC")
    await draft(world.engine, "beta", "XYZ", "from-nowhere")
    await world.refresh_feed()

    report = world.check()

    assert only(report, "I4", "has no row") == (
        {"invoice_id": "never-arrived", "tenant": "acme", "series": "ABC"},)
    (row,) = only(report, "I4", "nobody published")
    assert row["invoice_id"] == "from-nowhere"


async def test_dead_letter_mismatches_are_detected(world: World) -> None:
    world.history.malformed["bad-2"] = "lines missing"  # published, never dead-lettered
    world.history.dead_letters.append(DeadLetter("acme-1", "worker dead-lettered a valid one"))

    report = world.check()

    assert only(report, "I4", "not in the dead-letter queue") == (
        {"message_id": "bad-2", "malformed": "lines missing"},)
    (row,) = only(report, "I4", "not one of the malformed")
    assert (row["message_id"], row["valid_invoice"]) == ("acme-1", True)


async def test_an_issued_invoice_unknown_to_the_integrator_is_detected(world: World) -> None:
    dropped = world.history.ledger.pop(2)

    (row,) = only(world.check(), "I7", "unknown to the integrator")
    assert (row["invoice_id"], row["number"]) == (dropped["invoice_id"], dropped["number"])


async def test_a_ledger_entry_unknown_to_the_database_is_detected(world: World) -> None:
    ghost = {"tenant": "beta", "number": "XYZ000000099", "invoice_id": "ghost", "ref": "r"}
    world.history.ledger.append(ghost)
    # Accepted by the integrator, but the database recorded a rejection: also a disagreement.
    world.history.ledger.append({"tenant": "beta", "number": world.numbers["beta-rej"],
                                 "invoice_id": "beta-rej", "ref": "r2"})

    rows = only(world.check(), "I7", "not ISSUED in the database")
    assert {(row["invoice_id"], row["db_status"]) for row in rows} == {
        ("ghost", None), ("beta-rej", "REJECTED")}


async def test_one_invoice_under_two_numbers_at_the_integrator_is_detected(
        world: World) -> None:
    world.history.ledger.append({"tenant": "acme", "number": "ABC2099000000042",
                                 "invoice_id": "acme-1", "ref": "ref-again"})

    rows = only(world.check(), "I3", "several numbers")
    assert {row["number"] for row in rows} == {world.numbers["acme-1"], "ABC2099000000042"}


async def test_a_number_changed_on_an_invoice_is_detected(world: World) -> None:
    world.sql("ALTER TABLE invoices DISABLE TRIGGER invoices_guard")
    world.sql("UPDATE invoices SET number = 'ABC2099000000777', attempts = attempts + 1 "
              "WHERE invoice_id = 'acme-2'")
    await world.refresh_feed()

    (row,) = only(world.check(), "I3", "changed across its history")
    assert row["invoice_id"] == "acme-2"
    assert row["numbers_in_events"] == sorted([world.numbers["acme-2"], "ABC2099000000777"])


async def test_a_missed_feed_event_is_detected(world: World) -> None:
    missed = world.history.feed.pop(5)

    (row,) = only(world.check(), "I6", "missed")
    assert (row["sequence_id"], row["invoice_id"], row["to_status"]) == (
        missed.sequence_id, missed.invoice_id, missed.to_status)


async def test_a_repeated_feed_event_is_detected(world: World) -> None:
    world.history.feed.append(world.history.feed[3])

    report = world.check()

    assert only(report, "I6", "more than once") == (
        {"sequence_id": world.history.feed[3].sequence_id, "times": 2},)
    assert only(report, "I6", "out of sequence order")[0]["sequence_id"] == \
        world.history.feed[3].sequence_id


async def test_feed_events_out_of_order_or_altered_are_detected(world: World) -> None:
    feed = world.history.feed
    feed[1], feed[2] = feed[2], feed[1]
    feed[4] = replace(feed[4], to_status="VOIDED")

    report = world.check()

    assert only(report, "I6", "out of sequence order")[0]["sequence_id"] == feed[2].sequence_id
    assert only(report, "I6", "different from the table")[0]["sequence_id"] == \
        feed[4].sequence_id


async def test_an_event_that_never_got_a_sequence_id_is_detected(world: World) -> None:
    # Committed after the poller's last page, and never positioned: no feed client saw it.
    await draft(world.engine, "acme", "ABC", "acme-unsequenced")
    world.history.publish("acme-unsequenced", "acme", "ABC", expect="any")
    world.sql("UPDATE invoices SET status = 'CANCELLED', last_error = 'test' "
              "WHERE invoice_id = 'acme-unsequenced'")

    rows = only(world.check(), "I6", "without a sequence_id")
    assert [(row["invoice_id"], row["to_status"]) for row in rows] == [
        ("acme-unsequenced", "RECEIVED"), ("acme-unsequenced", "CANCELLED")]


async def test_a_forbidden_transition_is_detected(world: World) -> None:
    world.sql("ALTER TABLE invoices DISABLE TRIGGER invoices_guard")
    world.sql("UPDATE invoices SET status = 'VOIDED', last_error = 'planted' "
              "WHERE invoice_id = 'acme-3'")
    await world.refresh_feed()

    report = world.check()

    (row,) = only(report, "transitions", "allowed transitions")
    assert (row["invoice_id"], row["from_status"], row["to_status"], row["problem"]) == (
        "acme-3", "ISSUED", "VOIDED", "transition not allowed")


async def test_the_guard_refuses_what_the_checker_calls_forbidden(world: World) -> None:
    # The planted transition above is forbidden by the schema too, not only by the checker.
    with pytest.raises(psycopg.errors.CheckViolation, match="ISSUED -> VOIDED"):
        world.sql("UPDATE invoices SET status = 'VOIDED', last_error = 'x' "
                  "WHERE invoice_id = 'acme-3'")


async def test_gibs_verdicts_on_issued_documents_are_history_not_forbidden_transitions(
        world: World) -> None:
    # GİB's verdicts after acceptance: ISSUED -> ISSUED events written by schema/current/gib.sql.
    world.sql("UPDATE invoices SET gib_status = 'refused', gib_detail = 'GİB: planted' "
              "WHERE invoice_id = 'acme-1'")
    world.sql("UPDATE invoices SET gib_status = 'accepted' WHERE invoice_id = 'acme-2'")
    world.sql("UPDATE invoices SET gib_status = 'pending' WHERE invoice_id = 'acme-4'")
    await world.refresh_feed()
    assert [(e.invoice_id, e.kind) for e in world.history.feed if e.kind.startswith("gib_")] == [
        ("acme-1", "gib_refused"), ("acme-2", "gib_accepted"), ("acme-4", "gib_unresolved")]

    assert world.check().of("transitions") == []

    # Any other event from ISSUED to ISSUED still is one.
    world.sql("ALTER TABLE invoice_events DISABLE TRIGGER USER")
    world.sql("UPDATE invoice_events SET kind = 'resent' WHERE kind = 'gib_accepted'")
    world.sql("ALTER TABLE invoice_events ENABLE TRIGGER USER")
    (row,) = only(world.check(), "transitions", "allowed transitions")
    assert (row["invoice_id"], row["kind"], row["problem"]) == (
        "acme-2", "resent", "transition not allowed")
