"""The just-in-time issuing flow: one delivery in, one verdict (ack, requeue, dead-letter) out.

Two short transactions per invoice on the happy path, and none open while the integrator is
called (I5):

1. parse and check the message (an invoice or a dispatch note: one flow for both, the kinds
   differing only where :mod:`gapless.issuing.routing` and :mod:`gapless.documents` say) — the
   contract, then what its document needs: a producer's
   ``issue_date`` within the window, and for a tenant with an issuer profile a GİB-numbered series
   and every field the UBL-TR document needs. A message refused here is dead-lettered with the
   reason before any number is used;
2. **intake** (one statement, shared by the deliveries of the series that wait together:
   :mod:`gapless.issuing.seals`): store the draft by ``invoice_id`` — a duplicate maps to the
   same row — lock it, seal a number if it has none (pinning the issuer profile in force), take
   the sending lease, **commit**;
3. make the document: the bytes the invoice sent before, or a fresh rendering (UBL-TR for a
   profiled tenant, the message's JSON otherwise) — same number, same UUID, every time;
4. call the integrator through the guard (retries and the circuit breaker live there);
5. record the outcome and the document sent (one statement), as recovery records its own
   (:mod:`gapless.issuing.outcome`): ISSUED, ERROR with a due time, REJECTED, or the duplicate
   alarm. Refused credentials wait in ERROR like a breaker refusal, and pause the consumer.
   Anything else that fails once the number is sealed — a document that cannot be rendered, an
   answer the adapter cannot read, an exception of the flow's own — ends the invoice in ERROR
   with the reason (``Outcomes.unrenderable`` / ``Outcomes.failed``); only an unreachable
   database leaves it SENDING, for recovery once the lease is stale.

The consumer acks only after the verdict's outcome has committed. The database decides every
repeat: a redelivered or duplicated message finds the row ISSUED (ack), SENDING under someone's
fresh lease (ack; the owner or recovery finishes it), parked in ERROR/REJECTED (ack; recovery or an
operator owns it), or SENDING under a stale lease (taken over with the *same* number and bytes).

Logging: one info event per delivery's outcome; the steps in between log at debug.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

from structlog.stdlib import BoundLogger

from gapless.constants import TERMINAL_STATUSES, Status
from gapless.errors import InvalidTransition, ReservationLockTimeout, UnknownSeriesError
from gapless.integrator.base import Document, IntegratorAuthError
from gapless.integrator.guard import Guard
from gapless.issuing import outcome
from gapless.issuing.admission import numbering_problem
from gapless.issuing.correction import ChannelCorrector, NothingToCorrect
from gapless.issuing.issued import IssuedWriter
from gapless.issuing.outcome import WORKER_EVENTS, Outcomes, Settled
from gapless.issuing.render import Renderer, RenderError
from gapless.issuing.routing import (
    ASKS_RECIPIENT,
    RecipientMemory,
    RecipientUnavailable,
    Route,
    Router,
    RoutingRefused,
)
from gapless.issuing.seals import SealQueue
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.invoices import (
    Claim,
    ClaimKind,
    Draft,
    Sending,
    cancel,
    invoice_state,
)
from gapless.ledger.refusals import record_refusal
from gapless.ledger.sqlstates import is_database_unavailable
from gapless.ledger.tenants import Profile
from gapless.logging import get_logger
from gapless.message import (
    AnyMessage,
    InvalidMessage,
    parse_message,
    priority_of,
)
from gapless.numbers import SeriesSpec
from gapless.settings import Settings
from gapless.worker import metrics
from gapless.worker.hooks import NO_HOOKS, FlowHooks

log = get_logger("gapless.worker")

#: How long an outcome write keeps retrying a lost database connection before giving up (the
#: invoice then stays SENDING and recovery settles it once the lease is stale).
OUTCOME_WRITE_BUDGET_S = 60.0
#: How long recording a refusal may take before the message is dead-lettered without it.
REFUSAL_RECORD_BUDGET_S = 5.0
#: A seal that finds another issuer profile in force re-checks the message this many times.
STALE_RETRIES = 3
#: A group seal or ISSUED commit with fewer invoices than this waiting lingers for more, up to
#: ``GAPLESS_GROUP_LINGER_MS`` (docs/benchmarks.md, "Statements that wait a millisecond for
#: company").
GROUP_ENOUGH = 4

Clock = Callable[[], datetime]
T = TypeVar("T")

#: Claims with nothing to send: (metrics outcome, log event) — the delivery is acked.
_NOTHING_TO_SEND = {
    ClaimKind.FINAL: ("already_final", "message_already_final"),
    ClaimKind.BUSY: ("busy", "invoice_busy"),
    ClaimKind.PARKED: ("parked", "invoice_parked"),
}

#: Settled outcomes counted under another worker metrics label (the rest under their own name;
#: the worker never releases: a fresh seal has nothing to go back to).
_OUTCOME_LABELS = {Settled.PARKED: "error", Settled.WRONG_CHANNEL: "rejected"}


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


class IssuingFlow:
    """The issuing steps for one worker process (shared by its concurrent deliveries).

    ``clock`` (tests only) fixes the seal moment and "today"; by default the seal takes the
    database's clock and the date checks this host's.
    """

    def __init__(self, db: Database, guard: Guard, settings: Settings, *,
                 catalog: Catalog | None = None, hooks: FlowHooks = NO_HOOKS,
                 clock: Clock | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.db = db
        self.guard = guard
        self.settings = settings
        self.catalog = catalog or Catalog(db)
        self.renderer = Renderer(self.catalog)
        #: The recipient answers this process read, kept while it listens to the table's change
        #: notices (the consumer runs the listener; without one every answer is read again).
        self.recipients = RecipientMemory()
        self.router = Router(db, self.catalog, guard, settings.recipient_ttl_s, self.recipients,
                             on_answer=_observe_answer)
        self.corrector = ChannelCorrector(db, self.catalog, self.router, settings)
        #: ISSUED outcomes of concurrent deliveries share commits (each delivery is acked only
        #: after the commit that holds its own outcome).
        self.issued = IssuedWriter(db, linger_s=settings.group_linger_ms / 1000,
                                   enough=GROUP_ENOUGH)
        self.outcomes = Outcomes(db, guard, events=WORKER_EVENTS,
                                 breaker_reset_s=settings.breaker_reset_timeout_s,
                                 record_issued=self.issued.issued)
        self.hooks = hooks
        self._clock = clock
        self._stopping = stopping
        #: Intakes of concurrent deliveries of one tenant share statements and commits (each
        #: delivery gets its own claim, after the commit that holds it).
        self.seals = SealQueue(
            db, lease_s=settings.lease_s, lock_timeout_ms=settings.lock_timeout_ms,
            before_commit=(self._before_reserve_commit
                           if hooks.wants("before_reserve_commit") else None),
            on_statement=_observe_seal, linger_s=settings.group_linger_ms / 1000,
            enough=GROUP_ENOUGH)
        #: The integrator refused our credentials: no number is sealed until a probe passes
        #: (the consumer clears it when it resumes).
        self.credentials_refused = False

    def _now(self) -> datetime:
        return self._clock() if self._clock is not None else datetime.now(UTC)

    async def handle(self, delivery: Delivery) -> Verdict:
        """Run the flow for one delivery and say what to do with it.

        Raises only for the unexpected (a bug, or the database unreachable before anything was
        recorded) and on cancellation; the consumer then requeues, or leaves the message unacked.
        """
        try:
            message = parse_message(delivery.body, delivery.content_type)
        except InvalidMessage as exc:
            return Verdict(Action.DEAD_LETTER, "dead_lettered", reason=exc.reason)
        verdict = await self._handle_message(message, delivery)
        if verdict.action is Action.DEAD_LETTER:
            await self._record_refusal(message, verdict.reason or "refused")
        return verdict

    async def _record_refusal(self, message: AnyMessage, reason: str) -> None:
        """Keep a refusal of a valid message (its tenant and invoice_id are the contract's), so
        that the API answers REFUSED and the feed carries it. Bounded in time and never raising:
        the message is dead-lettered whatever happens here."""
        try:
            await asyncio.wait_for(record_refusal(self.db, message.tenant, message.invoice_id,
                                                  message.series, reason),
                                   REFUSAL_RECORD_BUDGET_S)
        except Exception as exc:  # not CancelledError; TimeoutError included
            log.warning("refusal_not_recorded", invoice_id=message.invoice_id,
                        tenant=message.tenant, error=type(exc).__name__)

    async def _handle_message(self, message: AnyMessage, delivery: Delivery) -> Verdict:
        bound = log.bind(invoice_id=message.invoice_id, tenant=message.tenant,
                         series=message.series)
        bound.debug("message_received", priority=delivery.priority,
                    redelivered=delivery.redelivered)
        profile = await self.catalog.profile_in_force(message.tenant)
        routable = profile is not None and await self._may_route(message)
        routed = await self._route(message, profile, routable, bound)
        if isinstance(routed, Verdict):
            return routed
        message, series = routed.message, routed.series
        bound = bound.bind(series=series.code)
        refusal = self._refusal(message, series, profile)
        if refusal is not None and not await self._numbered_already(message, refusal, bound):
            return self._dead_letter(refusal, bound)
        draft = Draft(message.invoice_id, message.tenant, series.code,
                      priority_of(delivery.priority, message.priority), message.payload,
                      message.body().decode())
        claim = await self._intake(message, series, draft, profile, bound)
        if (routable and isinstance(claim, Claim) and claim.kind is ClaimKind.CONFLICT
                and claim.number is not None and claim.series is not None):
            # A numbered invoice (a redelivery, a duplicate) keeps the route it was sealed with,
            # whatever the routing answers now: the claim is taken in its own series.
            sealed = await self._sealed_route(message, claim.series)
            if sealed is not None:
                draft = dataclasses.replace(draft, series=sealed.series.code)
                claim = await self._intake(sealed.message, sealed.series, draft, profile, bound)
        if isinstance(claim, Verdict):
            return claim
        return await self._after_claim(claim, message, bound)

    # -- routing and checks before any number is used --------------------------------------------

    async def _route(self, message: AnyMessage, profile: Profile | None, routable: bool,
                     bound: BoundLogger) -> Route | Verdict:
        """The message's series, and for a routed tenant its channel, profile and alias (see
        :mod:`gapless.issuing.routing`). A message that contradicts the routing, or names a series
        that does not exist, is dead-lettered — unless its invoice is numbered already (a redelivery
        goes on as sealed); when the integrator cannot answer the recipient check, it waits.

        Nothing but the routing is read first: a redelivery of a numbered invoice that the
        routing now sends elsewhere is found by its seal (CONFLICT, then :meth:`_sealed_route`),
        and only a routing that fails reads the invoice's state."""
        try:
            return await self.router.route(message, profiled=profile is not None)
        except UnknownSeriesError as exc:
            return Verdict(Action.DEAD_LETTER, "dead_lettered", reason=str(exc))
        except RoutingRefused as exc:
            if routable and (sealed := await self._sealed_route(message)) is not None:
                return sealed
            await self._numbered_already(message, exc.reason, bound)  # cancels an unsealed draft
            return self._dead_letter(exc.reason, bound)
        except RecipientUnavailable as exc:
            if routable and (sealed := await self._sealed_route(message)) is not None:
                return sealed  # numbered already: its route needs no answer
            refused = isinstance(exc.__cause__, IntegratorAuthError)
            if refused:
                self.credentials_refused = True
                outcome.credentials_refused(bound, f"{type(exc.__cause__).__name__}: "
                                                   f"{exc.__cause__}")
            return self._requeue("recipient_check_unavailable", bound, backoff_s=1.0,
                                 pause=refused or not self.guard.accepting())

    async def _sealed_route(self, message: AnyMessage, series: str | None = None) -> Route | None:
        """The route a numbered invoice was sealed with (its series: ``series`` when the claim
        told it, else read), or None when the invoice has no number."""
        if series is None:
            state = await invoice_state(self.db, message.invoice_id, tenant=message.tenant)
            if state is None or state.number is None:
                return None
            series = state.series
        spec = await self.catalog.series(message.tenant, series)
        if spec is None:
            return None
        return Route(message.model_copy(update={"series": series}), spec, spec.channel)

    async def _may_route(self, message: AnyMessage) -> bool:
        """Whether routing may choose this message's series: it names none, or one of a routed
        channel. A message naming a series without routing is numbered in that series as it
        stands, so the issuing path skips the read of the invoice's state (the cached series
        answers)."""
        if message.series is None:
            return True
        spec = await self.catalog.series(message.tenant, message.series)
        return spec is not None and spec.channel in ASKS_RECIPIENT

    def _refusal(self, message: AnyMessage, series: SeriesSpec,
                 profile: Profile | None) -> str | None:
        """Why the message cannot be numbered (None: it can), checked before any seal
        (:func:`gapless.issuing.admission.numbering_problem`, the API's checks too)."""
        return numbering_problem(message, series, profile, self._now(),
                                 self.settings.issue_date_window_days)

    async def _numbered_already(self, message: AnyMessage, refusal: str,
                                bound: BoundLogger) -> bool:
        """A refused message may belong to an invoice that is numbered already (a redelivery
        after the window closed, a profile added later): that invoice goes on as it is. A draft
        that never got its number is cancelled with the reason (no number consumed)."""
        state = await invoice_state(self.db, message.invoice_id, tenant=message.tenant)
        if state is None:
            return False
        if state.number is not None or Status(state.status) in TERMINAL_STATUSES:
            return True
        try:
            await cancel(self.db, message.invoice_id, refusal, tenant=message.tenant)
        except InvalidTransition:
            return True  # sealed meanwhile by another delivery: it goes on
        bound.info("draft_cancelled", reason=refusal)
        return False

    # -- the intake (steps 1 and 2) ---------------------------------------------------------------

    def _hold(self, tenant: str, bound: BoundLogger) -> Verdict | None:
        """Why a draft must not be sealed now (None: it may). Checked when its turn in the
        tenant's queue comes (:class:`gapless.issuing.seals.SealQueue`), not when it arrived."""
        if self._stopping():
            # No number is sealed once a stop is requested; the message waits in the queue.
            return self._requeue("worker_stopping", bound)
        if not self.guard.accepting(tenant):
            # The tenant's account's breaker is open: sealing now would only turn its messages
            # into ERRORs. The consumer pauses when no account takes calls; while another does,
            # this message waits a moment and comes back.
            paused = not self.guard.accepting()
            return self._requeue("breaker_open", bound, pause=paused,
                                 backoff_s=0.0 if paused else 1.0)
        if self.credentials_refused:
            return self._requeue("credentials_refused", bound, pause=True)
        return None

    async def _intake(self, message: AnyMessage, series: SeriesSpec, draft: Draft,
                      profile: Profile | None, bound: BoundLogger) -> Claim | Verdict:
        hold = functools.partial(self._hold, message.tenant, bound)
        try:
            for _ in range(STALE_RETRIES + 1):
                claim = await self.seals.intake(
                    draft, profile_version=None if profile is None else profile.version,
                    at=None if self._clock is None else self._clock(), ready=hold)
                if isinstance(claim, Verdict) or claim.kind is not ClaimKind.STALE:
                    return claim
                # Another issuer profile is in force than the one the message was checked
                # against: nothing was sealed; check again with the new one.
                profile = await self.catalog.refresh(message.tenant)
                refusal = self._refusal(message, series, profile)
                if refusal is not None:
                    await self._numbered_already(message, refusal, bound)
                    return self._dead_letter(refusal, bound)
            return self._requeue("issuer_profile_changing", bound, backoff_s=1.0)
        except ReservationLockTimeout:
            bound.warning("reservation_lock_timeout",
                          lock_timeout_ms=self.settings.lock_timeout_ms)
            return self._requeue("lock_timeout", bound, backoff_s=1.0)

    async def _before_reserve_commit(self) -> None:
        await self.hooks.reached("before_reserve_commit")

    async def _after_claim(self, claim: Claim, message: AnyMessage,
                           bound: BoundLogger) -> Verdict:
        if claim.kind is ClaimKind.CONFLICT:
            return self._dead_letter(
                f"invoice_id: {message.invoice_id!r} already names an invoice of another series",
                bound)
        if (claim.kind is ClaimKind.PARKED and claim.status is Status.REJECTED
                and await self.corrector.pending(message.invoice_id, tenant=message.tenant)):
            return await self._correct(message.invoice_id, message.tenant, bound)
        if claim.kind is not ClaimKind.SEND:
            label, event = _NOTHING_TO_SEND[claim.kind]
            bound.info(event, status=None if claim.status is None else claim.status.value)
            return Verdict(Action.ACK, label)
        sending = claim.sending
        assert sending is not None  # SEND always carries the lease
        bound = bound.bind(number=sending.number, attempt=sending.attempt)
        if claim.fresh_number:
            bound.debug("number_reserved", reserved_no=sending.reserved_no)
        else:
            bound.info("lease_taken_over", reserved_no=sending.reserved_no)
        await self.hooks.reached("after_reserve_commit")
        try:
            return await self._issue(sending, message if claim.created else None, bound)
        except Exception as exc:
            # Sealed: whatever failed, the invoice ends in a state with a reason (ERROR, due
            # again), never SENDING for its redeliveries to find busy. A database that cannot
            # be reached re-raises: nothing can be recorded, recovery takes over.
            if is_database_unavailable(exc):
                raise
            result = await self._record(functools.partial(
                self.outcomes.failed, sending, exc, bound, step="issuing"))
            return await self._settled(_OUTCOME_LABELS.get(result.settled, result.settled))

    async def _issue(self, sending: Sending, message: AnyMessage | None,
                     bound: BoundLogger) -> Verdict:
        """Steps 3 to 5 for a sealed invoice under our lease: the document, the call, the
        outcome."""
        try:
            document = await self.renderer.document(sending, message)
        except RenderError as exc:
            return await self._unrenderable(sending, str(exc), bound)
        return await self._send(sending, document, bound)

    # -- the call and its outcome (steps 3 to 5) -------------------------------------------------

    async def _send(self, sending: Sending, document: Document, bound: BoundLogger) -> Verdict:
        """Send through the guard and settle the answer (:mod:`gapless.issuing.outcome`)."""
        started = time.perf_counter()
        answer = await outcome.answer(self.hooks.around_call(self.guard.send(document)))
        metrics.INTEGRATOR_SECONDS[answer.said].observe(time.perf_counter() - started)
        await self.hooks.reached("after_call")
        result = await self._record(
            lambda: self.outcomes.settle(sending, document, answer, bound))
        if result.credentials_refused:
            self.credentials_refused = True
        if result.settled is Settled.WRONG_CHANNEL:
            return await self._correct(sending.invoice_id, sending.tenant, bound)
        verdict = await self._settled(_OUTCOME_LABELS.get(result.settled, result.settled))
        return Verdict(verdict.action, verdict.outcome,
                       pause=result.credentials_refused or not self.guard.accepting())

    async def _correct(self, invoice_id: str, tenant: str, bound: BoundLogger) -> Verdict:
        """Seal and send the successor of an invoice refused for its channel. When the
        recipient check cannot answer, the delivery is requeued: its redelivery finds the
        invoice still marked and corrects it then."""
        try:
            correction = await self.corrector.correct(invoice_id, tenant=tenant)
        except NothingToCorrect as exc:
            await self.corrector.give_up(invoice_id, exc.reason, tenant=tenant)
            bound.warning("channel_not_corrected", reason=exc.reason)
            return await self._settled("rejected")
        except RecipientUnavailable:
            return self._requeue("recipient_check_unavailable", bound, backoff_s=1.0,
                                 pause=not self.guard.accepting())
        except ReservationLockTimeout:
            return self._requeue("lock_timeout", bound, backoff_s=1.0)
        bound.info("channel_corrected", voided_number=correction.voided_number,
                   successor=correction.successor_id)
        return await self._after_claim(correction.claim, correction.message,
                                       bound.bind(invoice_id=correction.successor_id))

    async def _unrenderable(self, sending: Sending, reason: str, bound: BoundLogger) -> Verdict:
        """A sealed invoice whose stored message cannot make its document: nothing was sent; it
        waits in ERROR (not retried by itself) for an operator to fix the payload or void it."""
        result = await self._record(lambda: self.outcomes.unrenderable(sending, reason, bound))
        return await self._settled(_OUTCOME_LABELS.get(result.settled, result.settled))

    async def _settled(self, label: str) -> Verdict:
        await self.hooks.reached("after_outcome_commit")
        return Verdict(Action.ACK, label)

    async def _record(self, write: Callable[[], Awaitable[T]]) -> T:
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
    def _requeue(reason: str, bound: BoundLogger, *, pause: bool = False,
                 backoff_s: float = 0.0) -> Verdict:
        bound.info("message_requeued", reason=reason)
        return Verdict(Action.REQUEUE, "requeued", reason=reason, pause=pause,
                       backoff_s=backoff_s)

    @staticmethod
    def _dead_letter(reason: str, bound: BoundLogger) -> Verdict:
        bound.info("message_refused", reason=reason)
        return Verdict(Action.DEAD_LETTER, "dead_lettered", reason=reason)


def _observe_answer(source: str) -> None:
    """Metrics of one recipient answer routing used (memory, table or integrator)."""
    metrics.RECIPIENT_ANSWERS[source].inc()


def _observe_seal(drafts: int, seconds: float) -> None:
    """Metrics of one committed statement of the group seal."""
    metrics.RESERVATION_SECONDS.observe(seconds)
    metrics.SEAL_BATCH_SIZE.observe(drafts)
