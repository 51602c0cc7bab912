"""A process's ear on one PostgreSQL notification channel (LISTEN), for what it keeps in memory.

A worker keeps some of the database's answers in memory (the recipient answers:
:class:`gapless.issuing.routing.RecipientMemory`) and must drop one when it changes. The table
announces its changes itself (a trigger's NOTIFY, delivered only once its transaction commits);
:class:`Notices` keeps one connection listening and passes every payload on.

What is kept in memory is trusted only while the connection listens. ``on_deaf`` is called
before anything could have been missed — the connection lost, the database restarting or failing
over, a probe unanswered — and ``on_listening`` only once the LISTEN is in place again, so the
keeper drops everything and keeps nothing in between. A silent connection (a network that drops
packets without a reset) is probed every ``probe_s``: a probe not answered within ``probe_s``, or
answered by a session that does not listen (a pooler in transaction mode between), ends the
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, NoReturn

import psycopg
from psycopg import sql

from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.database import connect_kwargs
from gapless.logging import get_logger

log = get_logger(__name__)

#: How often a listening connection that heard nothing is probed (and how long a probe may take).
PROBE_S = 5.0
#: Waits between attempts to listen again: from the first, doubling up to the last.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0


#: Whether this session listens on a channel (a probe of the listening connection).
_STILL_LISTENING = "SELECT EXISTS (SELECT 1 FROM pg_listening_channels() AS c WHERE c = %s)"


class NotListening(Exception):
    """The listening connection answered, but its session does not listen (a pooler between)."""


class Notices:
    """One connection listening on ``channel``; its payloads go to ``on_notice``.

    ``on_listening()`` is called each time the LISTEN is in place (at start, after every
    reconnection), ``on_deaf()`` each time it stops being (before the first one too: the keeper
    starts deaf). Callbacks run in the event loop and must not block.
    """

    def __init__(self, database_url: str, channel: str, *, on_notice: Callable[[str], None],
                 on_listening: Callable[[], None], on_deaf: Callable[[], None],
                 actor: str = "worker", probe_s: float = PROBE_S) -> None:
        self._conninfo = driver_conninfo(database_url)
        self._connect: dict[str, Any] = {"autocommit": True,
                                         **connect_kwargs(actor, f"gapless-{actor}-listen")}
        self._channel = channel
        self._on_notice = on_notice
        self._on_listening = on_listening
        self._on_deaf = on_deaf
        self._probe_s = probe_s
        self._task: asyncio.Task[None] | None = None
        #: Whether the LISTEN is in place now.
        self.listening = False
        #: Times the LISTEN was put in place (1 after the first; tests and metrics).
        self.sessions = 0

    def start(self) -> None:
        """Start listening in the background (returns at once; see :attr:`listening`)."""
        if self._task is None:
            self._deaf()
            self._task = asyncio.create_task(self._run(), name=f"notices-{self._channel}")

    async def aclose(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._deaf()

    async def _run(self) -> None:
        delay = RETRY_FIRST_S
        while True:
            try:
                await self._listen()
            except Exception as exc:  # the connection, a probe, the database away
                error = type(exc).__name__
            finally:
                was_listening = self.listening
                self._deaf()
            # After a session that listened, try again soon; after a failed attempt, back off.
            delay = RETRY_FIRST_S if was_listening else min(delay * 2, RETRY_MAX_S)
            log.warning("notices_lost", channel=self._channel, error=error, retry_s=delay)
            await asyncio.sleep(delay)

    async def _listen(self) -> NoReturn:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._connect)
        async with conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            self.listening = True
            self.sessions += 1
            self._on_listening()
            log.debug("notices_listening", channel=self._channel, sessions=self.sessions)
            loop = asyncio.get_running_loop()
            while True:
                deadline = loop.time() + self._probe_s
                while (left := deadline - loop.time()) > 0 and await _readable(conn, left):
                    async for notify in conn.notifies(timeout=left, stop_after=1):
                        self._on_notice(notify.payload)
                # Is the connection still there, and still listening? (Behind a pooler that
                # hands each statement to another server connection it may not be.)
                probe = await asyncio.wait_for(conn.execute(_STILL_LISTENING, (self._channel,)),
                                               self._probe_s)
                row = await probe.fetchone()
                if row is None or not row[0]:
                    raise NotListening(f"the connection no longer listens on {self._channel}")
                # Notifications that came with the probe's answer, kept by the driver.
                async for notify in conn.notifies(timeout=0):
                    self._on_notice(notify.payload)

    def _deaf(self) -> None:
        self.listening = False
        self._on_deaf()


async def _readable(conn: psycopg.AsyncConnection[Any], seconds: float) -> bool:
    """Whether the server sent ``conn`` something (a notification, or the connection's end)
    within ``seconds``. One wake-up when it does: the driver's own wait for notifications
    wakes every 0.1 s to look again (an idle worker spent 8.5 ms of CPU a second with it, 2
    without)."""
    loop = asyncio.get_running_loop()
    sent = loop.create_future()
    fd = conn.fileno()
    loop.add_reader(fd, _settle, sent)
    try:
        await asyncio.wait([sent], timeout=seconds)
    finally:
        loop.remove_reader(fd)
    return sent.done()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
