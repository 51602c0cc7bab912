"""The guard's retry loop follows tenacity's own loop to the attempt and to the sleep.

``GuardedIntegrator._retrying`` runs the loop itself (so a first attempt that answers pays for
no retry machinery) on tenacity's policy objects. Here the same failures go through the guard
and through ``tenacity.AsyncRetrying`` built from the same policy, with the same random seed and
recorded sleeps: the attempts made, the sleeps between them and the outcome must be the same.
The breaker, the total time budget and the real integrator are covered in
tests/integration/test_guard.py.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from gapless.integrator.base import PermanentRejection, Receipt, TransientIntegratorError
from gapless.integrator.guard import GuardedIntegrator
from gapless.settings import Settings
from tests.helpers import json_document

DOCUMENT = json_document("acme", "ABC2026000000001", "inv-1", {"customer": {"name": "X"}})


class Scripted:
    """An integrator whose first ``failures`` sends fail with ``error``, then answers."""

    def __init__(self, failures: int, error: type[Exception] = TransientIntegratorError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def send(self, document: Any) -> Receipt:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"scripted failure {self.calls}")
        return Receipt(document.tenant, document.number, document.invoice_id, "ref-1",
                       document.uuid)

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        raise AssertionError("not used")

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        raise AssertionError("not used")

    async def aclose(self) -> None:
        return None


async def outcome_of(send: Any) -> str:
    try:
        receipt = await send(DOCUMENT)
    except Exception as exc:
        return type(exc).__name__
    return f"receipt {receipt.ref}"


@pytest.mark.parametrize(("attempts", "failures", "error"), [
    (5, 0, TransientIntegratorError),   # answers at once: no sleep
    (5, 2, TransientIntegratorError),   # two retries, then the receipt
    (5, 4, TransientIntegratorError),   # the last attempt answers
    (5, 9, TransientIntegratorError),   # attempts run out: the last error is raised
    (1, 3, TransientIntegratorError),   # no retries configured
    (5, 3, PermanentRejection),         # a business answer is never retried
])
async def test_the_guard_retries_on_tenacitys_schedule(
        monkeypatch: pytest.MonkeyPatch, attempts: int, failures: int,
        error: type[Exception]) -> None:
    settings = Settings(retry_attempts=attempts, retry_wait_s=0.05, retry_max_s=3600.0,
                        breaker_fail_max=1000)
    guard_sleeps: list[float] = []
    reference_sleeps: list[float] = []

    async def record_guard_sleep(seconds: float) -> None:
        guard_sleeps.append(seconds)

    async def record_reference_sleep(seconds: float) -> None:
        reference_sleeps.append(seconds)

    guard_integrator = Scripted(failures, error)
    guard = GuardedIntegrator(guard_integrator, settings, name=f"test-{uuid.uuid4().hex[:8]}")
    monkeypatch.setattr(asyncio, "sleep", record_guard_sleep)
    random.seed(12345)
    guard_outcome = await outcome_of(guard.send)
    monkeypatch.undo()

    reference_integrator = Scripted(failures, error)
    reference = AsyncRetrying(
        retry=retry_if_exception_type(TransientIntegratorError),
        stop=stop_after_attempt(attempts) | stop_before_delay(3600.0),
        wait=wait_random_exponential(multiplier=0.05, max=3600.0),
        reraise=True, sleep=record_reference_sleep)
    random.seed(12345)
    reference_outcome = await outcome_of(lambda doc: reference(reference_integrator.send, doc))

    assert guard_integrator.calls == reference_integrator.calls
    assert guard_integrator.calls == (min(failures + 1, attempts)
                                      if error is TransientIntegratorError else 1)
    assert guard_sleeps == reference_sleeps
    assert len(guard_sleeps) == guard_integrator.calls - 1
    assert guard_outcome == reference_outcome
