"""Nothing wedges a sealed number (I4): text XML cannot carry and amounts past a document's digits
are refused before any number; every failure after a seal — a document that cannot be rendered,
whatever raised; a malformed, deeply nested or huge integrator answer; an exception in
recovery's own handling — ends the invoice in a state with a recorded reason, ERROR due again
or parked for an operator after ``--max-attempts``, never SENDING for redeliveries to find busy.

Real RabbitMQ, PostgreSQL and the mock integrator over HTTP; the worker and the recovery loop
run in-process. Where a failure cannot be produced from outside any more (the message checks
now refuse what made the renderer raise), the renderer is made to raise by the test.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.constants import HEADER_DEAD_REASON
from gapless.documents import build_issuer
from gapless.integrator.base import load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.integrator.transport import MAX_ANSWER_BYTES
from gapless.issuing import render
from gapless.issuing.outcome import Backoff
from gapless.issuing.render import Renderer, canonical_json
from gapless.ledger.invoices import Draft, stored_payload, upsert_draft
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import define_series, invoice_rows, make_orphans
from tests.worker_support import (
    all_in,
    counter,
    drain_dead,
    publish,
    rows,
    running_worker,
    take_queue,
)

ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul"}
#: A number binary floating point cannot hold (it is 0.1 as a double).
EXACT = "0.1000000000000000055511151231257827"


def ubl_message(invoice_id: str, **changes: Any) -> dict[str, Any]:
    """A message with everything a UBL-TR document needs (tenant acme has an issuer profile)."""
    message: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": "acme", "series": "ABC", "priority": "user",
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}],
    }
    message.update(changes)
    return message


def json_message(invoice_id: str, **changes: Any) -> dict[str, Any]:
    """A message of tenant globex (no issuer profile: its document is the message's JSON)."""
    return {"invoice_id": invoice_id, "tenant": "globex", "series": "GLX", "priority": "user",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}], **changes}


def changed(message: dict[str, Any], path: str, value: str) -> dict[str, Any]:
    """``message`` with the text at the dotted ``path`` replaced."""
    copy = json.loads(json.dumps(message))
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    target = copy
    for part in parents:
        target = target[part]
    target[last] = value
    return copy


@pytest.fixture
async def tenants(engine: AsyncEngine) -> None:
    """acme issues UBL-TR documents in series ABC; globex JSON documents in series GLX."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0, breaker_fail_max=100)


async def publish_raw(settings: Settings, *bodies: bytes) -> None:
    """Publish bodies as they are (the producer API would refuse an invalid message)."""
    async with Publisher(settings) as publisher:
        for body in bodies:
            await publisher.publish(body, priority=4)


async def status_of(engine: AsyncEngine, invoice_id: str) -> Any:
    return (await rows(engine)).get(invoice_id)


async def settled_with_reason(engine: AsyncEngine, invoice_id: str) -> bool:
    row = await status_of(engine, invoice_id)
    return row is not None and row.status == "ERROR" and bool(row.last_error)


# ------------------------------------------------------------------ refused before any number


@pytest.mark.usefixtures("tenants")
async def test_text_xml_cannot_carry_is_dead_lettered_naming_the_field_before_any_number(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    base = ubl_message("x")
    hostile = {
        "bad-note": (changed(base, "note", "see\x01below"), "note", "U+0001"),
        "bad-name": (changed(base, "customer.name", "Ex\x0bample"), "customer.name", "U+000B"),
        "bad-line": (changed(base, "lines.0.description", "Wid\ufffeget"),
                     "lines.0.description", "U+FFFE"),
        "bad-city": (changed(base, "customer.address.city", "Ank\x1fara"),
                     "customer.address.city", "U+001F"),
        "bad-json-note": (json_message("x", note="\x0c"), "note", "U+000C"),
        "huge-line": (changed(changed(base, "lines.0.quantity", "999999999999"),
                              "lines.0.unit_price", "999999999999999"), "lines.0", None),
    }
    bodies = [json.dumps({**message, "invoice_id": invoice_id}).encode()
              for invoice_id, (message, _, _) in hostile.items()]
    async with running_worker(worker_settings) as worker:
        await publish_raw(worker_settings, *bodies)
        await publish(worker_settings, ubl_message("good-1"))
        dead = await drain_dead(worker_settings, len(hostile))
        await await_until(lambda: all_in(engine, {"good-1"}, "ISSUED"), 60,
                          message="good-1 ISSUED")
        assert worker.consuming
    reasons = {json.loads(m.body)["invoice_id"]: str(m.headers[HEADER_DEAD_REASON])
               for m in dead}
    for invoice_id, (_, field, code) in hostile.items():
        expected = (f"{field}: holds a character XML cannot carry ({code})" if code else
                    f"{field}: the line amount has more than 15 digits before the point")
        assert reasons[invoice_id] == expected
    # Nothing reserved for any of them: one number in all, the good invoice's.
    assert await counter(engine) == 1
    assert set(await rows(engine)) == {"good-1"}


# ------------------------------------------------------------- failures after the seal: worker


@pytest.mark.usefixtures("tenants")
async def test_a_stored_message_that_cannot_make_its_document_is_parked_with_its_reason(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    """A draft stored with a note XML cannot carry (before the check existed, say); its message
    arrives and seals it: the document cannot be rendered — the invoice is parked in ERROR with
    the reason, and a redelivery does not find it busy."""
    stored = ubl_message("old-1", note="see\x01below")
    await upsert_draft(ledger(engine), Draft("old-1", "acme", "ABC", 4, stored))
    async with running_worker(worker_settings) as worker:
        await publish(worker_settings, ubl_message("old-1"))
        await await_until(lambda: settled_with_reason(engine, "old-1"), 30,
                          message="old-1 in ERROR with a reason")
        await publish(worker_settings, ubl_message("old-1"), ubl_message("good-1"))
        await await_until(lambda: all_in(engine, {"good-1"}, "ISSUED"), 30,
                          message="good-1 ISSUED")
        assert worker.consuming
    row = await status_of(engine, "old-1")
    assert row.status == "ERROR"
    assert row.last_error == ("DOCUMENT: the stored message cannot make a UBL-TR document: "
                              "note: holds a character XML cannot carry (U+0001)")
    assert row.next_attempt_at is None  # for an operator: rendering again fails again
    assert (row.reserved_no, row.attempts) == (1, 1)


@pytest.mark.usefixtures("tenants")
async def test_any_exception_while_rendering_parks_the_invoice_with_its_reason(
        engine: AsyncEngine, worker_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise ValueError("All strings must be XML compatible")

    monkeypatch.setattr(render, "render", broken)
    async with running_worker(worker_settings) as worker:
        await publish(worker_settings, ubl_message("inv-1"))
        await await_until(lambda: settled_with_reason(engine, "inv-1"), 30,
                          message="inv-1 in ERROR with a reason")
        await publish(worker_settings, ubl_message("inv-1"))  # a redelivery: parked, acked
        await publish(worker_settings, json_message("json-1"))
        await await_until(lambda: all_in(engine, {"json-1"}, "ISSUED"), 30,
                          message="json-1 ISSUED")
        assert worker.consuming
    row = await status_of(engine, "inv-1")
    assert (row.status, row.next_attempt_at) == ("ERROR", None)
    assert row.last_error == ("DOCUMENT: the document cannot be rendered: ValueError: All strings "
                              "must be XML compatible")


@pytest.mark.parametrize(("mode", "reason"), [
    ("deep", "without"),
    ("huge", f"an answer larger than {MAX_ANSWER_BYTES} bytes"),
    ("garbage", "without"),
])
@pytest.mark.usefixtures("tenants")
async def test_a_malformed_integrator_answer_is_an_error_with_its_reason_then_recovery_issues(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        recovery_guard: GuardedIntegrator, mode: str, reason: str) -> None:
    """The integrator accepts the document but answers nested 100 000 deep, with 2 MiB, or not
    JSON at all: the outcome is unknown — ERROR, due again, with the reason — and recovery, once
    the integrator answers sanely, finds it accepted: ISSUED under its number."""
    mock_integrator.set_faults(hostile_answer=mode)
    async with running_worker(worker_settings) as worker:
        await publish(worker_settings, json_message("inv-1"))
        await await_until(lambda: settled_with_reason(engine, "inv-1"), 30,
                          message="inv-1 in ERROR with a reason")
        await publish(worker_settings, json_message("json-2"))
        await await_until(lambda: settled_with_reason(engine, "json-2"), 30,
                          message="json-2 in ERROR with a reason")
        assert worker.consuming
    row = await status_of(engine, "inv-1")
    assert row.next_attempt_at is not None  # due again: a transient failure
    assert reason in row.last_error
    assert row.last_error.startswith("TransientIntegratorError: ")
    assert len(row.last_error) < 500
    assert mock_integrator.stats()["hostile_answers"] >= 2

    mock_integrator.set_faults(hostile_answer="none")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET next_attempt_at = now()"))
    summary = await recovery(engine, worker_settings, guard=recovery_guard).run_round()
    assert summary.outcomes["repaired"] == 2, summary.line()
    current = await rows(engine)
    assert {(row.status, row.reserved_no) for row in current.values()} == {
        ("ISSUED", 1), ("ISSUED", 2)}


# ----------------------------------------------------------- failures after the seal: recovery


def recovery(engine: AsyncEngine, settings: Settings, *, guard: GuardedIntegrator,
             max_attempts: int = 10) -> RecoveryLoop:
    return RecoveryLoop(ledger(engine), guard, RecoveryOptions(
        interval_s=0.05, stuck_after_s=0, batch=10, concurrency=2, max_attempts=max_attempts,
        backoff=Backoff(0.001, 0.001), breaker_reset_s=0.01, gib=None, settings=settings))


@pytest.fixture
async def recovery_guard(worker_settings: Settings) -> AsyncIterator[GuardedIntegrator]:
    guard = GuardedIntegrator(load_integrator(worker_settings), worker_settings,
                              name="test-recovery")
    yield guard
    await guard.aclose()


@pytest.mark.parametrize("failure", ["renderer_raises", "deep_answers"])
async def test_recovery_counts_every_failed_round_and_parks_at_max_attempts(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        recovery_guard: GuardedIntegrator, monkeypatch: pytest.MonkeyPatch,
        failure: str) -> None:
    """Each round's handling fails (its own exception, or an answer nested too deep to read):
    every round is an attempt, recorded with its reason, and at --max-attempts the invoice is
    parked for an operator — not claimed and failed for ever."""
    await define_series(engine)
    await make_orphans(engine, ["inv-1"])  # SENDING, attempt 1, lease stale
    if failure == "renderer_raises":
        async def broken(self: Renderer, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("renderer bug")

        monkeypatch.setattr(Renderer, "document", broken)
        expected = "recovery failed: RuntimeError: renderer bug"
    else:
        mock_integrator.set_faults(hostile_answer="deep")
        expected = "TransientIntegratorError: lookup of "
    loop = recovery(engine, worker_settings, max_attempts=4, guard=recovery_guard)

    async def parked() -> bool:
        await loop.run_round()
        row = (await invoice_rows(engine))["inv-1"]
        return row.status == "ERROR" and row.next_attempt_at is None

    await await_until(parked, 30, interval=0.01, message="inv-1 parked")
    row = (await invoice_rows(engine))["inv-1"]
    assert row.attempts == 4
    assert expected in row.last_error
    assert row.last_error.endswith("(gave up after 4 attempts)")
    summary = await loop.run_round()  # parked: nobody claims it again
    assert summary.claimed == 0


# --------------------------------------------------------------------------- exact numbers


@pytest.mark.usefixtures("tenants")
async def test_the_stored_message_keeps_the_exact_text_of_its_numbers(
        engine: AsyncEngine, worker_settings: Settings, gapless_env: dict[str, str]) -> None:
    body = json.dumps(json_message("exact-1", weight="@", sizes=["@", 2, "@"])).replace(
        '"@"', EXACT).replace(f"{EXACT}]", "1.50e1]").encode()
    async with running_worker(worker_settings):
        await publish_raw(worker_settings, body)
        await await_until(lambda: all_in(engine, {"exact-1"}, "ISSUED"), 30,
                          message="exact-1 ISSUED")
    async with engine.connect() as conn:
        row = (await conn.execute(text(
            "SELECT payload::text AS payload, payload->>'weight' AS weight, d.body "
            "FROM invoices i JOIN invoice_documents d ON d.invoice_pk = i.id "
            "AND d.sha256 = i.document_sha256 WHERE invoice_id = 'exact-1'"))).one()
    assert row.weight == EXACT
    assert f'"sizes": [{EXACT}, 2, 15.0]' in row.payload
    stored = stored_payload(row.payload)
    assert stored["weight"] == Decimal(EXACT)
    # The document sent is the canonical JSON of what is stored: a resend renders the same bytes.
    assert bytes(row.body) == canonical_json(stored)
    assert f'"weight":{EXACT}'.encode() in bytes(row.body)
    # The chain's seal hashed the same message the offline check reads.
    result = run_gapless(["chain", "verify"], gapless_env)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.usefixtures("tenants")
async def test_a_producer_float_is_stored_as_the_number_its_json_says(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    async with running_worker(worker_settings):
        await publish(worker_settings, json_message("float-1", ratio=0.1, big=1e99))
        await await_until(lambda: all_in(engine, {"float-1"}, "ISSUED"), 30,
                          message="float-1 ISSUED")
    async with engine.connect() as conn:
        ratio, big = (await conn.execute(text(
            "SELECT payload->>'ratio', payload->>'big' FROM invoices"))).one()
    assert ratio == "0.1"
    assert big == "1" + "0" * 99



# ------------------------------------------------------------------------------ the API


@pytest.mark.usefixtures("tenants")
async def test_the_api_refuses_text_xml_cannot_carry_and_publishes_numbers_exactly(
        api_servers: ApiServers, settings: Settings) -> None:
    token = "t" * 24
    url, _ = api_servers.start(token)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    refused = json.dumps(ubl_message("api-bad", note="see\x01below")).encode()
    exact = json.dumps(json_message("api-exact", weight="@")).replace('"@"', EXACT).encode()
    async with httpx.AsyncClient(timeout=15) as http:
        answer = await http.post(f"{url}/v1/invoices", content=refused, headers=headers)
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"] == "note: holds a character XML cannot carry (U+0001)"
        accepted = await http.post(f"{url}/v1/invoices", content=exact, headers=headers)
        assert accepted.status_code == 202, accepted.text
    [queued] = await take_queue(settings)
    assert queued.message_id == "api-exact"
    assert f'"weight":{EXACT}'.encode() in queued.body
