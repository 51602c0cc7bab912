"""The worker in-process against real RabbitMQ, PostgreSQL and the mock integrator (a subprocess).

Each test runs :class:`worker.consumer.Worker` as a task on the test's event loop, publishes with
the real producer API (or raw aio-pika for malformed messages), and reads the outcome from the
database, the dead-letter queue and the mock's ledger.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aio_pika
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.ledger.invoices import Draft, upsert_draft
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import await_sql, await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.worker_support import (
    all_in,
    assert_ledger_matches_database,
    counter,
    drain_dead,
    ledger_by_number,
    publish,
    rows,
    running_worker,
)


def invoice(invoice_id: str, *, tenant: str = "acme", series: str = "ABC",
            tax_id: str = "1234567890", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": tenant, "series": series,
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": tax_id, "name": "Example Ltd"},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}],
    }
    body.update(changes)
    return body


@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    # Quick retries so that tests spend their time on behaviour, not on back-off waits.
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0)


# --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("series")
async def test_duplicate_messages_consume_one_number_per_invoice(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[5, 30])
    once = [invoice(f"dup-{i:03d}") for i in range(50)]
    repeated = invoice("same-message")
    # Interleaved so that copies of one invoice are in flight at the same time.
    messages = [repeated] * 5 + [m for pair in zip(once, once, strict=True) for m in pair]
    expected = {m["invoice_id"] for m in messages}
    async with running_worker(worker_settings) as worker:
        await publish(worker_settings, *messages)
        await await_until(lambda: all_in(engine, expected, "ISSUED"), 60,
                          message="51 invoices ISSUED")
        assert worker.consuming
    current = await rows(engine)
    assert set(current) == expected
    assert sorted(row.reserved_no for row in current.values()) == list(range(1, 52))
    assert await counter(engine) == 51
    # Copies that met their invoice SENDING were acked, not sent again: one claim, one POST each.
    assert {row.attempts for row in current.values()} == {1}
    assert mock_integrator.stats()["posts"] == 51
    ledger = mock_integrator.ledger()
    assert sorted(entry["invoice_id"] for entry in ledger) == sorted(expected)
    assert_ledger_matches_database(mock_integrator, current)


async def test_two_tenants_each_issue_their_own_invoice_of_one_invoice_id(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    """invoice_id is unique per tenant: the same ids published by two tenants are two invoices,
    each numbered in its own tenant's series; a copy of either maps onto its own tenant's."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    ids = ["shared-1", "shared-2", "shared-3"]
    messages = [invoice(i, tenant=t, series=s) for i in ids
                for t, s in (("acme", "ABC"), ("globex", "GLX"))]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *messages, *messages)  # every message twice

        async def both_issued() -> bool:
            return len(await tenant_rows()) == 6 and all(
                row.status == "ISSUED" for row in (await tenant_rows()).values())

        async def tenant_rows() -> dict[tuple[str, str], Any]:
            async with engine.connect() as conn:
                return {(row.tenant, row.invoice_id): row for row in (await conn.execute(text(
                    "SELECT tenant, series, invoice_id, status, reserved_no, number, attempts "
                    "FROM invoices"))).all()}

        await await_until(both_issued, 60, message="6 invoices ISSUED")
    current = await tenant_rows()
    assert set(current) == {(t, i) for i in ids for t in ("acme", "globex")}
    for tenant, series in (("acme", "ABC"), ("globex", "GLX")):
        mine = [current[(tenant, i)] for i in ids]
        assert {row.series for row in mine} == {series}
        assert sorted(row.reserved_no for row in mine) == [1, 2, 3]
        assert all(row.number.startswith(series) for row in mine)
    assert {row.attempts for row in current.values()} == {1}
    accepted = {(entry["tenant"], entry["invoice_id"]): entry["number"]
                for entry in mock_integrator.ledger()}
    assert accepted == {key: row.number for key, row in current.items()}


@pytest.mark.usefixtures("series")
async def test_lost_response_is_resent_recognised_as_ours_and_issued_with_its_number(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(lost_response_rate=1.0)
    async with running_worker(worker_settings):
        await publish(worker_settings, invoice("lost-1"))
        await await_until(lambda: all_in(engine, {"lost-1"}, "ISSUED"), 30,
                          message="lost-1 ISSUED")
        mock_integrator.set_faults(lost_response_rate=0.0)
        await publish(worker_settings, invoice("after-1"))
        await await_until(lambda: all_in(engine, {"after-1"}, "ISSUED"), 30,
                          message="after-1 ISSUED")
    stats = mock_integrator.stats()
    assert stats["lost_response"] == 1  # the first send was accepted, its answer lost
    assert stats["duplicate"] >= 1      # the resend met 409 with our invoice_id
    current = await rows(engine)
    assert (current["lost-1"].reserved_no, current["after-1"].reserved_no) == (1, 2)
    assert current["lost-1"].attempts == 1  # one claim: the resend was a retry, not a new claim
    ledger = ledger_by_number(mock_integrator)
    assert ledger[current["lost-1"].number]["invoice_id"] == "lost-1"
    assert_ledger_matches_database(mock_integrator, current)
    assert await counter(engine) == 2


@pytest.mark.usefixtures("series")
async def test_permanent_rejection_keeps_the_number_pinned_and_the_next_invoice_moves_on(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    async with running_worker(worker_settings):
        await publish(worker_settings, invoice("refused", tax_id="0000000000"))
        await await_until(lambda: all_in(engine, {"refused"}, "REJECTED"), 30,
                          message="refused REJECTED")
        await publish(worker_settings, invoice("next-one"))
        await await_until(lambda: all_in(engine, {"next-one"}, "ISSUED"), 30,
                          message="next-one ISSUED")
        # A redelivery of the rejected invoice's message changes nothing and takes no number.
        await publish(worker_settings, invoice("refused", tax_id="0000000000"))
        await publish(worker_settings, invoice("third"))
        await await_until(lambda: all_in(engine, {"third"}, "ISSUED"), 30,
                          message="third ISSUED")
    current = await rows(engine)
    refused = current["refused"]
    assert (refused.status, refused.reserved_no, refused.attempts) == ("REJECTED", 1, 1)
    assert "invalid tax id" in refused.last_error
    assert refused.next_attempt_at is None
    assert (current["next-one"].reserved_no, current["third"].reserved_no) == (2, 3)
    assert mock_integrator.stats()["rejected_tax_id"] == 1
    assert_ledger_matches_database(mock_integrator, current)


@pytest.mark.usefixtures("series")
async def test_a_number_held_by_another_invoice_at_the_integrator_is_an_alarm(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    # Someone else (another system, a restored backup...) already used our first number.
    intruder = mock_integrator.post({"tenant": "acme", "number": "ABC2026000000001",
                                     "invoice_id": "intruder", "document": {}})
    assert intruder.status_code == 201
    async with running_worker(worker_settings):
        await publish(worker_settings, invoice("victim"))
        await await_until(lambda: all_in(engine, {"victim"}, "ERROR"), 30,
                          message="victim in ERROR")
        await publish(worker_settings, invoice("after"))
        await await_until(lambda: all_in(engine, {"after"}, "ISSUED"), 30,
                          message="after ISSUED")
    current = await rows(engine)
    victim = current["victim"]
    assert (victim.number, victim.reserved_no) == ("ABC2026000000001", 1)
    assert victim.last_error.startswith("ALARM: ")
    assert "intruder" in victim.last_error
    assert victim.next_attempt_at is None  # never retried by itself: a person must look
    assert current["after"].reserved_no == 2
    ledger = ledger_by_number(mock_integrator)
    assert ledger["ABC2026000000001"]["invoice_id"] == "intruder"  # untouched
    assert ledger[current["after"].number]["invoice_id"] == "after"


BIG = "x" * (1024 * 1024)

#: (name, body, content type, the part of the reason that says what is wrong)
BAD_MESSAGES: list[tuple[str, bytes, str, str]] = [
    ("not-json", b"{this is not json", "application/json", "not valid JSON"),
    ("wrong-types", json.dumps({**invoice("bad-types"), "invoice_id": 123}).encode(),
     "application/json", "invoice_id"),
    ("missing-fields", json.dumps({"invoice_id": "bad-missing", "tenant": "acme"}).encode(),
     "application/json", "required field is missing"),
    ("negative-quantity", json.dumps(invoice("bad-neg", lines=[
        {"description": "W", "quantity": "-2", "unit_price": "1.00", "vat_rate": "20"}]))
     .encode(), "application/json", "quantity"),
    ("one-megabyte", json.dumps(invoice("bad-big", note=BIG)).encode(), "application/json",
     "bytes"),
    ("unknown-series", json.dumps(invoice("bad-series", series="NOPE")).encode(),
     "application/json", "unknown series"),
    ("wrong-content-type", json.dumps(invoice("bad-ctype")).encode(), "text/plain",
     "content type"),
    ("money-as-float", json.dumps(invoice("bad-float", lines=[
        {"description": "W", "quantity": "1", "unit_price": 10.5, "vat_rate": "20"}])).encode(),
     "application/json", "unit_price"),
    ("empty-lines", json.dumps(invoice("bad-empty", lines=[])).encode(), "application/json",
     "lines"),
    ("invalid-date", json.dumps(invoice("bad-date", issue_date="2026-02-30")).encode(),
     "application/json", "issue_date"),
    ("non-object", b"[1, 2, 3]", "application/json", "JSON object"),
    ("bad-tax-id", json.dumps(invoice("bad-tax", tax_id="12AB45")).encode(),
     "application/json", "tax_id"),
]


@pytest.mark.usefixtures("series")
async def test_twelve_kinds_of_bad_message_are_dead_lettered_and_good_ones_issued(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    good = [f"good-{i}" for i in range(len(BAD_MESSAGES) + 1)]
    async with running_worker(worker_settings, concurrency=4) as worker:
        connection = await aio_pika.connect(worker_settings.amqp_url)
        async with connection:
            channel = await connection.channel()  # publisher confirms on
            for index, (name, body, content_type, _) in enumerate(BAD_MESSAGES):
                await channel.default_exchange.publish(
                    aio_pika.Message(json.dumps(invoice(good[index])).encode(),
                                     content_type="application/json",
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=worker_settings.queue)
                await channel.default_exchange.publish(
                    aio_pika.Message(body, content_type=content_type, message_id=name,
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=worker_settings.queue)
            await channel.default_exchange.publish(
                aio_pika.Message(json.dumps(invoice(good[-1])).encode(),
                                 content_type="application/json"),
                routing_key=worker_settings.queue)
        dead = await drain_dead(worker_settings, len(BAD_MESSAGES))
        await await_until(lambda: all_in(engine, set(good), "ISSUED"), 60,
                          message="good messages ISSUED")
        assert worker.consuming
    reasons = {message.message_id: str(message.headers[HEADER_DEAD_REASON]) for message in dead}
    assert len(dead) == len(BAD_MESSAGES)
    assert set(reasons) == {name for name, *_ in BAD_MESSAGES}
    for name, _body, _content_type, expected in BAD_MESSAGES:
        assert expected in reasons[name], (name, reasons[name])
        assert "12AB45" not in reasons[name]  # no tax id in a reason
    by_id = {message.message_id: message for message in dead}
    assert by_id["one-megabyte"].body == BAD_MESSAGES[4][1]  # the copy keeps the body
    assert by_id["wrong-content-type"].content_type == "text/plain"
    current = await rows(engine)
    assert set(current) == set(good)  # not even a draft for the bad ones
    assert sorted(row.reserved_no for row in current.values()) == list(
        range(1, len(good) + 1))


def messages_counted(outcome: str) -> float:
    """This process's worker metric (shared by the tests of one session: compare deltas)."""
    value = REGISTRY.get_sample_value("gapless_worker_messages_total", {"outcome": outcome})
    return value or 0.0


@pytest.mark.usefixtures("series")
async def test_a_locked_invoice_row_is_requeued_without_consuming_a_number(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    settings = worker_settings.with_overrides(lock_timeout_ms=200)
    message = invoice("held")
    await upsert_draft(ledger(engine), Draft("held", "acme", "ABC", 1, message))
    requeued_before = messages_counted("requeued")

    async def requeued_twice() -> bool:
        return messages_counted("requeued") >= requeued_before + 2

    async with running_worker(settings), engine.connect() as conn:
        trans = await conn.begin()
        await conn.execute(text("SELECT 1 FROM invoices WHERE invoice_id = 'held' FOR UPDATE"))
        await publish(settings, message)
        # The worker keeps finding the row locked: it requeues, and nothing is consumed.
        await await_until(requeued_twice, 30, message="two requeues on the lock timeout")
        assert await counter(engine) == 0
        await trans.rollback()
        await await_until(lambda: all_in(engine, {"held"}, "ISSUED"), 30, message="held ISSUED")
    current = await rows(engine)
    assert (current["held"].reserved_no, current["held"].attempts) == (1, 1)
    assert await counter(engine) == 1


@pytest.mark.usefixtures("series")
async def test_integrator_outage_opens_the_breaker_pauses_consuming_and_resumes_by_itself(
        engine: AsyncEngine, worker_settings: Settings, gapless_env: dict[str, str],
        mock_integrator: MockIntegratorClient) -> None:
    reset_s = 1.0
    settings = worker_settings.with_overrides(breaker_fail_max=3, breaker_reset_timeout_s=reset_s,
                                              retry_attempts=2)
    before = [invoice(f"before-{i}") for i in range(5)]
    during = [invoice(f"during-{i:02d}") for i in range(40)]
    async with running_worker(settings, concurrency=4) as worker:
        await publish(settings, *before)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in before}, "ISSUED"),
                          30, message="first invoices ISSUED")
        calls_before = calls(mock_integrator)
        mock_integrator.set_faults(down=True)
        outage_started = time.monotonic()
        await publish(settings, *during)

        async def paused() -> bool:
            return not worker.consuming

        await await_until(paused, 30, message="consumer paused")
        reserved_at_pause = await counter(engine)
        down_at_pause = mock_integrator.stats()["down"]

        async def probed_three_times() -> bool:
            return bool(mock_integrator.stats()["down"] >= down_at_pause + 3)

        # Stay down for several reset periods: the worker probes (a lookup, no number), finds
        # the integrator still down, and stays paused.
        await await_until(probed_three_times, 30, message="three probes during the outage")
        assert not worker.consuming
        assert await counter(engine) == reserved_at_pause  # no number reserved while open
        outage_s = time.monotonic() - outage_started
        calls_during = calls(mock_integrator) - calls_before
        # In flight when it went down: at most 4 sends x 2 attempts; after that one probe per
        # reset period. Without the breaker, 40 messages would make 80 calls or more.
        assert calls_during <= 4 * 2 + 2 * (outage_s / reset_s + 2), calls_during
        mock_integrator.set_faults(down=False)

        async def resumed() -> bool:
            return worker.consuming

        await await_until(resumed, 30, message="consumer resumed")
        await await_until(lambda: settled(engine, 45), 60, message="every invoice settled")
    current = await rows(engine)
    errors = [row for row in current.values() if row.status == "ERROR"]
    # Only invoices already in flight when the integrator went down can be ERROR; each keeps its
    # number and a due time for recovery. The queue behind them did not turn into ERRORs.
    assert len(errors) <= 4
    assert all(row.next_attempt_at is not None and row.reserved_no for row in errors)
    assert {row.status for row in current.values()} <= {"ISSUED", "ERROR"}
    assert sorted(row.reserved_no for row in current.values()) == list(range(1, 46))
    assert_ledger_matches_database(mock_integrator, current)

    # Recovery owns those: once they are due it resends them with their pinned numbers.
    await await_sql(engine, "SELECT coalesce(bool_and(next_attempt_at <= now()), true) "
                    "FROM invoices WHERE status = 'ERROR'", 30,
                    message="the ERROR invoices to fall due")
    recovery = run_gapless(["recovery", "--once"],
                           {**gapless_env, "GAPLESS_INTEGRATOR_URL": mock_integrator.url})
    assert recovery.returncode == 0, recovery.stderr[-2000:]
    current = await rows(engine)
    assert {row.status for row in current.values()} == {"ISSUED"}
    assert sorted(row.reserved_no for row in current.values()) == list(range(1, 46))
    assert_ledger_matches_database(mock_integrator, current)


def calls(mock: MockIntegratorClient) -> int:
    stats = mock.stats()
    return int(stats["posts"] + stats["lookups"] + stats["down"])


async def settled(engine: AsyncEngine, expected: int) -> bool:
    current = await rows(engine)
    return len(current) == expected and all(row.status in ("ISSUED", "ERROR")
                                            for row in current.values())
