"""The group seal: the intakes of one tenant that wait together go in one statement.

Claims of one series serialise on its counter row. A worker process runs many deliveries at once,
and in a burst many of them wait for the same counters; one statement each would cost each a
round trip, an executor and a commit (a WAL flush). The queue lets at most ``per_tenant``
intakes of a tenant run at once (one holding its counter rows, one queued behind it in
PostgreSQL so the rows never idle between them); the drafts that arrive meanwhile wait here,
holding nothing, and go together in the next statement (``intake_drafts``, up to
``max_batch``), whatever their series — a routed tenant's e-Fatura and e-Arşiv drafts share it:
one commit for all, each series' fresh numbers in arrival order. A draft that finds fewer than
``per_tenant`` intakes of its tenant running goes at once (a batch of one) — unless the queue
lingers (``linger_s``, the worker's ``GAPLESS_GROUP_LINGER_MS``): then a statement about to start
with fewer than ``enough`` drafts waits that long at most for company.

A waiting draft's ``ready`` check runs when its batch is formed, not when it arrived: a stop
requested or a breaker opened meanwhile holds it back with nothing sealed, and its caller gets
the check's answer instead of a claim. Each caller gets its own draft's claim, after the commit
that holds it.

A batch that fails (nothing of it stored or consumed) fails every draft the same way when the
cause is theirs alike: an unknown series that every draft of the batch names, the database out
of reach; each caller requeues. Any other failure — a lock on one invoice row not granted in
time, a deadlock with another process's batch that holds a duplicate of one of its messages, an
unknown series among others — is retried one draft per statement, so one row cannot fail its
neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from gapless.errors import UnknownSeriesError
from gapless.ledger.database import Database, outlast
from gapless.ledger.grouped import Gathering, fail
from gapless.ledger.invoices import Claim, Draft, intake, intake_many
from gapless.ledger.sqlstates import is_database_unavailable
from gapless.logging import get_logger

log = get_logger("gapless.issuing")

#: Intakes of one tenant a process runs at once: one holding its counter rows, one queued behind
#: it in PostgreSQL so the rows never idle between them; the rest wait in the process.
PER_TENANT = 2
#: Drafts in one statement at most (a worker's deliveries in flight are fewer by default).
MAX_BATCH = 64

H = TypeVar("H")


@dataclass(eq=False)
class _Waiting(Generic[H]):
    """A draft waiting for its tenant's next statement, and its caller's future."""

    draft: Draft
    profile_version: int | None
    at: datetime | None
    ready: Callable[[], H | None]
    future: asyncio.Future[Claim | H]
    #: Taken into a statement: from then on its caller waits for the statement's end.
    sent: bool = False


class _Tenant:
    """One tenant's drafts waiting, and how many of its statements are running."""

    __slots__ = ("gathering", "running", "waiting")

    def __init__(self, gathering: Gathering) -> None:
        self.waiting: deque[_Waiting[Any]] = deque()
        self.running = 0
        self.gathering = gathering


class SealQueue:
    """Intakes of many concurrent deliveries, grouped per tenant (one per worker process).

    ``before_commit`` (tests, fault injection) runs each statement in an explicit transaction
    and is awaited with its locks held, just before the commit, when it sealed or leased any.
    ``on_statement(drafts, seconds)`` is told of every statement that committed (metrics).
    ``linger_s`` and ``enough``: a tenant's statement about to start with fewer than ``enough``
    drafts waits up to ``linger_s`` for more (:class:`~gapless.ledger.grouped.Gathering`).
    """

    def __init__(self, db: Database, *, lease_s: float, lock_timeout_ms: int,
                 per_tenant: int = PER_TENANT, max_batch: int = MAX_BATCH,
                 before_commit: Callable[[], Awaitable[None]] | None = None,
                 on_statement: Callable[[int, float], None] | None = None,
                 linger_s: float = 0.0, enough: int = 1) -> None:
        if per_tenant < 1 or max_batch < 1:
            raise ValueError("per_tenant and max_batch must be at least 1")
        #: Each tenant's queue gets a twin of it (a tenant's arrivals end its own waits only).
        self._gathering = Gathering(linger_s, enough)
        self._db = db
        self._lease_s = lease_s
        self._lock_timeout_ms = lock_timeout_ms
        self._per_tenant = per_tenant
        self._max_batch = max_batch
        self._before_commit = before_commit
        self._on_statement = on_statement
        self._tenants: dict[str, _Tenant] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def intake(self, draft: Draft, *, profile_version: int | None,
                     at: datetime | None = None,
                     ready: Callable[[], H | None] = lambda: None) -> Claim | H:
        """The draft's claim (:func:`gapless.ledger.invoices.intake`), committed — or, when its
        turn comes and ``ready()`` answers something, that answer, with nothing stored or sealed.
        Raises what the intake raises (ReservationLockTimeout, UnknownSeriesError, a database
        error)."""
        key = draft.tenant
        tenant = self._tenants.get(key)
        if tenant is None:
            tenant = self._tenants[key] = _Tenant(self._gathering.twin())
        future: asyncio.Future[Claim | H] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(draft, profile_version, at, ready, future)
        tenant.waiting.append(waiting)
        tenant.gathering.arrived(len(tenant.waiting))
        if tenant.running < self._per_tenant:
            tenant.running += 1
            task = asyncio.create_task(self._run(key, tenant))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if not waiting.sent:
                future.cancel()  # still waiting: nothing of it is sent, and nothing will be
                raise
            # Its statement is on its way: as for every statement (to_completion), the
            # caller's cancellation takes effect once it has ended — a commit waiting for a
            # synchronous standby is never abandoned half-way.
            await outlast(future, exc)
            raise  # outlast always raises; for the type checker

    async def aclose(self) -> None:
        """Wait for the statements in flight, if any (their callers may be gone)."""
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks)

    async def _run(self, key: str, tenant: _Tenant) -> None:
        batch: list[_Waiting[Any]] = []
        try:
            while tenant.waiting:
                await tenant.gathering.wait(len(tenant.waiting))
                batch = self._take(tenant)
                if batch:
                    await self._seal(batch)
        except BaseException as exc:
            # Cancelled (the loop is closing): no caller is left waiting forever.
            for waiting in (*batch, *tenant.waiting):
                fail(waiting.future, exc)
            tenant.waiting.clear()
            raise
        finally:
            tenant.running -= 1
            if not tenant.running and not tenant.waiting:
                self._tenants.pop(key, None)

    def _take(self, tenant: _Tenant) -> list[_Waiting[Any]]:
        """The next batch: waiting drafts in arrival order, up to max_batch, of one seal moment
        (``at``); a draft whose caller is gone is dropped, one that is not ready answered."""
        batch: list[_Waiting[Any]] = []
        while tenant.waiting and len(batch) < self._max_batch:
            waiting = tenant.waiting[0]
            if batch and waiting.at != batch[0].at:
                break
            tenant.waiting.popleft()
            if waiting.future.done():
                continue  # the caller was cancelled while it waited: nothing of it is stored
            try:
                answer = waiting.ready()
            except Exception as exc:
                fail(waiting.future, exc)
                continue
            if answer is not None:
                waiting.future.set_result(answer)
            else:
                waiting.sent = True
                batch.append(waiting)
        return batch

    async def _seal(self, batch: list[_Waiting[Any]]) -> None:
        started = time.perf_counter()
        try:
            claims = await intake_many(
                self._db, [w.draft for w in batch], lease_s=self._lease_s,
                lock_timeout_ms=self._lock_timeout_ms,
                profile_versions=[w.profile_version for w in batch], at=batch[0].at,
                before_commit=self._before_commit)
        except Exception as exc:
            # UnknownSeriesError only when every draft names that series (intake_many).
            if (len(batch) == 1 or isinstance(exc, UnknownSeriesError)
                    or is_database_unavailable(exc)):
                for waiting in batch:
                    fail(waiting.future, exc)
                return
            log.warning("seal_batch_failed", size=len(batch), error=type(exc).__name__)
            await self._one_by_one(batch)
            return
        if self._on_statement is not None:
            self._on_statement(len(batch), time.perf_counter() - started)
        for waiting, claim in zip(batch, claims, strict=True):
            if not waiting.future.done():  # the caller may have been cancelled meanwhile
                waiting.future.set_result(claim)

    async def _one_by_one(self, batch: list[_Waiting[Any]]) -> None:
        for waiting in batch:
            started = time.perf_counter()
            try:
                claim = await intake(self._db, waiting.draft, lease_s=self._lease_s,
                                     lock_timeout_ms=self._lock_timeout_ms,
                                     profile_version=waiting.profile_version, at=waiting.at,
                                     before_commit=self._before_commit)
            except Exception as exc:
                fail(waiting.future, exc)
            else:
                if self._on_statement is not None:
                    self._on_statement(1, time.perf_counter() - started)
                if not waiting.future.done():
                    waiting.future.set_result(claim)
