"""One statement for the calls that arrive while another runs.

Many concurrent tasks each want a small statement of their own: a read of one key, the write of
one outcome. Each alone costs a pooled connection's checkout, a round trip and, for a write, a
commit that waits for its WAL flush. :class:`Grouped` runs one statement at a time: the calls
that arrive while it runs wait and go together into the next (up to ``max_batch`` items, in
arrival order), one statement for all of them. Without a linger (below), a call that arrives
while no statement runs goes at once (a statement of one), so a quiet process adds no latency.
Each caller gets its own item's answer, only after the statement that holds it has ended.

With ``linger_s`` (:class:`Gathering`), a statement about to start with fewer than ``enough``
calls waiting waits up to ``linger_s`` for more (and starts as soon as that many are
waiting): more calls per statement, and the callers it answers go on together, their next steps
run one after another while the CPU's caches hold that code — a few milliseconds of latency for
much less CPU per call on a busy worker (docs/benchmarks.md, "Statements that wait a
millisecond for company").

A statement that fails: with ``one`` (a statement for a single item), a group of several is
tried again item by item, so one bad item fails only its own caller; without it, every caller
of the group gets the error. Either way the next calls go on in a statement of their own. A
caller cancelled while it waits is simply not answered (its item may still be in the statement
already sent); the runner cancelled (the process stops) cancels every caller still waiting, so
none waits forever.

Used for the ISSUED outcomes' group commit (:mod:`gapless.issuing.issued`) and the API's
existence checks of single POSTs (:mod:`gapless.api.lookups`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from gapless.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Gathering:
    """A short wait before a group's statement, for ``enough`` calls to be waiting: up to
    ``seconds``, ended early by :meth:`arrived` once that many are. ``seconds`` 0: no wait."""

    __slots__ = ("_waits", "enough", "seconds")

    def __init__(self, seconds: float = 0.0, enough: int = 1) -> None:
        if seconds < 0 or enough < 1:
            raise ValueError("seconds must be at least 0 and enough at least 1")
        self.seconds = seconds
        self.enough = enough
        self._waits: set[asyncio.Future[None]] = set()

    def twin(self) -> Gathering:
        """A gathering with the same wait, for another queue of calls (its waits its own)."""
        return Gathering(self.seconds, self.enough)

    def arrived(self, waiting: int) -> None:
        """Told the number of calls waiting after each arrival: enough of them end the waits."""
        if waiting >= self.enough:
            for wait in self._waits:
                _wake(wait)

    async def wait(self, waiting: int) -> None:
        """Return at once when ``waiting`` calls are enough or there is no linger; else when
        :meth:`arrived` says enough are, or after ``seconds``."""
        if self.seconds <= 0 or waiting >= self.enough:
            return
        loop = asyncio.get_running_loop()
        wait: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(self.seconds, _wake, wait)
        self._waits.add(wait)
        try:
            await wait
        finally:
            timer.cancel()
            self._waits.discard(wait)


def _wake(wait: asyncio.Future[None]) -> None:
    if not wait.done():
        wait.set_result(None)


class Grouped(Generic[T, R]):
    """Calls of ``many`` (one answer per item, in order) grouped as described above.

    ``event`` names the warning logged when a group of several fails and is tried again item by
    item (with its size and the error's type); ``linger_s`` and ``enough``: the wait for company
    before each statement (default: none).
    """

    def __init__(self, many: Callable[[list[T]], Awaitable[Sequence[R]]], *, max_batch: int,
                 one: Callable[[T], Awaitable[R]] | None = None,
                 event: str = "group_statement_failed",
                 linger_s: float = 0.0, enough: int = 1) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._many = many
        self._one = one
        self._max_batch = max_batch
        self._event = event
        self._linger = Gathering(linger_s, enough)
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, item: T) -> R:
        """``item``'s answer, once the statement holding it has ended (or its error)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._linger.arrived(len(self._waiting))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future

    async def aclose(self) -> None:
        """Wait for the statements in flight or due, if any (their failures are their
        callers')."""
        if self._runner is not None:
            await asyncio.wait({self._runner})

    async def _run(self) -> None:
        group: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                await self._linger.wait(len(self._waiting))
                group = self._waiting[:self._max_batch]
                del self._waiting[:self._max_batch]
                await self._answer(group)
        except asyncio.CancelledError as exc:
            for _, future in (*group, *self._waiting):
                fail(future, exc)
            self._waiting.clear()
            raise

    async def _answer(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            answers = await self._many([item for item, _ in group])
            if len(answers) != len(group):
                raise RuntimeError(f"{len(answers)} answers for {len(group)} items")
        except Exception as exc:
            if self._one is None or len(group) == 1:
                for _, future in group:
                    fail(future, exc)
                return
            log.warning(self._event, size=len(group), error=type(exc).__name__)
            await self._one_by_one(self._one, group)
            return
        for (_, future), answer in zip(group, answers, strict=True):
            if not future.done():  # the caller may have been cancelled meanwhile
                future.set_result(answer)

    @staticmethod
    async def _one_by_one(one: Callable[[T], Awaitable[R]],
                          group: list[tuple[T, asyncio.Future[R]]]) -> None:
        for item, future in group:
            try:
                answer = await one(item)
            except Exception as exc:
                fail(future, exc)
            else:
                if not future.done():
                    future.set_result(answer)


def fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    """Answer a waiting caller's ``future`` with ``exc`` (a cancellation cancels it); a future
    already answered, or whose caller is gone, is left alone. Also the group seal's
    (:mod:`gapless.issuing.seals`)."""
    if future.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(exc)
