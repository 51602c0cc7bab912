"""The just-in-time issuing flow: one delivery in, one verdict (ack, requeue, dead-letter) out.

Each step is its own short transaction over the domain operations of :mod:`gapless.invoices`;
no transaction is open while the integrator is called (I5):

1. parse and validate the body (invalid: dead-letter with the reason);
2. upsert the draft by ``invoice_id`` — a duplicate message maps to the same row;
3. claim it: lock the row, pin a number if it has none, take the sending lease, **commit**;
4. call the integrator through the guard (retries and the circuit breaker live there);
5. record the outcome (ISSUED, ERROR with a due time, REJECTED, or the duplicate alarm).

The consumer acks only after the verdict's outcome has committed. The database decides every
repeat: a redelivered or duplicated message finds the row ISSUED (ack), SENDING under someone's
fresh lease (ack; the owner or recovery finishes it), parked in ERROR/REJECTED (ack; recovery or an
operator owns it), or SENDING under a stale lease (taken over with the *same* number).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import TERMINAL_STATUSES, Status
from gapless.errors import ReservationLockTimeout, UnknownSeriesError
from gapless.integrator.base import (
    DuplicateOfAnother,
    DuplicateOfMine,
    PermanentRejection,
    Receipt,
    TransientIntegratorError,
)
from gapless.invoices import (
    Claim,
    ClaimKind,
    Draft,
    Sending,
    claim_for_sending,
    mark_alarm,
    mark_error,
    mark_issued,
    mark_rejected,
    upsert_draft,
)
from gapless.logging import get_logger
from gapless.message import InvalidMessage, parse_message, priority_of
from gapless.settings import Settings
from worker import metrics
from worker.errors import is_database_unavailable
from worker.faults import Faults

log = get_logger("gapless.worker")

#: ERROR invoices are due again after this backoff (doubling per attempt, capped, jittered).
RETRY_BASE_S = 5.0
RETRY_CAP_S = 300.0
#: How long an outcome write keeps retrying a lost database connection before giving up (the
#: invoice then stays SENDING and recovery settles it once the lease is stale).
OUTCOME_WRITE_BUDGET_S = 60.0
#: Claims of one series a process runs at once: one holding the counter row, one queued behind
#: it in PostgreSQL so the row never idles between them; the rest wait in the process.
CLAIMS_PER_SERIES = 2


class GuardLike(Protocol):
    """What the flow needs of :class:`gapless.integrator.guard.GuardedIntegrator`."""

    async def send(self, document: Any) -> Receipt: ...

    def accepting(self) -> bool: ...


class Action(StrEnum):
    ACK = "ack"
    REQUEUE = "requeue"          # nack with requeue: nothing was consumed, try again later
    DEAD_LETTER = "dead_letter"  # publish to <prefix>.dead with the reason, then ack


@dataclass(frozen=True)
class Verdict:
    """What the consumer does with a delivery, and why (``outcome`` is the metrics label)."""

    action: Action
    outcome: str
    reason: str | None = None
    #: The breaker refuses calls: stop taking messages until it is ready to half-open.
    pause: bool = False
    #: Wait this long before the requeue (database trouble), so a redelivery is not a hot loop.
    backoff_s: float = 0.0


@dataclass(frozen=True)
class Delivery:
    """The parts of an AMQP delivery the flow reads."""

    body: bytes
    content_type: str | None
    priority: int | None
    redelivered: bool = False


def retry_delay(attempt: int, *, base: float = RETRY_BASE_S, cap: float = RETRY_CAP_S) -> float:
    """Seconds until an ERROR invoice is due again: base·2^(attempt-1), capped, ±20 % jitter."""
    exponent = max(0, min(attempt - 1, 16))
    delay = min(cap, base * float(1 << exponent))
    return delay * random.uniform(0.8, 1.2)


class IssuingFlow:
    """The issuing steps for one worker process (shared by its concurrent deliveries)."""

    def __init__(self, engine: AsyncEngine, guard: GuardLike, settings: Settings, *,
                 faults: Faults | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.engine = engine
        self.guard = guard
        self.settings = settings
        self.faults = faults or Faults()
        self._stopping = stopping
        self._gates: dict[tuple[str, str], asyncio.Semaphore] = {}

    async def handle(self, delivery: Delivery) -> Verdict:
        """Run the flow for one delivery and say what to do with it.

        Raises only for the unexpected (a bug, or the database unreachable before anything was
        recorded) and on cancellation; the consumer then requeues, or leaves the message unacked.
        """
        try:
            message = parse_message(delivery.body, delivery.content_type)
        except InvalidMessage as exc:
            return Verdict(Action.DEAD_LETTER, "dead_lettered", reason=exc.reason)
        priority = priority_of(delivery.priority, message.priority)
        structlog.contextvars.bind_contextvars(invoice_id=message.invoice_id,
                                               tenant=message.tenant, series=message.series)
        log.info("message_received", priority=priority, redelivered=delivery.redelivered)

        try:
            draft = await upsert_draft(self.engine, Draft(
                invoice_id=message.invoice_id, tenant=message.tenant, series=message.series,
                priority=priority, payload=message.payload()))
        except UnknownSeriesError as exc:
            return Verdict(Action.DEAD_LETTER, "dead_lettered", reason=str(exc))
        if draft.status in TERMINAL_STATUSES:
            log.info("message_already_final", status=draft.status.value)
            return Verdict(Action.ACK, "already_final")
        if draft.status in (Status.ERROR, Status.REJECTED):
            log.info("invoice_parked", status=draft.status.value)
            return Verdict(Action.ACK, "parked")
        async with self._gate(message.tenant, message.series):
            if self._stopping():
                # No number is reserved once a stop is requested; the message waits in the queue.
                return self._requeue("worker_stopping")
            if not self.guard.accepting():
                # Breaker open: reserving now would only turn the queue into ERRORs.
                return self._requeue("breaker_open", pause=True)
            verdict_or_claim = await self._claim(message.invoice_id)
        if isinstance(verdict_or_claim, Verdict):
            return verdict_or_claim
        return await self._after_claim(verdict_or_claim)

    def _gate(self, tenant: str, series: str) -> asyncio.Semaphore:
        """At most CLAIMS_PER_SERIES claims of one series in flight from this process.

        Claims of one series serialise on its counter row anyway. Letting every delivery wait
        for that row inside PostgreSQL would park a pooled connection per waiter — starving
        the outcome writes that free the slots — and lengthen the lock queue; they wait here
        instead, holding nothing.
        """
        gate = self._gates.get((tenant, series))
        if gate is None:
            gate = self._gates[(tenant, series)] = asyncio.Semaphore(CLAIMS_PER_SERIES)
        return gate

    async def _claim(self, invoice_id: str) -> Claim | Verdict:
        started = time.perf_counter()
        try:
            return await claim_for_sending(
                self.engine, invoice_id, lease_s=self.settings.lease_s,
                lock_timeout_ms=self.settings.lock_timeout_ms,
                before_commit=self._before_reserve_commit if self.faults.active else None)
        except ReservationLockTimeout:
            log.warning("reservation_lock_timeout", lock_timeout_ms=self.settings.lock_timeout_ms)
            return self._requeue("lock_timeout", backoff_s=1.0)
        finally:
            metrics.RESERVATION_SECONDS.observe(time.perf_counter() - started)

    async def _after_claim(self, claim: Claim) -> Verdict:
        if claim.kind is ClaimKind.FINAL:
            log.info("message_already_final", status=claim.status.value)
            return Verdict(Action.ACK, "already_final")
        if claim.kind is ClaimKind.BUSY:
            log.info("invoice_busy")
            return Verdict(Action.ACK, "busy")
        if claim.kind is ClaimKind.PARKED:
            log.info("invoice_parked", status=claim.status.value)
            return Verdict(Action.ACK, "parked")
        sending = claim.sending
        assert sending is not None  # SEND always carries the lease
        structlog.contextvars.bind_contextvars(number=sending.number, attempt=sending.attempt)
        if claim.fresh_number:
            log.info("number_reserved", reserved_no=sending.reserved_no)
        else:
            log.info("lease_taken_over", reserved_no=sending.reserved_no)
        await self.faults.reached("after_reserve_commit")
        return await self._send(sending)

    async def _before_reserve_commit(self) -> None:
        await self.faults.reached("before_reserve_commit")

    async def _send(self, sending: Sending) -> Verdict:
        started = time.perf_counter()
        result = "ok"
        try:
            receipt = await self.faults.around_call(self.guard.send(sending.document()))
        except DuplicateOfMine as exc:
            result = "duplicate_of_mine"
            await self.faults.reached("after_call")
            return await self._issued(sending, exc.receipt, duplicate=True)
        except DuplicateOfAnother as exc:
            result = "duplicate_of_another"
            await self.faults.reached("after_call")
            return await self._alarm(sending, exc)
        except PermanentRejection as exc:
            result = "rejected"
            await self.faults.reached("after_call")
            return await self._rejected(sending, exc.reason)
        except TransientIntegratorError as exc:
            result = "transient"
            await self.faults.reached("after_call")
            return await self._error(sending, exc)
        finally:
            metrics.INTEGRATOR_SECONDS.labels(result=result).observe(
                time.perf_counter() - started)
        await self.faults.reached("after_call")
        return await self._issued(sending, receipt, duplicate=False)

    async def _issued(self, sending: Sending, receipt: Receipt, *, duplicate: bool) -> Verdict:
        if not await self._record(lambda: mark_issued(self.engine, sending.pk, receipt)):
            # Settled meanwhile (recovery repaired it, or an operator acted): nothing to add.
            log.warning("outcome_superseded", outcome="issued")
            return Verdict(Action.ACK, "superseded")
        log.info("invoice_issued", ref=receipt.ref, duplicate=duplicate)
        return await self._settled("issued")

    async def _alarm(self, sending: Sending, exc: DuplicateOfAnother) -> Verdict:
        recorded = await self._record(
            lambda: mark_alarm(self.engine, sending, exc.holder_invoice_id))
        log.error("number_held_by_another", holder_invoice_id=exc.holder_invoice_id,
                  recorded=recorded)
        return await self._settled("alarm" if recorded else "superseded")

    async def _rejected(self, sending: Sending, reason: str) -> Verdict:
        if not await self._record(lambda: mark_rejected(self.engine, sending, reason)):
            log.warning("outcome_superseded", outcome="rejected")
            return Verdict(Action.ACK, "superseded")
        log.warning("invoice_rejected", reason=reason)
        return await self._settled("rejected")

    async def _error(self, sending: Sending, exc: TransientIntegratorError) -> Verdict:
        delay = retry_delay(sending.attempt)
        if not self.guard.accepting():
            delay = max(delay, self.settings.breaker_reset_timeout_s)
        retry_at = datetime.now(UTC) + timedelta(seconds=delay)
        error = f"{type(exc).__name__}: {exc}"
        if not await self._record(lambda: mark_error(self.engine, sending, error, retry_at)):
            log.warning("outcome_superseded", outcome="error")
            return Verdict(Action.ACK, "superseded", pause=not self.guard.accepting())
        log.warning("invoice_error", error=error, retry_at=retry_at.isoformat())
        verdict = await self._settled("error")
        return Verdict(verdict.action, verdict.outcome, pause=not self.guard.accepting())

    async def _settled(self, outcome: str) -> Verdict:
        await self.faults.reached("after_outcome_commit")
        return Verdict(Action.ACK, outcome)

    async def _record(self, write: Callable[[], Awaitable[bool]]) -> bool:
        """Commit an outcome, retrying a lost database connection for a while.

        The integrator has answered, so the answer must not be dropped for a passing database
        hiccup; every outcome write is idempotent (status- and attempt-fenced), so a retry after
        an unknown commit result is harmless.
        """
        deadline = time.monotonic() + OUTCOME_WRITE_BUDGET_S
        delay = 0.2
        while True:
            try:
                return await write()
            except Exception as exc:
                if not is_database_unavailable(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("outcome_write_retry", error=type(exc).__name__, delay_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    @staticmethod
    def _requeue(reason: str, *, pause: bool = False, backoff_s: float = 0.0) -> Verdict:
        log.info("message_requeued", reason=reason)
        return Verdict(Action.REQUEUE, "requeued", reason=reason, pause=pause,
                       backoff_s=backoff_s)

