"""The orphan-recovery loop: find invoices whose outcome was never recorded, and settle them.

Guarantees: a round claims orphans (stuck SENDING and due ERROR rows) with ``FOR UPDATE SKIP
LOCKED`` and a lease committed at once, so no two recovery instances or workers hold the same
invoice; each is reconciled outside any transaction, asking the integrator first and resending
the same stored document only if it did not arrive; while the breaker refuses calls nothing is
claimed, and one orphan probes a recovering integrator before a batch does; an orphan the
breaker or a stop kept from its call is put back untouched, burning no attempt. After the
orphans, a bounded batch of GİB questions about ISSUED documents (when the adapter answers
them). SIGTERM/SIGINT: no new round, unstarted orphans put back, in-flight ones given
``drain_timeout_s``; one cut off mid-call stays SENDING and the next round anywhere asks first.

The round step by step (breaker, claim, reconcile, refill, GİB's verdict): docs/architecture.md,
"A recovery round".
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from dataclasses import dataclass, field

from gapless.errors import ReservationLockTimeout
from gapless.integrator.base import DUPLICATE_HINT, IntegratorAuthError, IntegratorError
from gapless.integrator.guard import Guard, IntegratorUnavailable
from gapless.issuing.correction import ChannelCorrector, NothingToCorrect
from gapless.issuing.issued import IssuedWriter
from gapless.issuing.outcome import PROBE_TENANT, PROBE_UUID, Backoff
from gapless.issuing.render import Renderer
from gapless.issuing.routing import RecipientUnavailable, Router
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.invoices import Orphan, claim_orphans, release_orphan
from gapless.ledger.verdicts import GibPolicy
from gapless.logging import get_logger
from gapless.recovery import metrics
from gapless.recovery.reconcile import Outcome, reconcile
from gapless.recovery.verdicts import VerdictSummary, follow_verdicts
from gapless.settings import Settings

log = get_logger("gapless.recovery")

BREAKER_CLOSED = "closed"
#: Why a round left its integrator work undone (``recovery_round_skipped``).
BREAKER_OPEN = "breaker_open"
CREDENTIALS_REFUSED = "credentials_refused"


@dataclass(frozen=True)
class RecoveryOptions:
    interval_s: float = 10.0
    stuck_after_s: float = 300.0
    batch: int = 100
    max_attempts: int = 10
    concurrency: int = 16
    #: A round claims again while its claims come back full, up to this many claims; the next
    #: claim is made while the last orphans of the previous one are still in flight, so the
    #: integrator's slots never drain between batches.
    claims_per_round: int = 10
    backoff: Backoff = field(default_factory=Backoff)
    #: A transient failure while the breaker is open is not due before it can half-open.
    breaker_reset_s: float = 10.0
    drain_timeout_s: float = 30.0
    #: When to ask GİB's verdict on ISSUED documents (None: never; also never for an adapter
    #: without ``status``).
    gib: GibPolicy | None = field(default_factory=GibPolicy)
    #: The process settings a channel correction needs (lease, lock timeout, recipient TTL).
    settings: Settings = field(default_factory=Settings)


#: Outcomes of one orphan as reported in a round (``Outcome`` plus the loop's own two).
RELEASED = "released"
FAILED = "failed"


@dataclass
class RoundSummary:
    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    skipped: str | None = None
    breaker: str = BREAKER_CLOSED
    seconds: float = 0.0
    #: The claim filled its batch: more orphans are probably waiting, start the next round now.
    batch_full: bool = False
    #: The questions about GİB's verdict asked in this round.
    verdicts: VerdictSummary = field(default_factory=VerdictSummary)
    #: Invoices refused for their channel that this round corrected.
    corrected: int = 0
    #: The round's alarms, each naming the number and the invoice the integrator holds it for
    #: ("acme: number ABC2026000000061 is held by invoice 'shop-61' at the integrator").
    alarms: list[str] = field(default_factory=list)

    def add(self, other: RoundSummary) -> None:
        self.claimed += other.claimed
        self.outcomes.update(other.outcomes)
        self.skipped = self.skipped or other.skipped
        self.batch_full = other.batch_full
        self.alarms.extend(other.alarms)

    def as_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"claimed": self.claimed, "breaker": self.breaker,
                                     "seconds": round(self.seconds, 3)}
        for name in metrics.OUTCOMES:
            fields[name] = self.outcomes.get(name, 0)
        if self.corrected:
            fields["channel_corrected"] = self.corrected
        if self.alarms:
            fields["alarms"] = list(self.alarms)
        if self.verdicts.claimed:
            fields["gib_claimed"] = self.verdicts.claimed
            fields.update({f"gib_{name}": count for name, count in self.verdicts.results.items()})
        return fields

    def line(self) -> str:
        """One line for people (``gapless recovery --once`` prints it)."""
        counts = ", ".join(f"{name} {self.outcomes.get(name, 0)}" for name in metrics.OUTCOMES)
        head = f"recovery: claimed {self.claimed} orphan(s): {counts}"
        if self.skipped:
            head += f"; integrator work skipped ({self.skipped})"
        if self.corrected:
            head += f"; corrected the channel of {self.corrected}"
        if self.verdicts.claimed:
            head += f"; {self.verdicts.line()}"
        head = f"{head}; breaker {self.breaker}"
        if self.alarms:
            head += (f"\nALARM ({len(self.alarms)}): " + "; ".join(self.alarms)
                     + f"\nhint: {DUPLICATE_HINT}")
        return head


class _Slot:
    """One held place of the gate, given back once (whichever comes first)."""

    def __init__(self, gate: asyncio.Semaphore) -> None:
        self._gate: asyncio.Semaphore | None = gate

    def release(self) -> None:
        if self._gate is not None:
            self._gate.release()
            self._gate = None


class _Backlog:
    """Orphans of a round claimed but not yet given an integrator slot."""

    def __init__(self) -> None:
        self.waiting = 0
        self.released = False
        self._changed = asyncio.Event()

    def add(self, count: int) -> None:
        self.waiting += count

    def started(self) -> None:
        self.waiting -= 1
        self._changed.set()

    async def below(self, count: int) -> None:
        while self.waiting >= count:
            self._changed.clear()
            await self._changed.wait()


class RecoveryLoop:
    """Rounds of claim-and-reconcile over one database (actor ``recovery``) and one guard (every
    tenant's integrator account: an orphan waits only for its own account's breaker)."""

    def __init__(self, db: Database, guard: Guard,
                 options: RecoveryOptions) -> None:
        self.db = db
        self.guard = guard
        self.options = options
        catalog = Catalog(self.db)
        self.renderer = Renderer(catalog)
        self.corrector = ChannelCorrector(
            self.db, catalog, Router(self.db, catalog, guard, options.settings.recipient_ttl_s),
            options.settings)
        self._stopping = asyncio.Event()
        self._issued = IssuedWriter(self.db)
        #: The integrator refused our credentials when last asked: each round asks one probe
        #: that consumes nothing (and claims nothing) until the answer is not a refusal.
        self._credentials_refused = False
        #: The task running :meth:`run` and when its last round ended (time.monotonic()):
        #: what /healthz and /readyz look at.
        self.task: asyncio.Task[None] | None = None
        self.last_round_end: float | None = None
        #: The operator's state gauges, refreshed after each round (gapless.recovery.metrics).
        self.state_gauges = metrics.StateGauges(db, options.settings,
                                                max_attempts=options.max_attempts)

    def _breaker_state(self) -> str:
        return self.guard.state

    def _held_back(self, tenant: str | None = None) -> str | None:
        """Why the integrator cannot take work now (None: it can): ``tenant``'s account, or
        without a tenant every account."""
        if self._credentials_refused:
            return CREDENTIALS_REFUSED
        return None if self.guard.accepting(tenant) else BREAKER_OPEN

    async def _credentials_work(self) -> bool:
        """After a refusal of our credentials: ask the integrator something that consumes
        nothing (the worker's probe) and say whether it takes them again. A breaker that refuses
        the probe, or a refusal, is a no; any other answer clears the refusal."""
        try:
            await self.guard.probe(PROBE_TENANT, PROBE_UUID)
        except (IntegratorAuthError, IntegratorUnavailable):
            return False
        except IntegratorError:
            pass  # reachable and not refusing us: the breaker decides the rest
        self._credentials_refused = False
        log.info("integrator_credentials_accepted")
        return True

    def request_stop(self) -> None:
        """No new round, no new orphan; in-flight ones finish (``run`` returns after them)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def aclose(self) -> None:
        """Wait for an outcome commit still in flight (after a cut-off drain); stop a state
        gauge refresh still running."""
        await self._issued.aclose()
        await self.state_gauges.aclose()

    async def stop_requested(self) -> None:
        """Returns once :meth:`request_stop` has been called."""
        await self._stopping.wait()

    # -- one round ---------------------------------------------------------------------------

    async def run_round(self) -> RoundSummary:
        """Claim a batch of orphans and settle each; see the module docstring."""
        started = time.perf_counter()
        summary = RoundSummary(breaker=self._breaker_state())
        log.info("recovery_round_started", breaker=summary.breaker)
        if self._credentials_refused and not await self._credentials_work():
            # One probe per round while refused: no orphan is claimed, no attempt spent.
            summary.skipped = CREDENTIALS_REFUSED
        elif not self.guard.accepting():
            summary.skipped = BREAKER_OPEN
        else:
            if self._breaker_state() != BREAKER_CLOSED:
                # Probe with one orphan at a time: a recovering integrator gets one trial call,
                # not a batch (the claim may return a stuck and a due one; the second goes on
                # only if the first closed the breaker).
                summary.add(await self._claim_and_settle(1, concurrency=1))
                if self._breaker_state() != BREAKER_CLOSED and summary.claimed:
                    summary.skipped = summary.skipped or BREAKER_OPEN
            if summary.skipped is None and not self.stopping:
                summary.add(await self._claim_and_settle(
                    self.options.batch, concurrency=self.options.concurrency,
                    max_claims=self.options.claims_per_round))
            if summary.skipped is None and not self.stopping:
                summary.corrected = await self._correct_channels()
            if summary.skipped is None and not self.stopping:
                summary.verdicts = await self._follow_verdicts()
        summary.breaker = self._breaker_state()
        summary.seconds = time.perf_counter() - started
        metrics.ROUND_SECONDS.observe(summary.seconds)
        if summary.skipped:
            metrics.ROUNDS.labels(result="skipped").inc()
            log.warning("recovery_round_skipped", reason=summary.skipped,
                        **summary.as_fields())
        else:
            metrics.ROUNDS.labels(result="completed").inc()
        log.info("recovery_round_finished", **summary.as_fields())
        return summary

    async def _correct_channels(self) -> int:
        """Correct invoices refused for their channel that no worker corrected (recovery's own
        resends, or a worker that gave the delivery up): each successor sealed, the refused
        number voided naming it, the successor sent like an orphan (gapless.issuing.correction)."""
        corrected = 0
        for tenant, invoice_id in await self.corrector.waiting(self.options.batch):
            if self.stopping or self._held_back():
                break
            if self._held_back(tenant):
                continue  # its account's breaker is open: a later round corrects it
            try:
                correction = await self.corrector.correct(invoice_id, tenant=tenant)
            except NothingToCorrect as exc:
                await self.corrector.give_up(invoice_id, exc.reason, tenant=tenant)
                log.warning("channel_not_corrected", invoice_id=invoice_id, reason=exc.reason)
                continue
            except (RecipientUnavailable, ReservationLockTimeout) as exc:
                log.info("channel_correction_deferred", invoice_id=invoice_id,
                         error=type(exc).__name__)
                break
            corrected += 1
            log.info("channel_corrected", invoice_id=invoice_id,
                     voided_number=correction.voided_number, successor=correction.successor_id)
            sending = correction.claim.sending
            if sending is not None:  # claimed for us: send it now (else its owner does)
                result = await reconcile(
                    self.db, self.guard, self.renderer, sending, backoff=self.options.backoff,
                    max_attempts=self.options.max_attempts,
                    min_delay_s=self.options.breaker_reset_s)
                metrics.count(result.outcome.value)
                if result.credentials_refused:
                    self._credentials_refused = True
                    break
        return corrected

    async def _follow_verdicts(self) -> VerdictSummary:
        """One batch of questions about GİB's verdict (nothing when not followed)."""
        policy, guard = self.options.gib, self.guard
        if policy is None or not guard.follows_gib_status:
            return VerdictSummary()
        return await follow_verdicts(self.db, guard, policy,
                                     concurrency=self.options.concurrency,
                                     stopping=lambda: self.stopping)

    async def _claim_and_settle(self, batch: int, *, concurrency: int,
                                max_claims: int = 1) -> RoundSummary:
        summary = RoundSummary()
        gate = asyncio.Semaphore(concurrency)
        backlog = _Backlog()
        tasks: list[asyncio.Task[str]] = []
        first_claim = time.monotonic()
        async with asyncio.TaskGroup() as group:
            for claim in range(max_claims):
                stuck_after_s = self.options.stuck_after_s
                if claim:
                    # Claim the next batch just before the slots run dry: once fewer orphans
                    # than slots are still waiting for one.
                    await backlog.below(concurrency)
                    if (self.stopping or backlog.released
                            or self._breaker_state() != BREAKER_CLOSED):
                        break
                    # Never our own orphans still in flight: their leases are younger than
                    # this round (a second past it, for the clocks of two hosts).
                    stuck_after_s = max(stuck_after_s, time.monotonic() - first_claim + 1.0)
                # Not the orphans of a tenant whose account is not answering: they would only
                # be put back, and crowd the others out of the batch.
                scope = self.guard.scope()
                orphans = await claim_orphans(
                    self.db, stuck_after_s=stuck_after_s, batch=batch,
                    max_attempts=self.options.max_attempts, only=scope.only,
                    excluded=scope.excluded)
                summary.claimed += len(orphans)
                summary.batch_full = len(orphans) >= batch
                backlog.add(len(orphans))
                tasks += [group.create_task(self._settle(orphan, gate, backlog,
                                                         summary.alarms))
                          for orphan in orphans]
                if not summary.batch_full:
                    break
        for task in tasks:
            outcome = task.result()
            summary.outcomes[outcome] += 1
            if outcome == RELEASED and summary.skipped is None and not self.stopping:
                summary.skipped = self._held_back() or BREAKER_OPEN
        return summary

    async def _settle(self, orphan: Orphan, gate: asyncio.Semaphore, backlog: _Backlog,
                      alarms: list[str]) -> str:
        sending = orphan.sending
        metrics.FOUND.labels(was=orphan.was.value).inc()
        admitted = await self._admit(gate)
        backlog.started()
        if not admitted:
            backlog.released = True
            return await self._release(orphan)  # a stop came first: put it back, untouched
        slot = _Slot(gate)
        try:
            if self._held_back(sending.tenant):
                # Not started (its account's breaker is open): put it back for the next round
                # (or another instance).
                backlog.released = True
                return await self._release(orphan)
            log.info("orphan_found", invoice_id=sending.invoice_id, tenant=sending.tenant,
                     series=sending.series, number=sending.number, attempt=sending.attempt,
                     was=orphan.was.value)
            metrics.IN_FLIGHT.inc()
            try:
                result = await reconcile(
                    self.db, self.guard, self.renderer, sending, backoff=self.options.backoff,
                    max_attempts=self.options.max_attempts,
                    min_delay_s=self.options.breaker_reset_s, record_issued=self._issued.issued,
                    calls_done=slot.release,  # the slot bounds integrator calls, not writes
                    orphan=orphan)
            except Exception as exc:
                # The database could not be reached (reconcile records every other failure as
                # ERROR, counted against max_attempts): the row stays SENDING under our lease,
                # its attempt counted by the claim, and a later round asks the integrator again.
                log.error("orphan_failed", invoice_id=sending.invoice_id,
                          number=sending.number, error=type(exc).__name__, detail=str(exc))
                metrics.count(FAILED)
                return FAILED
            finally:
                metrics.IN_FLIGHT.dec()
        finally:
            slot.release()
        if result.credentials_refused:
            self._credentials_refused = True
        if result.outcome is Outcome.UNAVAILABLE:  # put back by reconcile: nothing was sent
            backlog.released = True
            metrics.count(RELEASED)
            return RELEASED
        metrics.count(result.outcome.value)
        if result.outcome is Outcome.ALARM:
            alarms.append(f"{sending.tenant}: {result.detail}")
        return result.outcome.value

    async def _admit(self, gate: asyncio.Semaphore) -> bool:
        """Take a slot of the gate, unless a stop is requested first (then False, no slot)."""
        if self.stopping:
            return False
        acquire = asyncio.ensure_future(gate.acquire())
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({acquire, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
        took = acquire.done() and not acquire.cancelled()
        if took and self.stopping:
            gate.release()
            return False
        return took

    async def _release(self, orphan: Orphan) -> str:
        put_back = await release_orphan(self.db, orphan)
        log.info("orphan_released", invoice_id=orphan.sending.invoice_id,
                 number=orphan.sending.number, was=orphan.was.value, put_back=put_back)
        metrics.count(RELEASED)
        return RELEASED

    # -- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds until :meth:`request_stop`; a full batch is followed at once by the next."""
        self.task = asyncio.current_task()
        while not self.stopping:
            try:
                summary = await self.run_round()
            except Exception as exc:
                # The database is unreachable, most likely: keep the daemon up and try again
                # after the interval. Claimed rows stay SENDING under our lease until stale.
                metrics.ROUNDS.labels(result="failed").inc()
                log.error("recovery_round_failed", error=type(exc).__name__,
                          detail=str(exc).splitlines()[0] if str(exc) else "")
                summary = RoundSummary()
            else:
                self.last_round_end = time.monotonic()
                metrics.LAST_ROUND.set(time.time())
            self.state_gauges.maybe_refresh()
            if (summary.batch_full or summary.verdicts.full) and summary.skipped is None:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.options.interval_s)


async def serve(loop: RecoveryLoop) -> None:
    """Run ``loop`` until SIGTERM/SIGINT, then drain in-flight orphans up to the deadline."""
    running = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(sig, loop.request_stop)
    task = asyncio.create_task(loop.run())
    stop_requested = asyncio.create_task(loop.stop_requested())
    try:
        await asyncio.wait({task, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            log.info("recovery_stopping", drain_timeout_s=loop.options.drain_timeout_s)
            try:
                await asyncio.wait_for(asyncio.shield(task), loop.options.drain_timeout_s)
            except TimeoutError:
                log.warning("recovery_drain_timeout", drain_timeout_s=loop.options.drain_timeout_s)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        else:
            task.result()
    finally:
        stop_requested.cancel()
        await loop.aclose()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.remove_signal_handler(sig)
    log.info("recovery_stopped")
