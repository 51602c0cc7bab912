"""The guard in front of every integrator call: a circuit breaker, then bounded jittered retries.

``GuardedIntegrator`` wraps any ``Integrator``: one per integrator account in each process
(:mod:`gapless.integrator.accounts`; ``name`` — ``worker``, ``recovery:acme`` — tells them apart
in metrics and logs). Per call:

1. **Retry** (tenacity): only ``TransientIntegratorError`` is retried, never a business outcome,
   never ``asyncio.CancelledError``, never ``IntegratorUnavailable``. At most
   ``settings.retry_attempts`` attempts; no attempt starts after ``settings.retry_max_s``;
   full-jitter exponential waits from ``settings.retry_wait_s``. A resend after an unknown
   outcome is safe: the integrator answers 409 with our invoice_id (``DuplicateOfMine``).
2. **Breaker** (pybreaker) around each attempt: ``settings.breaker_fail_max`` consecutive
   transient failures open it; while open, calls fail fast with ``IntegratorUnavailable``
   without touching the network; after ``settings.breaker_reset_timeout_s`` one trial call is
   let through (half-open) and its outcome closes or re-opens the breaker.

Why the breaker is driven by hand rather than with ``breaker.calling()``: pybreaker counts every
``BaseException`` leaving the block, so a cancelled call (worker shutdown) would count as a
failure, and an excluded exception counts as a success; and in half-open it lets every
concurrent call through. Here pybreaker keeps the state machine, counters and listeners, while
the guard decides admission (one trial at a time) and reports only real outcomes: a business
answer (rejection, duplicate) is a success — the integrator is up and answering — a transient
error is a failure, and a cancellation is neither. Outcomes of calls admitted before the last
state change are ignored, so a slow call from before the breaker opened cannot close it.

:class:`Guard` is the one protocol the worker, recovery and the channel correction type the
guarded integrator with; what its answers mean for an invoice is decided in one place,
:mod:`gapless.issuing.outcome`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from pybreaker import (
    STATE_CLOSED,
    STATE_HALF_OPEN,
    STATE_OPEN,
    CircuitBreaker,
    CircuitBreakerError,
    CircuitBreakerListener,
    CircuitBreakerState,
    CircuitMemoryStorage,
)
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from gapless.integrator.base import (
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    FollowsGibStatus,
    GibStatus,
    Integrator,
    PermanentRejection,
    Receipt,
    Recipient,
    TransientIntegratorError,
    follows_gib_status,
)
from gapless.logging import get_logger

if TYPE_CHECKING:
    from gapless.settings import Settings

T = TypeVar("T")
log = get_logger("gapless.integrator")

#: The integrator answered, and the answer is about the document: the integrator is healthy.
BUSINESS_OUTCOMES: Final = (PermanentRejection, DuplicateOfMine, DuplicateOfAnother)
STATE_CODES: Final = {STATE_CLOSED: 0, STATE_HALF_OPEN: 1, STATE_OPEN: 2}

BREAKER_STATE = Gauge("gapless_breaker_state",
                      "Integrator circuit breaker: 0 closed, 1 half-open, 2 open", ["name"])
CALLS = Counter("gapless_integrator_calls", "Integrator calls (attempts) by outcome",
                ["name", "operation", "outcome"])
LATENCY = Histogram("gapless_integrator_latency_seconds",
                    "Duration of integrator calls that reached the integrator",
                    ["name", "operation"],
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))


class IntegratorUnavailable(TransientIntegratorError):
    """The circuit breaker is open, so the call was not made; nothing was sent.

    Keep the number pinned and retry after the breaker's reset timeout (``accepting()`` says when).
    """


@dataclass(frozen=True)
class TenantScope:
    """Whose work the integrator can take now: the tenants ``only`` (None: any), none of
    ``excluded`` — the tenants of the accounts whose breaker refuses calls."""

    only: tuple[str, ...] | None = None
    excluded: tuple[str, ...] = ()


#: Every tenant's work (one account, or every account answering).
EVERY_TENANT: Final = TenantScope()


class Guard(Protocol):
    """How every loop calls the guarded integrator: :class:`GuardedIntegrator` (one account), or
    :class:`gapless.integrator.accounts.Accounts` (each tenant's account; what every process
    holds); tests may script another.

    Each call goes through the breaker and the retries of the tenant's account; it returns the
    integrator's answer or raises one of the outcome exceptions of
    :mod:`gapless.integrator.base` (``IntegratorUnavailable`` when the breaker refused it:
    nothing was sent).
    """

    #: The adapter can look a number up (``lookup``); without, callers ask by UUID.
    looks_up_numbers: bool
    #: The adapter answers GİB's verdict (``status``); without, nobody asks it.
    follows_gib_status: bool

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"``: the breaker work can flow through."""
        ...

    def accepting(self, tenant: str | None = None) -> bool:
        """Whether a call for ``tenant`` now would be let through (so a number may be sealed
        for it); without a tenant, whether any call would (there is work to take)."""
        ...

    async def probe(self, tenant: str, uuid: str) -> Receipt | None:
        """A lookup by UUID that consumes nothing, asked of an account that lets calls through:
        whether the integrator is reachable and takes our credentials again."""
        ...

    def scope(self) -> TenantScope:
        """Whose work may be claimed now (recovery claims no orphan of a tenant whose account's
        breaker refuses calls)."""
        ...

    async def send(self, document: Document) -> Receipt: ...

    async def lookup(self, tenant: str, number: str) -> Receipt | None: ...

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None: ...

    async def recipient(self, tenant: str, tax_id: str) -> Recipient: ...

    def registry_of(self, tenant: str) -> str:
        """The integrator account ``tenant``'s recipient answers come from ('' for the global
        one): recipient answers are cached per account."""
        ...

    async def status(self, tenant: str, uuid: str) -> GibStatus | None: ...


class _Failure(Exception):
    """Stands for a failed call when its outcome is reported to pybreaker."""


_OUTCOME_NAMES: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (DuplicateOfMine, "duplicate_of_mine"),
    (DuplicateOfAnother, "duplicate_of_another"),
    (PermanentRejection, "rejected"),
    (IntegratorUnavailable, "unavailable"),
    (TransientIntegratorError, "transient"),
    (asyncio.CancelledError, "cancelled"),
)


def _outcome(exc: BaseException) -> str:
    """The ``outcome`` label of a call that raised ``exc``."""
    return next((name for cls, name in _OUTCOME_NAMES if isinstance(exc, cls)), "error")


def _retryable(exc: BaseException) -> bool:
    # An open breaker is not retried here: failing fast is the point of the breaker.
    return isinstance(exc, TransientIntegratorError) and not isinstance(exc, IntegratorUnavailable)


class _StateListener(CircuitBreakerListener):
    def __init__(self, guard: GuardedIntegrator) -> None:
        self._guard = guard

    def state_change(self, cb: CircuitBreaker, old_state: CircuitBreakerState | None,
                     new_state: CircuitBreakerState) -> None:
        self._guard._state_changed(new_state.name)


class GuardedIntegrator:
    """An ``Integrator`` behind a circuit breaker and bounded retries (see the module docstring).

    Not thread-safe; safe for any number of tasks of one event loop (admission and outcome
    reporting are synchronous, so they never interleave).
    """

    def __init__(self, integrator: Integrator, settings: Settings, *, name: str) -> None:
        self.name = name
        self._integrator = integrator
        #: Whether the adapter can look a number up (``lookup``); without, callers ask by UUID.
        self.looks_up_numbers: bool = getattr(integrator, "looks_up_numbers", True)
        #: Whether the adapter answers GİB's verdict (``status``); without, nobody asks it.
        self.follows_gib_status: bool = follows_gib_status(integrator)
        self._storage = CircuitMemoryStorage(STATE_CLOSED)
        self._breaker = CircuitBreaker(
            fail_max=settings.breaker_fail_max,
            reset_timeout=settings.breaker_reset_timeout_s,
            state_storage=self._storage,
            listeners=[_StateListener(self)],
            name=name,
            throw_new_error_on_trip=False,
        )
        self._fail_max = settings.breaker_fail_max
        self._reset_timeout = timedelta(seconds=settings.breaker_reset_timeout_s)
        #: The retry policy (its stop and wait; ``_retrying`` runs the loop).
        self._policy = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(settings.retry_attempts)
            | stop_before_delay(settings.retry_max_s),
            wait=wait_random_exponential(multiplier=settings.retry_wait_s,
                                         max=settings.retry_max_s),
            reraise=True,
        )
        self._epoch = 0  # bumped on every state change; outcomes of older calls are ignored
        self._trial_in_flight = False
        BREAKER_STATE.labels(name).set(STATE_CODES[STATE_CLOSED])
        #: This breaker's labelled counters and histograms, looked up once each.
        self._calls: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    # -- the Integrator protocol ---------------------------------------------------------------

    async def send(self, document: Document) -> Receipt:
        """Send through the breaker, retrying transient failures (the same number every time)."""
        return await self._retrying("send", lambda: self._integrator.send(document),
                                    tenant=document.tenant, number=document.number,
                                    invoice_id=document.invoice_id)

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Look up through the breaker, retrying transient failures."""
        return await self._retrying("lookup", lambda: self._integrator.lookup(tenant, number),
                                    tenant=tenant, number=number)

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        """Look up a document's UUID through the breaker, retrying transient failures."""
        return await self._retrying("lookup_uuid",
                                    lambda: self._integrator.lookup_uuid(tenant, uuid),
                                    tenant=tenant, uuid=uuid)

    async def status(self, tenant: str, uuid: str) -> GibStatus | None:
        """GİB's verdict on a document, by its UUID, through the breaker, retrying transient
        failures. Only for an adapter that answers it (``follows_gib_status``); raises
        TypeError otherwise."""
        adapter = self._integrator
        if not self.follows_gib_status or not isinstance(adapter, FollowsGibStatus):
            raise TypeError(f"the integrator adapter {type(adapter).__name__} does not answer "
                            "GİB's status")
        return await self._retrying("status", lambda: adapter.status(tenant, uuid),
                                    tenant=tenant, uuid=uuid)

    def registry_of(self, tenant: str) -> str:
        """One account serves every tenant here: the global one's answers ('')."""
        return ""

    async def recipient(self, tenant: str, tax_id: str) -> Recipient:
        """The recipient check through the breaker, retrying transient failures (the tax id is
        never logged; ``tenant`` is who asks, one of this account's)."""
        return await self._retrying("recipient", lambda: self._integrator.recipient(tax_id))

    async def probe(self, tenant: str, uuid: str) -> Receipt | None:
        """A lookup by UUID that consumes nothing (see :class:`Guard`)."""
        return await self.lookup_uuid(tenant, uuid)

    def scope(self) -> TenantScope:
        """Every tenant: one account takes all its tenants' calls or none (``accepting``)."""
        return EVERY_TENANT

    async def aclose(self) -> None:
        await self._integrator.aclose()

    # -- breaker state ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"``."""
        return self._breaker.current_state

    def accepting(self, tenant: str | None = None) -> bool:
        """Whether a call now would be let through (so a worker may reserve a number for it);
        every tenant of the account is alike.

        False while the breaker is open and its reset timeout has not elapsed, and while the
        half-open trial call is in flight; True when closed or ready for a trial.
        """
        state = self._breaker.current_state
        if state == STATE_CLOSED:
            return True
        if self._trial_in_flight:
            return False
        return state == STATE_HALF_OPEN or self._reset_elapsed()

    def _reset_elapsed(self) -> bool:
        opened_at = self._storage.opened_at
        return opened_at is None or datetime.now(UTC) >= opened_at + self._reset_timeout

    def _state_changed(self, new_state: str) -> None:
        """pybreaker listener: every transition (already made) lands here."""
        self._epoch += 1
        BREAKER_STATE.labels(self.name).set(STATE_CODES[new_state])
        if new_state == STATE_OPEN:
            log.warning("breaker_opened", breaker=self.name, fail_max=self._fail_max,
                        reset_timeout_s=self._reset_timeout.total_seconds())
        elif new_state == STATE_HALF_OPEN:
            log.info("breaker_half_open", breaker=self.name)
        else:
            log.info("breaker_closed", breaker=self.name)

    def _admit(self) -> tuple[int, bool]:
        """Let a call through or raise ``IntegratorUnavailable``; returns (epoch, is_trial)."""
        state = self._breaker.current_state
        if state == STATE_OPEN:
            if not self._reset_elapsed():
                raise IntegratorUnavailable(f"integrator breaker {self.name!r} is open")
            self._breaker.half_open()
            state = STATE_HALF_OPEN
        if state == STATE_HALF_OPEN:
            if self._trial_in_flight:
                raise IntegratorUnavailable(
                    f"integrator breaker {self.name!r} is half-open, its trial call in flight")
            self._trial_in_flight = True
            return self._epoch, True
        return self._epoch, False

    def _report(self, epoch: int, failure: BaseException | None) -> None:
        """Tell pybreaker how an admitted call ended (success when ``failure`` is None)."""
        if epoch != self._epoch:
            return  # admitted under an earlier state: its outcome says nothing about this one

        def outcome() -> None:
            if failure is not None:
                raise _Failure(type(failure).__name__)

        # pybreaker re-raises a recorded failure; it is already counted (and may have opened it).
        with contextlib.suppress(_Failure, CircuitBreakerError):
            self._breaker.call(outcome)

    # -- one attempt, and the retry loop ---------------------------------------------------------

    async def _attempt(self, operation: str, call: Callable[[], Awaitable[T]],
                       context: dict[str, Any], attempt: int) -> T:
        try:
            epoch, trial = self._admit()
        except IntegratorUnavailable:
            self._count(operation, "unavailable")
            raise
        started = time.perf_counter()
        outcome = "cancelled"
        try:
            result = await call()
        except asyncio.CancelledError:
            raise  # neither success nor failure: not reported to the breaker
        except BUSINESS_OUTCOMES as exc:
            outcome = _outcome(exc)
            self._report(epoch, None)
            raise
        except Exception as exc:
            outcome = _outcome(exc)
            log.warning("integrator_call_failed", breaker=self.name, operation=operation,
                        attempt=attempt, error=type(exc).__name__, detail=str(exc), **context)
            self._report(epoch, exc)
            raise
        else:
            outcome = "not_found" if result is None else "ok"
            self._report(epoch, None)
            return result
        finally:
            if trial:
                self._trial_in_flight = False
            self._count(operation, outcome)
            if outcome != "cancelled":
                latency = self._latency.get(operation)
                if latency is None:
                    latency = self._latency[operation] = LATENCY.labels(self.name, operation)
                latency.observe(time.perf_counter() - started)

    def _count(self, operation: str, outcome: str) -> None:
        calls = self._calls.get((operation, outcome))
        if calls is None:
            calls = self._calls[operation, outcome] = CALLS.labels(self.name, operation, outcome)
        calls.inc()

    async def _retrying(self, operation: str, call: Callable[[], Awaitable[T]],
                        **context: Any) -> T:
        """Attempts until one ends without a retryable error or the policy says stop.

        The policy is tenacity's (``self._policy``: which errors, stop, wait), evaluated on its
        ``RetryCallState`` in tenacity's order: the wait is drawn, then the stop is asked, then
        the sleep. The loop is written out so that the common case, a first attempt that
        answers, costs one state object rather than a pass through tenacity's iteration
        machinery on every call (the worker's hot path).
        """
        policy = self._policy
        state = RetryCallState(policy, None, (), {})
        while True:
            try:
                return await self._attempt(operation, call, context, state.attempt_number)
            except Exception as exc:
                state.set_exception((type(exc), exc, exc.__traceback__))
                if not policy.retry(state):
                    raise
                state.upcoming_sleep = policy.wait(state)
                if policy.stop(state):
                    raise
            await asyncio.sleep(state.upcoming_sleep)
            state.idle_for += state.upcoming_sleep
            state.prepare_for_next_attempt()
