"""The RabbitMQ consumer: deliveries in, the issuing flow, explicit ack/nack out.

Guarantees: a delivery is acked only once its outcome has committed, and nacked explicitly
otherwise (never dead-lettered by a shutdown or a cancellation); a refused message is acked once
its copy is in ``<prefix>.dead``, or rejected to the broker's own dead-lettering when the copy
cannot be published (never requeued, so it cannot loop); a redelivery, after a reconnect
or on another node, is harmless because the database decides; priorities hold (classic mode:
``prefetch_count`` equals ``--concurrency``; quorum mode: the ``<prefix>.user`` queue served
first); no number is taken while the circuit breaker is open or the database is away — the
consumer is cancelled, deliveries are requeued unconsumed, and a probe that consumes nothing
resumes it; SIGTERM/SIGINT stop consuming, let in-flight deliveries finish up to the shutdown
timeout and cancel the rest unacked, never cancelling a commit already sent.

Each guarantee and why: docs/architecture.md, "The worker's consumer".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from typing import Any

import structlog
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from gapless.amqp.connection import connect
from gapless.amqp.headers import bounded_reason
from gapless.amqp.publisher import Publisher
from gapless.amqp.topology import declare_topology
from gapless.constants import PRIORITY_USER
from gapless.errors import GaplessError
from gapless.integrator.accounts import Accounts
from gapless.integrator.base import IntegratorAuthError, TransientIntegratorError
from gapless.issuing.outcome import PROBE_TENANT, PROBE_UUID, credentials_refused
from gapless.issuing.routing import NOTICE_CHANNEL
from gapless.ledger.database import Database, check_cluster
from gapless.ledger.notices import Notices
from gapless.ledger.queries import config as config_queries
from gapless.ledger.sqlstates import is_database_unavailable
from gapless.logging import get_logger
from gapless.settings import Settings
from gapless.worker import metrics
from gapless.worker.flow import Action, Clock, Delivery, IssuingFlow, Verdict
from gapless.worker.hooks import NO_HOOKS, FlowHooks, load_hooks

__all__ = ["Worker"]

log = get_logger("gapless.worker")
#: How long a starting worker keeps retrying a database that is briefly unreachable.
STARTUP_DB_RETRY_S = 15.0

#: How often a paused consumer looks at the breaker (local state only; no network).
PAUSE_POLL_S = 0.25
#: Backoff before requeueing a delivery that met database trouble or an unexpected error.
TROUBLE_BACKOFF_S = 1.0
#: A consumer paused for the database probes it after this long, doubling up to the maximum.
DB_PROBE_FIRST_S = 0.25
DB_PROBE_MAX_S = 5.0
#: Written into the x-gapless-worker header of dead-lettered copies.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    """One worker process: a consumer with up to ``concurrency`` deliveries in flight."""

    def __init__(self, settings: Settings, *, concurrency: int = 8,
                 shutdown_timeout: float = 30.0, metrics_port: int | None = None,
                 hooks: FlowHooks | None = None, clock: Clock | None = None) -> None:
        """``hooks``: the flow's step hooks (default: ``GAPLESS_WORKER_HOOKS``, normally none);
        ``clock``: tests only — fixes the seal moment and "today" of the date checks."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.settings = settings
        self.concurrency = concurrency
        self.shutdown_timeout = shutdown_timeout
        self.metrics_port = metrics_port
        self.hooks = hooks if hooks is not None else load_hooks()
        self.clock = clock
        self._stop = asyncio.Event()
        #: Set once the consumer has started (for callers that run the worker in-process).
        self.started = asyncio.Event()
        self._pause = asyncio.Event()
        #: A delivery met the database away: pause consuming until it takes writes again.
        self._db_away = asyncio.Event()
        self._db: Database | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._queues: list[AbstractQueue] = []
        self._consumer_tags: list[tuple[AbstractQueue, str]] = []
        self._slots = _Slots(concurrency)
        self._dead_letters: Publisher | None = None
        self._guard: Accounts | None = None
        self._flow: IssuingFlow | None = None
        #: The listener of the recipient cache's change notices (while running).
        self.notices: Notices | None = None
        #: When the broker connection was lost (None while connected).
        self._amqp_lost_at: float | None = None
        #: The task running :meth:`run` (what /healthz looks at).
        self.task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM and SIGINT do)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def database(self) -> Database | None:
        """The worker's database once opened (None before)."""
        return self._db

    @property
    def consuming(self) -> bool:
        """False while paused for the breaker, and once stopping."""
        return bool(self._consumer_tags)

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Consume until a stop is requested; raises ConfigurationError before consuming when
        the database is unmigrated or belongs to another cluster."""
        settings = self.settings
        self.task = asyncio.current_task()
        if install_signal_handlers:
            # Installed before anything else, so a SIGTERM during start-up is a clean stop too.
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
        # Every tenant's integrator account (GAPLESS_INTEGRATORS_FILE): a bad file stops the
        # worker before it touches the database.
        guard = Accounts.open(settings, name="worker")
        try:
            db = await self._open_database()
            if db is None:
                log.info("worker_stopped", before="consuming")
                return
            try:
                await self._run(db, guard, install_signal_handlers)
            finally:
                if self._flow is not None:
                    await self._flow.seals.aclose()
                    await self._flow.issued.aclose()
                await db.close()
        finally:
            await guard.aclose()

    async def _open_database(self) -> Database | None:
        """The pool and the start-up cluster check, retried while the database is briefly
        unreachable (a restart or a terminated backend must not end the process); a mismatch or
        a missing schema fails at once. None: asked to stop meanwhile (nothing was consumed).

        A connection of the pool that dies later is dropped by the pool, and the delivery that
        met it is requeued (see gapless.ledger.sqlstates.is_database_unavailable).
        """
        settings = self.settings
        deadline = time.monotonic() + STARTUP_DB_RETRY_S
        while True:
            db: Database | None = None
            try:
                db = await Database.open(settings.database_url, actor="worker",
                                         size=min(self.concurrency, settings.db_pool_size))
                await check_cluster(db, settings.cluster_id)
            except Exception as exc:
                if db is not None:
                    await db.close()
                if is_database_unavailable(exc) and self.stopping:
                    return None
                if not is_database_unavailable(exc) or time.monotonic() > deadline:
                    raise
                log.warning("database_unavailable_at_start", error=type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=1.0)
                continue
            if self.stopping:
                await db.close()
                return None
            return db

    async def _run(self, db: Database, guard: Accounts,
                   install_signal_handlers: bool) -> None:
        settings = self.settings
        self._db = db
        self._guard = guard
        self._flow = IssuingFlow(db, self._guard, settings, hooks=self.hooks, clock=self.clock,
                                 stopping=lambda: self.stopping)
        # The recipient answers the flow keeps in memory are trusted while this listens.
        memory = self._flow.recipients

        def listening() -> None:
            memory.listening()
            metrics.RECIPIENT_MEMORY_LISTENING.set(1)

        def deaf() -> None:
            memory.deaf()
            metrics.RECIPIENT_MEMORY_LISTENING.set(0)

        self.notices = Notices(settings.database_url, NOTICE_CHANNEL, on_notice=memory.heard,
                               on_listening=listening, on_deaf=deaf)
        self.notices.start()
        server = None
        if self.metrics_port is not None:
            # /metrics, /healthz and /readyz in this event loop.
            server = metrics.health_server(self, settings.metrics_host, self.metrics_port)
            await server.start()
        try:
            await self._consume(settings)
        finally:
            if server is not None:
                await server.stop()
            await self.notices.aclose()

    async def _consume(self, settings: Settings) -> None:
        if self.hooks is not NO_HOOKS:
            log.warning("worker_hooks_enabled", hooks=type(self.hooks).__name__)
        connection = await connect(settings)
        # The robust connection reconnects by itself (and restores the channel, its QoS, the
        # queue and the consumer); say so in the log, so an operator sees the broker went away
        # and came back.
        connection.close_callbacks.add(self._on_connection_lost)
        connection.reconnect_callbacks.add(self._on_reconnected)
        # Dead-letter copies have a connection of their own (a fresh one after a confirm that
        # does not come); a bad message is acked only once its copy is safely in <prefix>.dead.
        self._dead_letters = Publisher(settings)
        async with connection:
            channel = await connection.channel()
            # Per consumer: in quorum mode each work queue has this many unacked deliveries.
            await channel.set_qos(prefetch_count=self.concurrency)
            self._queues = await declare_topology(channel, settings)
            await self._dead_letters.start()
            try:
                await self._start_consuming()
                log.info("worker_started", queues=[queue.name for queue in self._queues],
                         queue_type=settings.queue_type, concurrency=self.concurrency,
                         pid=os.getpid(), node=connection.node,
                         metrics_port=self.metrics_port)
                self.started.set()
                await self._supervise()
                await self._drain(channel)
            finally:
                await self._dead_letters.close()

    async def _supervise(self) -> None:
        """Wait for a stop; meanwhile pause and resume consuming as the breaker and the
        database ask."""
        while not self.stopping:
            await _first(self._stop.wait(), self._pause.wait(), self._db_away.wait())
            if self.stopping:
                return
            if self._db_away.is_set():
                await self._stop_consuming()
                log.warning("consumer_paused", reason="database_unavailable",
                            in_flight=len(self._tasks))
                await self._wait_for_database()
                self._db_away.clear()
                if self.stopping:
                    return
                if not self._pause.is_set():  # else the breaker's pause is served next
                    await self._start_consuming()
                    log.info("consumer_resumed", after="database_unavailable")
                continue
            await self._stop_consuming()
            log.warning("consumer_paused", reason="breaker_open", in_flight=len(self._tasks))
            await self._wait_for_integrator()
            if self._flow is not None:
                self._flow.credentials_refused = False
            self._pause.clear()
            if self.stopping:
                return
            await self._start_consuming()
            log.info("consumer_resumed")

    async def _drain(self, channel: AbstractChannel) -> None:
        """Stop consuming, finish in-flight work until the deadline, cancel the rest."""
        log.info("worker_stopping", in_flight=len(self._tasks),
                 shutdown_timeout=self.shutdown_timeout)
        await self._stop_consuming()
        deadline = time.monotonic() + self.shutdown_timeout
        finished = 0
        # Deliveries that arrive between basic.cancel and cancel-ok start tasks too; they see
        # the stop and requeue before reserving anything, so loop until none is left.
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait(set(self._tasks), timeout=remaining)
            finished += len(done)
        abandoned = list(self._tasks)
        for task in abandoned:
            task.cancel()
        if abandoned:
            await asyncio.gather(*abandoned, return_exceptions=True)
        with contextlib.suppress(Exception):
            await channel.close()
        log.info("worker_stopped", finished=finished, abandoned=len(abandoned))

    def _on_connection_lost(self, _connection: object, exc: BaseException | None) -> None:
        # Called again for every failed reconnection attempt (aio-pika logs those itself):
        # one event per outage.
        if exc is None or self.stopping or self._amqp_lost_at is not None:
            return
        self._amqp_lost_at = time.monotonic()
        log.warning("amqp_connection_lost", error=type(exc).__name__,
                    detail=str(exc).splitlines()[0] if str(exc) else "",
                    in_flight=len(self._tasks))

    def _on_reconnected(self, connection: object) -> None:
        lost_at, self._amqp_lost_at = self._amqp_lost_at, None
        log.info("amqp_reconnected", consuming=self.consuming,
                 node=getattr(connection, "node", None),
                 down_s=None if lost_at is None else round(time.monotonic() - lost_at, 1))

    # -- consuming ---------------------------------------------------------------------------

    async def _start_consuming(self) -> None:
        for queue in self._queues:
            tag = await queue.consume(self._on_message, no_ack=False)
            self._consumer_tags.append((queue, tag))
        metrics.CONSUMING.set(1)

    async def _stop_consuming(self) -> None:
        tags, self._consumer_tags = self._consumer_tags, []
        metrics.CONSUMING.set(0)
        for queue, tag in tags:
            try:
                await queue.cancel(tag)
            except Exception as exc:  # channel already gone: the broker has stopped delivering
                log.warning("consumer_cancel_failed", error=type(exc).__name__)

    async def _wait_for_database(self) -> None:
        """Return when the database takes writes again (or a stop is requested).

        Probes with a read of ``transaction_read_only`` on a pooled connection (a broken one is
        replaced from the URL, so after a promotion the probe reaches the new primary), backing
        off from DB_PROBE_FIRST_S to DB_PROBE_MAX_S.
        """
        db = self._db
        assert db is not None
        delay = DB_PROBE_FIRST_S
        started = time.monotonic()
        while not self.stopping:
            await _first(self._stop.wait(), asyncio.sleep(delay))
            if self.stopping:
                return
            try:
                row = await db.one(config_queries.WRITABLE)
            except Exception as exc:
                log.info("database_probe_failed", error=type(exc).__name__)
            else:
                if row is not None and row.writable:
                    log.info("database_available",
                             away_s=round(time.monotonic() - started, 1))
                    return
                log.info("database_probe_failed", error="read_only")
            delay = min(delay * 2, DB_PROBE_MAX_S)

    async def _wait_for_integrator(self) -> None:
        """Return when the integrator answers a probe (or a stop is requested).

        The probe goes through the guard, so it is the breaker's half-open trial; it waits until
        the breaker lets calls through again (reset timeout), so the integrator is not hammered.
        """
        guard = self._guard
        assert guard is not None
        refused = False
        while not self.stopping:
            ready_at = time.monotonic() + self.settings.breaker_reset_timeout_s
            while not self.stopping and not guard.accepting() and time.monotonic() < ready_at:
                await _first(self._stop.wait(), asyncio.sleep(PAUSE_POLL_S))
            if self.stopping:
                return
            try:
                await guard.probe(PROBE_TENANT, PROBE_UUID)
            except TransientIntegratorError as exc:
                log.info("integrator_probe_failed", error=type(exc).__name__)
                continue
            except IntegratorAuthError as exc:
                # Our credentials are refused: stay paused (nothing is taken, nothing rejected)
                # until they work again; said once per pause, not once per probe.
                if not refused:
                    credentials_refused(log, f"{type(exc).__name__}: {exc}")
                refused = True
                continue
            except Exception as exc:
                # Any real answer (even a refusal of the probe itself) means it is reachable.
                log.info("integrator_probe_answered", error=type(exc).__name__)
            if guard.accepting():
                return

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        # Own the task (not aiormq's per-delivery task), so the stop can wait for and cancel it.
        task = asyncio.create_task(self._handle(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, message: AbstractIncomingMessage) -> None:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(delivery_tag=message.delivery_tag)
        metrics.IN_FLIGHT.inc()
        try:
            async with self._slots.taken(user=(message.priority or 0) >= PRIORITY_USER):
                verdict = await self._decide(message)
                await self._settle(message, verdict)
        except asyncio.CancelledError:
            # Shutdown deadline: leave it unacked; the broker redelivers it, the database makes
            # that safe. Never reject here (that would dead-letter a good invoice).
            log.warning("message_abandoned")
            raise
        finally:
            metrics.IN_FLIGHT.dec()

    async def _decide(self, message: AbstractIncomingMessage) -> Verdict:
        assert self._flow is not None
        delivery = Delivery(body=message.body, content_type=message.content_type,
                            priority=message.priority, redelivered=bool(message.redelivered))
        try:
            return await self._flow.handle(delivery)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_database_unavailable(exc):
                log.warning("database_unavailable", error=type(exc).__name__)
                self._db_away.set()
                return Verdict(Action.REQUEUE, "requeued", reason="database_unavailable",
                               backoff_s=TROUBLE_BACKOFF_S)
            log.exception("message_failed", redelivered=delivery.redelivered)
            if delivery.redelivered:
                # Failed before, failed again: park it with the reason rather than loop forever.
                return Verdict(Action.DEAD_LETTER, "failed",
                               reason=f"worker failed twice on this message: "
                                      f"{type(exc).__name__}")
            return Verdict(Action.REQUEUE, "failed", reason="unexpected_error",
                           backoff_s=TROUBLE_BACKOFF_S)

    async def _settle(self, message: AbstractIncomingMessage, verdict: Verdict) -> None:
        if verdict.pause:
            self._pause.set()
        if verdict.action is Action.DEAD_LETTER:
            metrics.count(verdict.outcome)
            if await self._dead_letter(message, verdict.reason or "invalid message"):
                await _quietly(message.ack(), "ack")
            else:
                # The copy cannot be published (after every attempt of the publisher, which
                # reconnects for the next copy). The message is invalid for ever: requeueing
                # it would loop, holding a slot, in classic mode (quorum mode only ends it at
                # the delivery limit). Rejected, the broker dead-letters it itself: the work
                # queue's x-dead-letter-exchange leads to <prefix>.dead, and its x-death header
                # says "rejected" (gapless dead list shows that; the reason is in our log).
                await _quietly(message.reject(requeue=False), "reject")
            return
        metrics.count(verdict.outcome)
        if verdict.action is Action.ACK:
            await _quietly(message.ack(), "ack")
            return
        await self._backoff(verdict.backoff_s)
        await _quietly(message.nack(requeue=True), "nack")

    async def _dead_letter(self, message: AbstractIncomingMessage, reason: str) -> bool:
        """Copy the message into ``<prefix>.dead`` with the reason (confirmed), its headers
        capped (:func:`gapless.amqp.headers.cap_headers`); False if not, whatever the error."""
        assert self._dead_letters is not None
        try:
            await self._dead_letters.dead_letter(
                message.body, reason=reason, headers=dict(message.headers or {}),
                content_type=message.content_type, message_id=message.message_id,
                priority=message.priority, worker=WORKER_ID)
        except Exception as exc:  # not CancelledError: a cancelled copy leaves the delivery unacked
            log.error("dead_letter_failed", reason=bounded_reason(reason),
                      error=type(exc).__name__, detail=_first_line(exc),
                      then="rejected to the broker's dead-lettering")
            return False
        return True

    async def _backoff(self, seconds: float) -> None:
        if seconds > 0 and not self.stopping:
            await _first(self._stop.wait(), asyncio.sleep(seconds))


class _Slots:
    """At most ``size`` deliveries worked on at a time; a free slot goes to a waiting user
    delivery before any batch one.

    In classic mode the broker already holds deliveries back (one consumer, prefetch = size),
    so nobody ever waits here. In quorum mode two consumers each have ``size`` unacked
    deliveries; the batch ones wait here while user work goes first.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: dict[bool, list[asyncio.Future[None]]] = {True: [], False: []}

    @contextlib.asynccontextmanager
    async def taken(self, *, user: bool) -> Any:
        if self._free > 0 and not self._waiting[True] and (user or not self._waiting[False]):
            self._free -= 1
        else:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting[user].append(waiter)
            try:
                await waiter  # the releasing task handed its slot over
            except asyncio.CancelledError:
                if waiter in self._waiting[user]:
                    self._waiting[user].remove(waiter)
                elif not waiter.cancelled():
                    self._release()  # handed over just as we were cancelled: pass it on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        for user in (True, False):
            waiting = self._waiting[user]
            while waiting:
                waiter = waiting.pop(0)
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._free += 1


async def _first(*aws: Any) -> None:
    """Wait until the first of ``aws`` completes; cancel the others."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _first_line(exc: BaseException) -> str:
    """The first line of one of gapless's errors, bounded; nothing of any other (its text might
    quote the message's headers)."""
    text = str(exc).strip().splitlines() if isinstance(exc, GaplessError) else []
    return bounded_reason(text[0], 200) if text else ""


async def _quietly(settle: Any, what: str) -> None:
    """Ack/nack; a failure means the channel is gone and the broker will redeliver (harmless)."""
    try:
        await settle
    except Exception as exc:
        log.warning("message_settle_failed", action=what, error=type(exc).__name__)
