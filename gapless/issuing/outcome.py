"""Settle what the integrator answered for a sealed invoice: the one policy of the worker and
recovery.

The invoice is SENDING under the caller's lease, its number pinned; the caller has sent its
document (or asked whether it arrived) through the guard, outside any transaction (I5).
:func:`answer` turns the call into an :class:`Answer`, and :meth:`Outcomes.settle` records it —
one fenced statement of :mod:`gapless.ledger.invoices` — the same way whichever loop asked:
accepted or found → ISSUED; the number another invoice's → an alarm; wrong channel → REJECTED
for the correction; rejected → REJECTED; transient → ERROR due after the one :class:`Backoff`;
nothing sent (breaker open, credentials refused) → the claim given back, no attempt burned.
Refused credentials stop both loops alike until a probe passes. A write that finds the invoice
moved on changes nothing (``SUPERSEDED``).

Nothing after a seal escapes this table: :func:`answer` turns *any* exception of a call (a
malformed answer the adapter chokes on, a bug) into a transient answer, and
:meth:`Outcomes.failed` records any other failure of a loop's handling as a transient ERROR — due
again, or parked at ``max_attempts`` — unless the database itself is unreachable (then nothing
can be recorded; the lease runs out and recovery finds the invoice).

The whole table, the backoff's formula and the credentials policy: docs/architecture.md,
"Integrator outcomes".
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from structlog.stdlib import BoundLogger

from gapless.integrator.base import (
    DUPLICATE_HINT,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    IntegratorAuthError,
    PermanentRejection,
    Receipt,
    WrongChannel,
)
from gapless.integrator.guard import Guard, IntegratorUnavailable
from gapless.issuing.correction import WRONG_CHANNEL_PREFIX
from gapless.ledger.database import Database
from gapless.ledger.invoices import (
    Orphan,
    Sending,
    mark_alarm,
    mark_error,
    mark_issued,
    mark_rejected,
    mark_unrenderable,
    release_orphan,
)
from gapless.ledger.sqlstates import is_database_unavailable

#: A lookup of this document UUID (the nil UUID) answers "not found" at any sane integrator: the
#: probe that tests reachability and our credentials without consuming a number (by UUID because
#: every adapter can ask by UUID; Nilvera's API has no lookup by number).
PROBE_TENANT = "gapless-probe"
PROBE_UUID = "00000000-0000-0000-0000-000000000000"
CREDENTIALS_HINT = ("fix the integrator credentials (e.g. GAPLESS_NILVERA_API_KEY); the worker "
                    "and recovery resume by themselves")


class Said(StrEnum):
    """What the integrator answered (the values are the worker's send-result metric labels)."""

    ACCEPTED = "ok"
    FOUND = "found"                    # asked first: it has the number for this invoice
    DUPLICATE_OF_MINE = "duplicate_of_mine"
    DUPLICATE_OF_ANOTHER = "duplicate_of_another"
    WRONG_CHANNEL = "wrong_channel"
    REJECTED = "rejected"
    TRANSIENT = "transient"
    UNAVAILABLE = "unavailable"        # the breaker refused the call: nothing was sent
    CREDENTIALS_REFUSED = "auth_refused"


@dataclass(frozen=True)
class Answer:
    """The integrator's answer about one invoice's number, in gapless's words."""

    said: Said
    receipt: Receipt | None = None
    duplicate: DuplicateOfAnother | None = None
    #: The rejection's reason, or the failure as ``Type: message``.
    reason: str = ""


def failure(exc: BaseException) -> str:
    """An exception as a one-line reason: its class and message, at most a line (never a
    traceback; control characters blanked)."""
    text = "".join(char if char.isprintable() else " " for char in str(exc)[:500])
    detail = " ".join(text.split())[:300]
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def answer_of(exc: Exception) -> Answer:
    """The answer an exception of a call stands for (the one ladder over the outcome
    exceptions); anything but a business outcome is transient — the outcome is unknown."""
    if isinstance(exc, DuplicateOfMine):
        return Answer(Said.DUPLICATE_OF_MINE, receipt=exc.receipt)
    if isinstance(exc, DuplicateOfAnother):
        return Answer(Said.DUPLICATE_OF_ANOTHER, duplicate=exc)
    if isinstance(exc, WrongChannel):
        return Answer(Said.WRONG_CHANNEL, reason=exc.reason)
    if isinstance(exc, PermanentRejection):
        return Answer(Said.REJECTED, reason=exc.reason)
    error = failure(exc)
    if isinstance(exc, IntegratorAuthError):
        return Answer(Said.CREDENTIALS_REFUSED, reason=error)
    if isinstance(exc, IntegratorUnavailable):
        return Answer(Said.UNAVAILABLE, reason=error)
    return Answer(Said.TRANSIENT, reason=error)


async def answer(call: Awaitable[Receipt]) -> Answer:
    """Await a guarded send and say what it answered; never raises but a cancellation (an
    unexpected exception is a transient answer: the document may have arrived)."""
    try:
        receipt = await call
    except Exception as exc:
        return answer_of(exc)
    return Answer(Said.ACCEPTED, receipt=receipt)


def found(sending: Sending, receipt: Receipt) -> Answer:
    """The integrator holds the invoice's number (or its UUID): ours when it is this invoice
    under this number (the UUID, where told, the invoice's own), else an alarm."""
    if receipt.invoice_id == sending.invoice_id and receipt.uuid in (None, sending.uuid):
        return Answer(Said.FOUND, receipt=receipt)
    return Answer(Said.DUPLICATE_OF_ANOTHER,
                  duplicate=DuplicateOfAnother(sending.number, receipt.invoice_id))


def credentials_refused(bound: BoundLogger, error: str) -> None:
    """Log the alarm of refused credentials (the event every loop logs for it)."""
    bound.error("integrator_credentials_refused", error=error, hint=CREDENTIALS_HINT)


@dataclass(frozen=True)
class Backoff:
    """When an invoice left ERROR by a transient failure is due again (the module docstring)."""

    base_s: float = 10.0
    cap_s: float = 900.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th claim failed: equal jitter over
        ``min(cap, base·2^(attempt-1))``."""
        full = min(self.cap_s, self.base_s * 2.0 ** max(0, min(attempt - 1, 30)))
        return full / 2 + random.uniform(0, full / 2)  # jitter, not cryptography

    def due(self, attempt: int, *, not_before_s: float = 0.0) -> datetime:
        """The moment the invoice is due again (at least ``not_before_s`` from now)."""
        return datetime.now(UTC) + timedelta(seconds=max(self.delay(attempt), not_before_s))


@dataclass(frozen=True)
class Events:
    """The log event a loop names each outcome with (docs/operations.md; alerts key on them)."""

    issued: str
    repaired: str
    alarm: str
    rejected: str
    wrong_channel: str
    error: str
    parked: str
    unrenderable: str
    released: str
    superseded: str
    #: The loop's own handling of the invoice failed (recorded as a transient failure).
    failed: str


WORKER_EVENTS = Events(
    issued="invoice_issued", repaired="invoice_issued", alarm="number_held_by_another",
    rejected="invoice_rejected", wrong_channel="invoice_wrong_channel", error="invoice_error",
    parked="invoice_error", unrenderable="document_unrenderable", released="invoice_released",
    superseded="outcome_superseded", failed="invoice_failed")
RECOVERY_EVENTS = Events(
    issued="orphan_resent", repaired="orphan_repaired", alarm="orphan_alarm",
    rejected="orphan_rejected", wrong_channel="orphan_rejected", error="orphan_error",
    parked="orphan_parked", unrenderable="orphan_parked", released="orphan_released",
    superseded="orphan_superseded", failed="orphan_failed")


class Settled(StrEnum):
    """What became of the invoice."""

    ISSUED = "issued"
    ALARM = "alarm"
    REJECTED = "rejected"
    WRONG_CHANNEL = "wrong_channel"  # REJECTED and marked: the caller corrects the channel
    ERROR = "error"                  # due again at ``retry_at``
    PARKED = "parked"                # ERROR for an operator (attempts spent, or no document)
    RELEASED = "released"            # nothing sent: the orphan put back as it was
    SUPERSEDED = "superseded"        # the fenced write found the invoice moved on


@dataclass(frozen=True)
class Result:
    settled: Settled
    #: The reference (ISSUED), the reason or error recorded, or the alarm's description.
    detail: str = ""
    receipt: Receipt | None = None
    retry_at: datetime | None = None
    #: Our credentials were refused: stop taking work until a probe passes.
    credentials_refused: bool = False


#: Writes an ISSUED outcome (default ``mark_issued``; recovery passes its group commit).
RecordIssued = Callable[[Sending, Receipt, Document], Awaitable[bool]]


class Outcomes:
    """Records the outcomes of one loop: a method per decision, :meth:`settle` choosing.

    ``max_attempts``: a transient failure of this attempt or a later one parks the invoice for
    an operator (None: never); ``breaker_reset_s``: an ERROR is never due before the breaker may
    half-open, when the breaker is what refused.
    """

    def __init__(self, db: Database, guard: Guard, *, events: Events,
                 backoff: Backoff | None = None, breaker_reset_s: float = 0.0,
                 max_attempts: int | None = None,
                 record_issued: RecordIssued | None = None) -> None:
        self.db = db
        self.guard = guard
        self.events = events
        self.backoff = backoff or Backoff()
        self.breaker_reset_s = breaker_reset_s
        self.max_attempts = max_attempts
        self._record_issued = record_issued

    async def settle(self, sending: Sending, document: Document, answer: Answer,
                     bound: BoundLogger, *, orphan: Orphan | None = None) -> Result:
        """Record ``answer`` for the invoice ``sending`` (``document``: the bytes sent, or the
        ones a resend will send). ``orphan``: the caller's claim can be put back as it was
        when nothing was sent. Raises only for a database error (nothing recorded)."""
        said = answer.said
        if said in (Said.ACCEPTED, Said.FOUND, Said.DUPLICATE_OF_MINE):
            assert answer.receipt is not None
            return await self.issued(sending, document, answer.receipt, bound,
                                     found=said is Said.FOUND,
                                     duplicate=said is Said.DUPLICATE_OF_MINE)
        if said is Said.DUPLICATE_OF_ANOTHER:
            assert answer.duplicate is not None
            return await self.alarm(sending, document, answer.duplicate, bound)
        if said is Said.WRONG_CHANNEL:
            return await self.wrong_channel(sending, document, answer.reason, bound)
        if said is Said.REJECTED:
            return await self.rejected(sending, document, answer.reason, bound)
        if said in (Said.UNAVAILABLE, Said.CREDENTIALS_REFUSED):
            return await self.nothing_sent(sending, document, answer, bound, orphan=orphan)
        return await self.transient(sending, document, answer.reason, bound)

    async def issued(self, sending: Sending, document: Document, receipt: Receipt,
                     bound: BoundLogger, *, found: bool = False,
                     duplicate: bool = False) -> Result:
        """The number is the integrator's for this invoice: ISSUED with its reference, the
        document stored (``found``: it was there already, nothing sent now)."""
        if self._record_issued is not None:
            recorded = await self._record_issued(sending, receipt, document)
        else:
            recorded = await mark_issued(self.db, sending.pk, receipt, document)
        if not recorded:
            return self._superseded(bound, Settled.ISSUED)
        bound.info(self.events.repaired if found else self.events.issued, ref=receipt.ref,
                   duplicate=duplicate, sha256=document.sha256)
        return Result(Settled.ISSUED, receipt.ref, receipt=receipt)

    async def alarm(self, sending: Sending, document: Document, duplicate: DuplicateOfAnother,
                    bound: BoundLogger) -> Result:
        """The number (or the UUID) is another invoice's at the integrator: ERROR ``ALARM:``,
        never retried by itself. Logged at ERROR level even when someone recorded it first:
        two invoices claim one number, a person must look."""
        recorded = await mark_alarm(self.db, sending, duplicate, document)
        bound.error(self.events.alarm, alarm="number_held_by_another",
                    holder_invoice_id=duplicate.holder_invoice_id,
                    holder_number=duplicate.holder_number, recorded=recorded,
                    hint=DUPLICATE_HINT)
        return Result(Settled.ALARM if recorded else Settled.SUPERSEDED, duplicate.describe)

    async def rejected(self, sending: Sending, document: Document, reason: str,
                       bound: BoundLogger) -> Result:
        """A permanent business rejection: REJECTED, the number stays pinned."""
        if not await mark_rejected(self.db, sending, reason, document):
            return self._superseded(bound, Settled.REJECTED)
        bound.warning(self.events.rejected, reason=reason)
        return Result(Settled.REJECTED, reason)

    async def wrong_channel(self, sending: Sending, document: Document, reason: str,
                            bound: BoundLogger) -> Result:
        """Refused for its channel: REJECTED with the ``WRONG CHANNEL:`` mark, which the channel
        correction (:mod:`gapless.issuing.correction`) looks for; the caller runs it next."""
        marked = WRONG_CHANNEL_PREFIX + reason
        if not await mark_rejected(self.db, sending, marked, document):
            return self._superseded(bound, Settled.REJECTED)
        bound.warning(self.events.wrong_channel, reason=reason)
        return Result(Settled.WRONG_CHANNEL, marked)

    async def transient(self, sending: Sending, document: Document | None, error: str,
                        bound: BoundLogger) -> Result:
        """The outcome is unknown or the failure temporary: ERROR with the document (every
        resend sends those bytes), due after the backoff — not before the breaker may half-open
        when it is open — or, at ``max_attempts``, left for an operator."""
        if self.max_attempts is not None and sending.attempt >= self.max_attempts:
            error = f"{error} (gave up after {sending.attempt} attempts)"
            if not await mark_error(self.db, sending, error, None, document):
                return self._superseded(bound, Settled.ERROR)
            bound.error(self.events.parked, error=error)
            return Result(Settled.PARKED, error)
        not_before = 0.0 if self.guard.accepting() else self.breaker_reset_s
        retry_at = self.backoff.due(sending.attempt, not_before_s=not_before)
        if not await mark_error(self.db, sending, error, retry_at, document):
            return self._superseded(bound, Settled.ERROR)
        bound.warning(self.events.error, error=error, retry_at=retry_at.isoformat())
        return Result(Settled.ERROR, error, retry_at=retry_at)

    async def failed(self, sending: Sending, exc: Exception, bound: BoundLogger, *,
                     step: str, document: Document | None = None) -> Result:
        """The caller's handling of the invoice failed at ``step`` with ``exc`` (not an answer of
        the integrator: a bug, a write refused): recorded as a transient failure — ERROR due
        after the backoff, or parked at ``max_attempts`` — so no failure leaves the invoice
        SENDING without a reason. Re-raises ``exc`` when the database is unreachable (nothing
        can be recorded; recovery finds the invoice once its lease is stale)."""
        if is_database_unavailable(exc):
            raise exc
        bound.error(self.events.failed, step=step, error=type(exc).__name__)
        return await self.transient(sending, document, f"{step} failed: {failure(exc)}", bound)

    async def nothing_sent(self, sending: Sending, document: Document, answer: Answer,
                           bound: BoundLogger, *, orphan: Orphan | None) -> Result:
        """Nothing reached the integrator (the breaker refused the call) or nothing was
        accepted (our credentials were refused): the invoice loses nothing. A claimed orphan is
        put back exactly as it was — status, attempts, lease, due time — so no attempt is
        burned and no ERROR is written again and again; a fresh seal waits in ERROR, due when
        the breaker may half-open. Refused credentials are also logged as the alarm
        ``integrator_credentials_refused`` and reported (``credentials_refused``) so the caller
        stops taking work."""
        refused = answer.said is Said.CREDENTIALS_REFUSED
        if orphan is not None:
            put_back = await release_orphan(self.db, orphan)
            result = Result(Settled.RELEASED, answer.reason, credentials_refused=refused)
            bound.info(self.events.released, was=orphan.was.value, put_back=put_back,
                       error=answer.reason)
        else:
            retry_at = self.backoff.due(sending.attempt, not_before_s=self.breaker_reset_s)
            if await mark_error(self.db, sending, answer.reason, retry_at, document):
                result = Result(Settled.ERROR, answer.reason, retry_at=retry_at,
                                credentials_refused=refused)
                bound.warning(self.events.error, error=answer.reason,
                              retry_at=retry_at.isoformat())
            else:
                result = Result(Settled.SUPERSEDED, Settled.ERROR.value,
                                credentials_refused=refused)
                bound.warning(self.events.superseded, outcome=Settled.ERROR.value)
        if refused:
            credentials_refused(bound, answer.reason)
        return result

    async def unrenderable(self, sending: Sending, reason: str, bound: BoundLogger) -> Result:
        """The stored message cannot make the invoice's document: nothing was sent; ERROR
        ``DOCUMENT:``, never retried by itself — an operator fixes the payload (``gapless
        invoice retry --payload``) or voids it. Logged at ERROR level, recorded or not."""
        recorded = await mark_unrenderable(self.db, sending, reason)
        bound.error(self.events.unrenderable, reason=reason, recorded=recorded)
        return Result(Settled.PARKED if recorded else Settled.SUPERSEDED, reason)

    def _superseded(self, bound: BoundLogger, outcome: Settled) -> Result:
        # Settled or taken over meanwhile (recovery repaired it, an operator acted): its new
        # owner decides; nothing to add.
        bound.warning(self.events.superseded, outcome=outcome.value)
        return Result(Settled.SUPERSEDED, outcome.value)
