"""Settle one invoice whose integrator outcome is unknown: **ask first**, then resend.

The invoice is SENDING under the caller's lease, with its number pinned. Because the number was
sealed before any call, "did it arrive?" is a deterministic question:

* the integrator has the number for this invoice  -> ISSUED with its reference (no new number);
* the integrator has the number for another one   -> alarm: ERROR, never retried by itself;
* the integrator does not have it                 -> resend under the same number, and record
  the answer like the worker does (accepted or our own duplicate -> ISSUED, rejection ->
  REJECTED, transient -> ERROR due again after an exponential, jittered backoff; after
  ``max_attempts`` it stays ERROR for an operator).

The document resent is the one the invoice sent before (stored with an earlier outcome), or —
when a first send died before its outcome was recorded — the same bytes rendered again from what
the seal fixed (:mod:`gapless.issuing.render`); either way same number, same UUID. A repair stores
the document it stands for with the ISSUED outcome.

No transaction is open during the integrator calls (I5): each outcome is one fenced domain
operation of :mod:`gapless.ledger.invoices`. Used by the recovery loop and by ``gapless invoice
retry``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from structlog.stdlib import BoundLogger

from gapless.integrator.base import (
    DUPLICATE_HINT,
    UNKNOWN,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    IntegratorError,
    PermanentRejection,
    Receipt,
    Recipient,
    WrongChannel,
)
from gapless.integrator.guard import IntegratorUnavailable
from gapless.issuing.correction import WRONG_CHANNEL_PREFIX
from gapless.issuing.render import Renderer, RenderError
from gapless.ledger.database import Database
from gapless.ledger.invoices import (
    Sending,
    mark_alarm,
    mark_error,
    mark_issued,
    mark_rejected,
    mark_unrenderable,
)
from gapless.logging import get_logger

log = get_logger("gapless.recovery")


class Guard(Protocol):
    """What reconciling needs of :class:`gapless.integrator.guard.GuardedIntegrator`."""

    async def send(self, document: Document) -> Receipt: ...

    async def lookup(self, tenant: str, number: str) -> Receipt | None: ...

    async def recipient(self, tax_id: str) -> Recipient: ...

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None: ...

    def accepting(self) -> bool: ...


class Outcome(StrEnum):
    REPAIRED = "repaired"      # the integrator had it for us: ISSUED, nothing sent
    RESENT = "resent"          # the integrator did not have it: resent and ISSUED
    ALARM = "alarm"            # the number (or the UUID) is another invoice's at the integrator
    REJECTED = "rejected"      # resent and permanently rejected
    ERROR = "error"            # transient failure: ERROR, due again later
    PARKED = "parked"          # transient failure after max attempts: ERROR for an operator
    UNAVAILABLE = "unavailable"  # the breaker refused the call: nothing recorded, caller decides
    SUPERSEDED = "superseded"  # the fenced write found the invoice moved on (another owner)


@dataclass(frozen=True)
class Backoff:
    """When an ERROR invoice is due again: base·2^(attempt-1) capped at ``cap_s``, with jitter
    over the upper half (so retries of many invoices spread out and never synchronise)."""

    base_s: float = 10.0
    cap_s: float = 900.0

    def delay(self, attempt: int) -> float:
        full = min(self.cap_s, self.base_s * 2.0 ** max(0, min(attempt - 1, 30)))
        return full / 2 + random.uniform(0, full / 2)  # jitter, not cryptography


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str = ""
    receipt: Receipt | None = None
    retry_at: datetime | None = None


RecordIssued = Callable[[Sending, Receipt, Document], Awaitable[bool]]


@dataclass(frozen=True)
class _Answer:
    """What the integrator said about one number (phase 1, calls only)."""

    outcome: Outcome           # REPAIRED, RESENT, ALARM, REJECTED, ERROR or UNAVAILABLE
    receipt: Receipt | None = None
    duplicate: DuplicateOfAnother | None = None
    error: Exception | None = None
    reason: str = ""


def _found(sending: Sending, found: Receipt) -> _Answer:
    """The integrator holds the number: ours (same invoice and, when it says, same UUID), or an
    alarm."""
    if found.invoice_id == sending.invoice_id and found.uuid in (None, sending.uuid):
        return _Answer(Outcome.REPAIRED, receipt=found)
    return _Answer(Outcome.ALARM, duplicate=DuplicateOfAnother(sending.number, found.invoice_id))


def _found_uuid(sending: Sending, found: Receipt) -> _Answer:
    """The integrator holds the invoice's document (its UUID): under its number (or one it does
    not tell), the lost send arrived; under another number, an alarm."""
    if found.number in (sending.number, UNKNOWN):
        return _Answer(Outcome.REPAIRED, receipt=Receipt(
            sending.tenant, sending.number, sending.invoice_id, found.ref, sending.uuid))
    return _Answer(Outcome.ALARM, duplicate=DuplicateOfAnother(
        sending.number, found.invoice_id, found.number))


async def _ask(guard: Guard, sending: Sending) -> _Answer | None:
    """Is the invoice's document at the integrator? By its number where the adapter can look
    numbers up (a number held by another invoice is then found before anything is sent), else
    by its UUID (a number held by another invoice then answers the resend with 409)."""
    if getattr(guard, "looks_up_numbers", True):
        found = await guard.lookup(sending.tenant, sending.number)
        return None if found is None else _found(sending, found)
    found = await guard.lookup_uuid(sending.tenant, sending.uuid)
    return None if found is None else _found_uuid(sending, found)


async def _ask_then_send(guard: Guard, sending: Sending, document: Document) -> _Answer:
    try:
        answer = await _ask(guard, sending)
    except IntegratorUnavailable as exc:
        return _Answer(Outcome.UNAVAILABLE, error=exc)
    except IntegratorError as exc:
        return _Answer(Outcome.ERROR, error=exc)
    if answer is not None:
        return answer
    try:
        receipt = await guard.send(document)
    except IntegratorUnavailable as exc:
        # Refused by the breaker, possibly after an earlier attempt of this send whose outcome
        # is unknown: putting the claim back is still safe, the next claim asks first.
        return _Answer(Outcome.UNAVAILABLE, error=exc)
    except DuplicateOfMine as exc:
        return _Answer(Outcome.RESENT, receipt=exc.receipt)
    except DuplicateOfAnother as exc:
        return _Answer(Outcome.ALARM, duplicate=exc)
    except WrongChannel as exc:
        # Marked for the channel correction (gapless.issuing.correction), which recovery runs next.
        return _Answer(Outcome.REJECTED, reason=WRONG_CHANNEL_PREFIX + exc.reason)
    except PermanentRejection as exc:
        return _Answer(Outcome.REJECTED, reason=exc.reason)
    except IntegratorError as exc:
        return _Answer(Outcome.ERROR, error=exc)
    return _Answer(Outcome.RESENT, receipt=receipt)


async def reconcile(db: Database, guard: Guard, renderer: Renderer, sending: Sending, *,
                    backoff: Backoff, max_attempts: int | None,
                    min_delay_s: float = 0.0, record_issued: RecordIssued | None = None,
                    calls_done: Callable[[], None] | None = None) -> Result:
    """Ask the integrator about ``sending.number``, resend if it is not there, record the outcome.

    Two phases: the integrator calls, then one fenced write of the outcome (``calls_done`` is
    called in between, so a caller bounding integrator concurrency can free its slot before the
    database write). Returns ``UNAVAILABLE`` without writing anything when the circuit breaker
    refuses a call, so the caller can put the claim back. ``min_delay_s`` floors the backoff of
    a transient failure (e.g. the breaker's reset timeout). Raises only for the unexpected (a
    database error): the invoice then stays SENDING under the caller's lease and is found again
    once that is stale. ``record_issued`` writes an ISSUED outcome (default: ``mark_issued``,
    one transaction; the loop passes its group-commit writer). A sealed invoice whose stored
    message cannot make its document is parked in ERROR for an operator, nothing sent.
    """
    bound = log.bind(invoice_id=sending.invoice_id, tenant=sending.tenant,
                     series=sending.series, number=sending.number, attempt=sending.attempt)
    try:
        document = await renderer.document(sending)
    except RenderError as exc:
        if calls_done is not None:
            calls_done()
        return await _unrenderable(db, sending, str(exc), bound)
    answer = await _ask_then_send(guard, sending, document)
    if calls_done is not None:
        calls_done()
    if answer.outcome is Outcome.UNAVAILABLE:
        return Result(Outcome.UNAVAILABLE, str(answer.error))
    if answer.outcome is Outcome.ALARM:
        assert answer.duplicate is not None
        return await _alarm(db, sending, answer.duplicate, document, bound)
    if answer.outcome is Outcome.ERROR:
        assert answer.error is not None
        return await _transient(db, guard, sending, document, answer.error, bound,
                                backoff=backoff, max_attempts=max_attempts,
                                min_delay_s=min_delay_s)
    if answer.outcome is Outcome.REJECTED:
        if not await mark_rejected(db, sending, answer.reason, document):
            return _superseded(bound, "rejected")
        bound.warning("orphan_rejected", reason=answer.reason)
        return Result(Outcome.REJECTED, answer.reason)
    return await _issued(db, sending, answer, document, bound, record_issued)


async def _issued(db: Database, sending: Sending, answer: _Answer, document: Document,
                  bound: BoundLogger, record_issued: RecordIssued | None) -> Result:
    """The number is the integrator's for this invoice (found, or just resent): ISSUED."""
    receipt = answer.receipt
    assert receipt is not None
    if record_issued is not None:
        recorded = await record_issued(sending, receipt, document)
    else:
        recorded = await mark_issued(db, sending.pk, receipt, document)
    if not recorded:
        return _superseded(bound, answer.outcome.value)
    if answer.outcome is Outcome.REPAIRED:
        bound.info("orphan_repaired", ref=receipt.ref)
    else:
        bound.info("orphan_resent", ref=receipt.ref)
    return Result(answer.outcome, receipt.ref, receipt=receipt)


async def _alarm(db: Database, sending: Sending, duplicate: DuplicateOfAnother,
                 document: Document, bound: BoundLogger) -> Result:
    recorded = await mark_alarm(db, sending, duplicate, document)
    # ERROR level: two invoices claim one number, a person must look (the event says so too).
    bound.error("orphan_alarm", alarm="number_held_by_another",
                holder_invoice_id=duplicate.holder_invoice_id,
                holder_number=duplicate.holder_number, recorded=recorded, hint=DUPLICATE_HINT)
    if not recorded:
        return Result(Outcome.SUPERSEDED, "alarm")
    return Result(Outcome.ALARM, duplicate.describe)


async def _unrenderable(db: Database, sending: Sending, reason: str,
                        bound: BoundLogger) -> Result:
    """Nothing was sent; the invoice waits in ERROR, not retried, for an operator."""
    if not await mark_unrenderable(db, sending, reason):
        return _superseded(bound, "error")
    bound.error("orphan_parked", error=reason)
    return Result(Outcome.PARKED, reason)


async def _transient(db: Database, guard: Guard, sending: Sending, document: Document,
                     exc: Exception, bound: BoundLogger, *, backoff: Backoff,
                     max_attempts: int | None, min_delay_s: float) -> Result:
    error = f"{type(exc).__name__}: {exc}"
    parked = max_attempts is not None and sending.attempt >= max_attempts
    retry_at = None
    if not parked:
        delay = backoff.delay(sending.attempt)
        if not guard.accepting():
            delay = max(delay, min_delay_s)
        retry_at = datetime.now(UTC) + timedelta(seconds=delay)
    if parked:
        error = f"{error} (gave up after {sending.attempt} attempts)"
    if not await mark_error(db, sending, error, retry_at, document):
        return _superseded(bound, "error")
    if parked:
        bound.error("orphan_parked", error=error)
        return Result(Outcome.PARKED, error)
    assert retry_at is not None
    bound.warning("orphan_error", error=error, retry_at=retry_at.isoformat())
    return Result(Outcome.ERROR, error, retry_at=retry_at)


def _superseded(bound: BoundLogger, outcome: str) -> Result:
    # The fenced write found the invoice settled or taken over meanwhile: its new owner decides.
    bound.warning("orphan_superseded", outcome=outcome)
    return Result(Outcome.SUPERSEDED, outcome)
