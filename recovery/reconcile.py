"""Settle one invoice whose integrator outcome is unknown: **ask first**, then resend.

The invoice is SENDING under the caller's lease, with its number pinned. Because the number was
sealed before any call, "did it arrive?" is a deterministic question:

* the integrator has the number for this invoice  -> ISSUED with its reference (no new number);
* the integrator has the number for another one   -> alarm: ERROR, never retried by itself;
* the integrator does not have it                 -> resend under the same number.

Whatever the answer, it is recorded by :mod:`gapless.issuing.outcome`, exactly as the worker
records its own (accepted or our own duplicate -> ISSUED, rejection -> REJECTED, transient ->
ERROR due after the one backoff, after ``max_attempts`` ERROR for an operator); a call the
breaker refused, or our credentials refused, puts the orphan back as it was.

The document resent is the one the invoice sent before (stored with an earlier outcome), or —
when a first send died before its outcome was recorded — the same bytes rendered again from what
the seal fixed (:mod:`gapless.issuing.render`); either way same number, same UUID. A repair stores
the document it stands for with the ISSUED outcome.

No transaction is open during the integrator calls (I5): each outcome is one fenced domain
operation of :mod:`gapless.ledger.invoices`. Used by the recovery loop and by ``gapless invoice
retry``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gapless.integrator.base import UNKNOWN, Document, DuplicateOfAnother, Receipt
from gapless.integrator.guard import Guard
from gapless.issuing import outcome
from gapless.issuing.outcome import (
    RECOVERY_EVENTS,
    Answer,
    Backoff,
    Outcomes,
    RecordIssued,
    Said,
    Settled,
)
from gapless.issuing.render import Renderer, RenderError
from gapless.ledger.database import Database
from gapless.ledger.invoices import Orphan, Sending
from gapless.logging import get_logger

__all__ = ["Backoff", "Outcome", "Result", "reconcile"]

log = get_logger("gapless.recovery")


class Outcome(StrEnum):
    REPAIRED = "repaired"      # the integrator had it for us: ISSUED, nothing sent
    RESENT = "resent"          # the integrator did not have it: resent and ISSUED
    ALARM = "alarm"            # the number (or the UUID) is another invoice's at the integrator
    REJECTED = "rejected"      # resent and permanently rejected
    ERROR = "error"            # transient failure: ERROR, due again later
    PARKED = "parked"          # ERROR for an operator (max attempts, or no document to send)
    UNAVAILABLE = "unavailable"  # nothing sent (breaker open, credentials refused): put back
    SUPERSEDED = "superseded"  # the fenced write found the invoice moved on (another owner)


#: Recovery's word for each settled outcome (ISSUED is REPAIRED or RESENT, by the answer).
_OUTCOMES = {Settled.ALARM: Outcome.ALARM, Settled.REJECTED: Outcome.REJECTED,
             Settled.WRONG_CHANNEL: Outcome.REJECTED, Settled.ERROR: Outcome.ERROR,
             Settled.PARKED: Outcome.PARKED, Settled.RELEASED: Outcome.UNAVAILABLE,
             Settled.SUPERSEDED: Outcome.SUPERSEDED}


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str = ""
    receipt: Receipt | None = None
    retry_at: datetime | None = None
    #: The integrator refused our credentials: stop the round (nothing was recorded).
    credentials_refused: bool = False


def _found_uuid(sending: Sending, found: Receipt) -> Answer:
    """The integrator holds the invoice's document (its UUID): under its number (or one it does
    not tell), the lost send arrived; under another number, an alarm."""
    if found.number in (sending.number, UNKNOWN):
        return Answer(Said.FOUND, receipt=Receipt(
            sending.tenant, sending.number, sending.invoice_id, found.ref, sending.uuid))
    return Answer(Said.DUPLICATE_OF_ANOTHER, duplicate=DuplicateOfAnother(
        sending.number, found.invoice_id, found.number))


async def _ask(guard: Guard, sending: Sending) -> Answer | None:
    """Is the invoice's document at the integrator? By its number where the adapter can look
    numbers up (a number held by another invoice is then found before anything is sent), else
    by its UUID (a number held by another invoice then answers the resend with 409)."""
    if guard.looks_up_numbers:
        found = await guard.lookup(sending.tenant, sending.number)
        return None if found is None else outcome.found(sending, found)
    found = await guard.lookup_uuid(sending.tenant, sending.uuid)
    return None if found is None else _found_uuid(sending, found)


async def _ask_then_send(guard: Guard, sending: Sending, document: Document) -> Answer:
    """Ask first; resend only when the integrator does not have the document. A resend after
    an earlier attempt whose outcome is unknown is safe: our own duplicate answers 409."""
    try:
        found = await _ask(guard, sending)
    except Exception as exc:  # a malformed answer included: the outcome stays unknown
        return outcome.answer_of(exc)
    if found is not None:
        return found
    return await outcome.answer(guard.send(document))


async def reconcile(db: Database, guard: Guard, renderer: Renderer, sending: Sending, *,
                    backoff: Backoff, max_attempts: int | None,
                    min_delay_s: float = 0.0, record_issued: RecordIssued | None = None,
                    calls_done: Callable[[], None] | None = None,
                    orphan: Orphan | None = None) -> Result:
    """Ask the integrator about ``sending.number``, resend if it is not there, record the outcome.

    Two phases: the integrator calls, then one fenced write of the outcome (``calls_done`` is
    called in between, so a caller bounding integrator concurrency can free its slot before the
    database write). When nothing was sent (the breaker refused a call, or our credentials were
    refused) ``orphan`` — the caller's claim — is put back as it was and the result is
    ``UNAVAILABLE``; without ``orphan`` (an operator's retry) the invoice waits in ERROR until
    the breaker may half-open. ``min_delay_s`` is the breaker's reset timeout. Every other
    failure of the round — a malformed answer, an exception rendering or recording — is recorded
    as a transient failure (ERROR due again, parked at ``max_attempts``); raises only when the
    database cannot be reached: the invoice then stays SENDING under the caller's lease and is
    found again once that is stale. ``record_issued`` writes an ISSUED outcome (default:
    ``mark_issued``, one transaction; the loop passes its group-commit writer). A sealed invoice
    whose stored message cannot make its document is parked in ERROR for an operator, nothing
    sent.
    """
    bound = log.bind(invoice_id=sending.invoice_id, tenant=sending.tenant,
                     series=sending.series, number=sending.number, attempt=sending.attempt)
    outcomes = Outcomes(db, guard, events=RECOVERY_EVENTS, backoff=backoff,
                        breaker_reset_s=min_delay_s, max_attempts=max_attempts,
                        record_issued=record_issued)
    done = _Once(calls_done)
    try:
        try:
            document = await renderer.document(sending)
        except RenderError as exc:
            done()
            return _result(await outcomes.unrenderable(sending, str(exc), bound), None)
        answer = await _ask_then_send(guard, sending, document)
        done()
        settled = await outcomes.settle(sending, document, answer, bound, orphan=orphan)
        return _result(settled, answer)
    except Exception as exc:
        # Any other failure of this round (a write refused, a bug) is recorded like a transient
        # one: ERROR due again, parked at max_attempts. Only an unreachable database re-raises.
        done()
        return _result(await outcomes.failed(sending, exc, bound, step="recovery"), None)


class _Once:
    """Calls ``callback`` (if any) the first time it is called."""

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self._callback = callback

    def __call__(self) -> None:
        if self._callback is not None:
            callback, self._callback = self._callback, None
            callback()


def _result(settled: outcome.Result, answer: Answer | None) -> Result:
    if settled.settled is Settled.ISSUED:
        found = answer is not None and answer.said is Said.FOUND
        kind = Outcome.REPAIRED if found else Outcome.RESENT
    else:
        kind = _OUTCOMES[settled.settled]
    return Result(kind, settled.detail, receipt=settled.receipt, retry_at=settled.retry_at,
                  credentials_refused=settled.credentials_refused)
