"""Every outcome of an integrator call, settled the same way by the worker and by recovery.

Each test runs twice (``path``): through the worker (in-process, a message published to real
RabbitMQ) and through recovery (the same invoice sealed and left SENDING, one in-process round of
the real loop). Both meet the real mock integrator over HTTP and real PostgreSQL, and both must
leave the invoice in the same state (:mod:`gapless.issuing.outcome`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from gapless.documents import build_issuer
from gapless.integrator.base import load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.issuing.outcome import Backoff
from gapless.ledger.invoices import ClaimKind, Draft, claim_for_sending, upsert_draft
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.message import validate_message
from gapless.numbers import build_series_spec
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions, RoundSummary
from gapless.settings import Settings
from gapless.worker.consumer import Worker
from tests.helpers import await_until, ledger, today
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import invoice_rows
from tests.worker_support import counter, ledger_by_number, publish, running_worker

PATHS = ("worker", "recovery")
FIRST_NUMBER = "ABC2026000000001"
ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
          "postal_zone": "34716", "email": "efatura@acme.example"}


def sale(invoice_id: str, *, tax_id: str = "1234567890") -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": "acme", "series": "ABC", "priority": "user",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": tax_id, "name": "Example Ltd", "tax_office": "Çankaya",
                         "address": {"street": "Atatürk Blv. 5", "district": "Çankaya",
                                     "city": "Ankara", "postal_zone": "06690",
                                     "country": "Türkiye"}},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))


@pytest.fixture
def base_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0)


@dataclass
class Run:
    """What one path did: the worker (None on the recovery path) and recovery's rounds."""

    worker: Worker | None = None
    rounds: list[RoundSummary] = field(default_factory=list)
    loop: RecoveryLoop | None = None


async def seal(engine: AsyncEngine, message: dict[str, Any]) -> None:
    """The invoice as a worker that died after the seal leaves it: number pinned, SENDING."""
    payload = validate_message(message).payload()
    await upsert_draft(ledger(engine), Draft(message["invoice_id"], "acme", "ABC", 4, payload))
    claim = await claim_for_sending(ledger(engine), message["invoice_id"], tenant="acme",
                                    lease_s=300, lock_timeout_ms=5000)
    assert claim.kind is ClaimKind.SEND


async def status_of(engine: AsyncEngine, invoice_id: str) -> str | None:
    row = (await invoice_rows(engine)).get(invoice_id)
    return None if row is None else str(row.status)


@asynccontextmanager
async def recovery_loop(engines: Callable[..., AsyncEngine],
                        settings: Settings) -> AsyncIterator[RecoveryLoop]:
    guard = GuardedIntegrator(load_integrator(settings), settings, name="test-outcomes")
    try:
        yield RecoveryLoop(ledger(engines("recovery")), guard, RecoveryOptions(
            interval_s=0.1, stuck_after_s=0, concurrency=1, gib=None,
            breaker_reset_s=settings.breaker_reset_timeout_s, settings=settings))
    finally:
        await guard.aclose()


async def settle(path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
                 settings: Settings, message: dict[str, Any], status: str) -> Run:
    """Send ``message``'s invoice through ``path`` until it is ``status``."""
    invoice_id = message["invoice_id"]

    async def reached() -> bool:
        return await status_of(engine, invoice_id) == status

    run = Run()
    if path == "worker":
        async with running_worker(settings, concurrency=1) as worker:
            run.worker = worker
            await publish(settings, message)
            await await_until(reached, 30, message=f"{invoice_id} {status}")
        return run
    await seal(engine, message)
    async with recovery_loop(engines, settings) as loop:
        run.rounds.append(await loop.run_round())
    assert await reached(), await invoice_rows(engine)
    return run


# --------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("series")
async def test_accepted_is_issued_with_the_integrators_reference(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    await settle(path, engine, engines, base_settings, sale("ok-1"), "ISSUED")

    row = (await invoice_rows(engine))["ok-1"]
    assert (row.number, row.attempts, row.last_error) == (FIRST_NUMBER, 1 + (path == "recovery"),
                                                         None)
    entry = ledger_by_number(mock_integrator)[FIRST_NUMBER]
    assert (entry["invoice_id"], entry["ref"]) == ("ok-1", row.integrator_ref)


@pytest.mark.usefixtures("series")
async def test_our_own_duplicate_is_issued(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    # The first send is accepted and its answer lost; the guard's resend meets 409 with our
    # invoice_id.
    mock_integrator.set_faults(lost_response_rate=1.0)
    await settle(path, engine, engines, base_settings, sale("mine-1"), "ISSUED")

    stats = mock_integrator.stats()
    assert (stats["lost_response"], stats["duplicate"], stats["ledger_size"]) == (1, 1, 1)
    row = (await invoice_rows(engine))["mine-1"]
    assert ledger_by_number(mock_integrator)[row.number]["ref"] == row.integrator_ref


@pytest.mark.usefixtures("series")
async def test_a_number_held_by_another_invoice_is_an_alarm_never_retried(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    intruder = mock_integrator.post({"tenant": "acme", "number": FIRST_NUMBER,
                                     "invoice_id": "intruder", "document": {}})
    assert intruder.status_code == 201
    await settle(path, engine, engines, base_settings, sale("victim"), "ERROR")

    row = (await invoice_rows(engine))["victim"]
    assert row.number == FIRST_NUMBER
    assert row.last_error == (f"ALARM: number {FIRST_NUMBER} is held by invoice 'intruder' "
                              "at the integrator")
    assert row.next_attempt_at is None  # a person must look
    assert ledger_by_number(mock_integrator)[FIRST_NUMBER]["invoice_id"] == "intruder"


@pytest.mark.usefixtures("series")
async def test_a_permanent_rejection_is_rejected_with_the_number_pinned(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    await settle(path, engine, engines, base_settings, sale("refused", tax_id="0000000000"),
                 "REJECTED")

    row = (await invoice_rows(engine))["refused"]
    assert (row.number, row.next_attempt_at) == (FIRST_NUMBER, None)
    assert "invalid tax id" in row.last_error
    assert mock_integrator.ledger() == []


@pytest.mark.usefixtures("series")
async def test_a_transient_failure_is_error_due_after_the_one_backoff(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(transient_rate=1.0)
    settings = base_settings.with_overrides(retry_attempts=1, breaker_fail_max=50)
    started = datetime.now(UTC)
    await settle(path, engine, engines, settings, sale("flaky"), "ERROR")
    finished = datetime.now(UTC)

    row = (await invoice_rows(engine))["flaky"]
    assert row.attempts == (1 if path == "worker" else 2)  # recovery's claim is attempt 2
    assert row.last_error.startswith("TransientIntegratorError: ")
    # Backoff(): min(900, 10·2^(attempt-1)) seconds, drawn from the upper half.
    full = min(Backoff().cap_s, Backoff().base_s * 2 ** (row.attempts - 1))
    assert started + timedelta(seconds=full / 2) <= row.next_attempt_at
    assert row.next_attempt_at <= finished + timedelta(seconds=full)


@pytest.mark.usefixtures("series")
async def test_refused_credentials_reject_nothing_spend_nothing_and_stop_taking_work(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(unauthorized=True)
    settings = base_settings.with_overrides(breaker_reset_timeout_s=0.3)
    refused = "ERROR" if path == "worker" else "SENDING"
    with structlog.testing.capture_logs() as logs:
        if path == "worker":
            async with running_worker(settings, concurrency=1) as worker:
                await publish(settings, sale("k-1"))

                async def paused() -> bool:
                    return not worker.consuming and await status_of(engine, "k-1") == "ERROR"

                await await_until(paused, 30, message="the worker paused, k-1 ERROR")
                await publish(settings, sale("k-2"))
                row = (await invoice_rows(engine))["k-1"]
                assert await counter(engine) == 1  # nothing more sealed while refused
                # Due once the breaker may half-open (and after the backoff), never parked.
                assert row.next_attempt_at is not None
                mock_integrator.set_faults(unauthorized=False)

                async def resumed() -> bool:
                    return await status_of(engine, "k-2") == "ISSUED"

                await await_until(resumed, 30, message="the worker resumed")
        else:
            await seal(engine, sale("k-1"))
            before = (await invoice_rows(engine))["k-1"]
            async with recovery_loop(engines, settings) as loop:
                first = await loop.run_round()
                row = (await invoice_rows(engine))["k-1"]
                # Put back exactly as it was: no attempt spent, no ERROR written.
                assert (row.status, row.attempts, row.sending_since) == (
                    Status.SENDING, before.attempts, before.sending_since)
                assert (first.claimed, first.skipped) == (1, "credentials_refused")
                asked = mock_integrator.stats()["unauthorized"]
                second = await loop.run_round()
                # Backed off: one probe, no claim.
                assert (second.claimed, second.skipped) == (0, "credentials_refused")
                assert mock_integrator.stats()["unauthorized"] == asked + 1
                mock_integrator.set_faults(unauthorized=False)
                third = await loop.run_round()
                assert (third.skipped, third.outcomes["resent"]) == (None, 1)
                assert await status_of(engine, "k-1") == "ISSUED"

    assert row.status == refused
    assert row.attempts == 1
    assert "REJECTED" not in {r.status for r in (await invoice_rows(engine)).values()}
    alarms = [e for e in logs if e["event"] == "integrator_credentials_refused"]
    assert alarms
    assert {e["log_level"] for e in alarms} == {"error"}
    assert all("credentials" in e["hint"] for e in alarms)


@pytest.fixture
async def profiled(engine: AsyncEngine, series: None) -> None:
    await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))


@pytest.mark.usefixtures("profiled")
async def test_a_stored_message_that_cannot_make_its_document_waits_for_an_operator(
        path: str, engine: AsyncEngine, engines: Callable[..., AsyncEngine],
        base_settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    # Sealed, then its stored message lost what the UBL-TR document needs; the lease is stale,
    # so a redelivery (worker) or a round (recovery) takes it over and renders it again.
    await seal(engine, sale("broken"))
    async with engine.begin() as conn:
        await conn.execute(text(
            "UPDATE invoices SET payload = payload #- '{customer,address}', "
            "sending_since = now() - interval '1 hour' WHERE invoice_id = 'broken'"))
    message = sale("broken")
    if path == "worker":
        async with running_worker(base_settings, concurrency=1):
            await publish(base_settings, message)

            async def parked() -> bool:
                return await status_of(engine, "broken") == "ERROR"

            await await_until(parked, 30, message="broken parked in ERROR")
    else:
        async with recovery_loop(engines, base_settings) as loop:
            summary = await loop.run_round()
        assert summary.outcomes["parked"] == 1

    row = (await invoice_rows(engine))["broken"]
    assert (row.number, row.next_attempt_at) == (FIRST_NUMBER, None)
    assert row.last_error.startswith("DOCUMENT: the stored message cannot make a UBL-TR document")
    assert mock_integrator.stats()["posts"] == 0  # nothing was sent
