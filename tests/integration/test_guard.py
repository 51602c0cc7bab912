"""``GuardedIntegrator`` (breaker + retries) against the real mock integrator over HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gapless.integrator.base import (
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    Integrator,
    PermanentRejection,
    Receipt,
    TransientIntegratorError,
)
from gapless.integrator.guard import GuardedIntegrator, IntegratorUnavailable
from gapless.integrator.http import HttpIntegrator
from gapless.settings import Settings
from tests.helpers import await_until, json_document
from tests.mock_client import MockIntegratorClient

GuardFactory = Callable[..., GuardedIntegrator]


def document(number: str, invoice_id: str | None = None, *,
             tax_id: str = "1234567890") -> Document:
    return json_document("acme", number, invoice_id or f"inv-{number}",
                         {"customer": {"tax_id": tax_id, "name": "Example Ltd"}})


@pytest.fixture
async def make_guard(mock_integrator: MockIntegratorClient) -> AsyncIterator[GuardFactory]:
    """Guards on this test's mock; fast breaker and retries unless overridden."""
    guards: list[GuardedIntegrator] = []

    def make(**overrides: Any) -> GuardedIntegrator:
        fields: dict[str, Any] = {
            "integrator_url": mock_integrator.url, "integrator_timeout_s": 10.0,
            "breaker_fail_max": 3, "breaker_reset_timeout_s": 0.5,
            "retry_attempts": 1, "retry_wait_s": 0.01, "retry_max_s": 5.0, **overrides}
        settings = Settings(**fields)
        guard = GuardedIntegrator(HttpIntegrator(settings), settings,
                                  name=f"test-{uuid.uuid4().hex[:8]}")
        guards.append(guard)
        return guard

    yield make
    for guard in guards:
        await guard.aclose()


def gauge(guard: GuardedIntegrator) -> float | None:
    return REGISTRY.get_sample_value("gapless_breaker_state", {"name": guard.name})


def calls(guard: GuardedIntegrator, operation: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value("gapless_integrator_calls_total", {
        "name": guard.name, "operation": operation, "outcome": outcome})
    return value or 0.0


async def trip(guard: GuardedIntegrator, mock: MockIntegratorClient, fail_max: int = 3) -> None:
    mock.set_faults(down=True)
    for i in range(fail_max):
        with pytest.raises(TransientIntegratorError) as failed:
            await guard.send(document(f"TRIP{i}"))
        assert not isinstance(failed.value, IntegratorUnavailable)
    assert guard.state == "open"


async def trial_in_flight(guard: GuardedIntegrator, mock: MockIntegratorClient, *,
                          latency_ms: int) -> tuple[asyncio.Task[Receipt], int]:
    """Trip the breaker, bring the integrator back at ``latency_ms``, wait for the reset timeout
    and start the half-open trial call; returns it once it reached the mock, with the mock's
    POST count before it."""
    await trip(guard, mock)
    mock.set_faults(down=False, latency_ms=[latency_ms, latency_ms])
    await await_until(lambda: asyncio.sleep(0, guard.accepting()), 5,
                      message="reset timeout to elapse")
    posts = mock.stats()["posts"]
    trial = asyncio.create_task(guard.send(document("TRIAL")))
    await await_until(lambda: asyncio.sleep(0, mock.stats()["posts"] > posts), 5,
                      message="trial call to reach the mock")
    return trial, posts


async def test_is_an_integrator(make_guard: GuardFactory) -> None:
    guard = make_guard()
    assert isinstance(guard, Integrator)
    assert (guard.state, guard.accepting(), gauge(guard)) == ("closed", True, 0)


async def test_breaker_opens_after_fail_max_failures_and_then_fails_fast_without_calling(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(breaker_reset_timeout_s=60)
    await trip(guard, mock_integrator)
    assert gauge(guard) == 2
    assert guard.accepting() is False
    reached = mock_integrator.stats()["down"]
    assert reached == 3

    for i in range(20):
        with pytest.raises(IntegratorUnavailable):
            await guard.send(document(f"N{i}"))
    with pytest.raises(IntegratorUnavailable):
        await guard.lookup("acme", "N1")
    assert mock_integrator.stats()["down"] == reached  # not one call while open
    assert calls(guard, "send", "transient") == 3
    assert calls(guard, "send", "unavailable") == 20
    assert calls(guard, "lookup", "unavailable") == 1


async def test_one_trial_when_half_open_and_closed_when_the_integrator_is_back(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard()
    trial, posts = await trial_in_flight(guard, mock_integrator, latency_ms=300)
    assert (guard.state, gauge(guard), guard.accepting()) == ("half-open", 1, False)
    # While the trial is in flight every other call fails fast.
    others = await asyncio.gather(*(guard.send(document(f"N{i}")) for i in range(10)),
                                  return_exceptions=True)
    assert all(isinstance(result, IntegratorUnavailable) for result in others)
    receipt = await trial
    assert isinstance(receipt, Receipt)
    assert mock_integrator.stats()["posts"] == posts + 1
    assert (guard.state, gauge(guard), guard.accepting()) == ("closed", 0, True)

    mock_integrator.set_faults(latency_ms=[0, 0])
    assert isinstance(await guard.send(document("AFTER")), Receipt)


async def test_a_failed_trial_opens_the_breaker_again(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard()
    await trip(guard, mock_integrator)
    await await_until(lambda: asyncio.sleep(0, guard.accepting()), 5,
                      message="reset timeout to elapse")
    with pytest.raises(TransientIntegratorError) as failed:
        await guard.send(document("TRIAL"))
    assert not isinstance(failed.value, IntegratorUnavailable)
    assert (guard.state, gauge(guard), guard.accepting()) == ("open", 2, False)
    down = mock_integrator.stats()["down"]
    with pytest.raises(IntegratorUnavailable):
        await guard.send(document("N1"))
    assert mock_integrator.stats()["down"] == down


async def test_business_outcomes_never_open_the_breaker(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(breaker_fail_max=2)
    await guard.send(document("N1", "inv-1"))
    for _ in range(3):
        with pytest.raises(PermanentRejection):
            await guard.send(document("BAD", tax_id="0000000000"))
        with pytest.raises(DuplicateOfMine):
            await guard.send(document("N1", "inv-1"))
        with pytest.raises(DuplicateOfAnother):
            await guard.send(document("N1", "inv-2"))
    assert guard.state == "closed"
    assert calls(guard, "send", "rejected") == 3
    assert calls(guard, "send", "duplicate_of_mine") == 3
    assert calls(guard, "send", "duplicate_of_another") == 3


async def test_only_transient_errors_are_retried(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(retry_attempts=3, breaker_fail_max=50)
    mock_integrator.set_faults(transient_rate=1.0)
    with pytest.raises(TransientIntegratorError):
        await guard.send(document("T1"))
    mock_integrator.set_faults(transient_rate=0.0)
    await guard.send(document("N1", "inv-1"))
    with pytest.raises(PermanentRejection):
        await guard.send(document("BAD", tax_id="0000000000"))
    with pytest.raises(DuplicateOfAnother):
        await guard.send(document("N1", "inv-2"))
    per_number = mock_integrator.stats()["posts_per_number"]
    assert per_number["acme/T1"] == 3  # bounded attempts
    assert per_number["acme/BAD"] == 1
    assert per_number["acme/N1"] == 2  # one accepted, one duplicate: neither retried


async def test_a_retry_after_a_lost_response_finds_its_own_document(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(retry_attempts=3)
    mock_integrator.set_faults(lost_response_rate=1.0)
    with pytest.raises(DuplicateOfMine) as mine:
        await guard.send(document("N1", "inv-1"))
    assert mine.value.receipt.invoice_id == "inv-1"
    assert mock_integrator.stats()["posts_per_number"]["acme/N1"] == 2
    assert [e["invoice_id"] for e in mock_integrator.ledger()] == ["inv-1"]


async def test_retries_stop_when_the_breaker_opens(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(retry_attempts=5, breaker_fail_max=2, breaker_reset_timeout_s=60)
    mock_integrator.set_faults(down=True)
    with pytest.raises(IntegratorUnavailable):
        await guard.send(document("N1"))
    assert mock_integrator.stats()["down"] == 2
    assert calls(guard, "send", "unavailable") == 1  # failed fast: not retried


async def test_retries_stop_after_the_total_time_budget(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(retry_attempts=1000, retry_max_s=0.5, retry_wait_s=0.05,
                       breaker_fail_max=1000)
    mock_integrator.set_faults(transient_rate=1.0)
    with pytest.raises(TransientIntegratorError):
        await guard.send(document("N1"))
    assert 1 < mock_integrator.stats()["posts"] < 1000


async def test_cancelled_call_is_not_retried_and_does_not_touch_the_breaker(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(breaker_fail_max=2, retry_attempts=1, breaker_reset_timeout_s=60)
    mock_integrator.set_faults(down=True)
    with pytest.raises(TransientIntegratorError):
        await guard.send(document("F1"))  # failure 1 of 2
    mock_integrator.set_faults(down=False, latency_ms=[10_000, 10_000])

    task = asyncio.create_task(guard.send(document("SLOW")))
    await await_until(lambda: asyncio.sleep(0, mock_integrator.stats()["posts"] == 2), 5,
                      message="slow call to reach the mock")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Not a failure: a second failure would have opened the breaker at fail_max=2.
    assert guard.state == "closed"
    assert calls(guard, "send", "cancelled") == 1
    # Not a success either: the earlier failure still counts, so one more opens the breaker.
    mock_integrator.set_faults(down=True, latency_ms=[0, 0])
    with pytest.raises(TransientIntegratorError):
        await guard.send(document("F2"))
    assert guard.state == "open"
    assert mock_integrator.stats()["posts_per_number"]["acme/SLOW"] == 1


async def test_a_cancelled_trial_leaves_the_breaker_half_open_for_the_next_call(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard()
    trial, _ = await trial_in_flight(guard, mock_integrator, latency_ms=10_000)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert (guard.state, guard.accepting()) == ("half-open", True)
    mock_integrator.set_faults(latency_ms=[0, 0])
    assert isinstance(await guard.send(document("NEXT")), Receipt)
    assert guard.state == "closed"


async def test_lookup_goes_through_the_breaker_and_the_metrics(
        make_guard: GuardFactory, mock_integrator: MockIntegratorClient) -> None:
    guard = make_guard(breaker_fail_max=2, breaker_reset_timeout_s=60)
    receipt = await guard.send(document("N1"))
    assert await guard.lookup("acme", "N1") == receipt
    assert await guard.lookup("acme", "N2") is None
    assert calls(guard, "lookup", "ok") == 1
    assert calls(guard, "lookup", "not_found") == 1
    assert await guard.lookup_uuid("acme", document("N1").uuid) == receipt
    assert await guard.lookup_uuid("acme", document("N2").uuid) is None
    assert calls(guard, "lookup_uuid", "ok") == 1
    assert calls(guard, "lookup_uuid", "not_found") == 1
    assert REGISTRY.get_sample_value("gapless_integrator_latency_seconds_count", {
        "name": guard.name, "operation": "lookup"}) == 2
    mock_integrator.set_faults(down=True)
    for _ in range(2):
        with pytest.raises(TransientIntegratorError):
            await guard.lookup("acme", "N1")
    assert guard.state == "open"
