"""The queue topology and publishing: what producers, the worker's dead-lettering and
``gapless publish`` share.

Topology (contract), all durable and declared idempotently by whoever starts first:

* queue ``<prefix>`` with ``x-max-priority: 4`` and ``x-dead-letter-exchange: <prefix>.dlx``;
* fanout exchange ``<prefix>.dlx`` bound to queue ``<prefix>.dead``.

Publishing guarantee: :meth:`Publisher.publish` returns only after the broker confirmed the
message (persistent, routed to the queue); a nack or an unroutable message raises
:class:`PublishRefused`; a lost connection or a confirm timeout raises
:class:`PublishUnconfirmed` (the outcome is unknown, and republishing is safe: the worker maps a
repeated ``invoice_id`` onto the same invoice).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import urllib.parse
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractQueue,
)
from pamqp.common import FieldValue

from gapless.broker import (
    NodesConnection,
    node_label,
    node_urls,
    open_plain,
    open_robust,
    split_urls,
)
from gapless.constants import (
    CONTENT_TYPE_JSON,
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    MAX_PRIORITY,
    PRIORITIES,
    PRIORITY_USER,
    dead_exchange_name,
    dead_queue_name,
    user_queue_name,
)
from gapless.errors import ConfigurationError, GaplessError
from gapless.logging import get_logger
from gapless.message import InvoiceMessage, validate_message
from gapless.settings import DEFAULT_DELIVERY_LIMIT, QueueType, Settings, load_settings

log = get_logger(__name__)

#: AMQP shortstr limit: a longer invoice_id is not copied into ``message_id``.
_MAX_SHORTSTR = 255
DEFAULT_CONFIRM_TIMEOUT_S = 10.0
#: First wait before publishing again on a fresh connection (doubled at each attempt).
RETRY_BACKOFF_S = 0.25


class PublishRefused(GaplessError):
    """The broker refused the message (nack, or unroutable with ``mandatory``): it is not queued.

    Check that the queue exists (``gapless worker`` or ``gapless publish`` declare it) and that
    the broker has room (memory/disk alarms); then publish again.
    """


class PublishNacked(PublishRefused):
    """The broker answered the publish with a nack (it did not take the message). Publishing
    again on a fresh connection usually succeeds: a channel opened during a quorum queue's
    leader election may nack every publish while a new connection works."""


class PublishUnconfirmed(GaplessError):
    """No confirm arrived (connection lost or timeout): the message may or may not be queued.

    Publishing it again is safe — the same ``invoice_id`` maps onto the same invoice.
    """

#: What to check when RabbitMQ cannot be reached (every "broker away" message says it).
BROKER_HINT = "is RabbitMQ running? check GAPLESS_AMQP_URL"


class BrokerUnavailable(GaplessError):
    """RabbitMQ cannot be reached at GAPLESS_AMQP_URL; start it or fix the URL.

    ``url`` is the URL without its password; ``reason`` says what the connection attempt met,
    in a few words; ``hint`` what to check.
    """

    def __init__(self, message: str, *, url: str = "", reason: str = "",
                 hint: str = BROKER_HINT) -> None:
        super().__init__(message)
        self.url = url
        self.reason = reason
        self.hint = hint


_PASSWORD_PARAMETER = re.compile(r"((?:^|[&\s])password=)[^&\s]*")
_USERINFO_PASSWORD = re.compile(r"(//[^:/@]*):[^@/]*@")


def redact_url(url: str) -> str:
    """Any URL (amqp, postgresql, http) without its password, for messages and logs; every URL
    of a comma-separated list (the RabbitMQ nodes of ``GAPLESS_AMQP_URL``).

    Both places a password can hide are masked: ``user:password@`` and a ``password=`` query
    parameter (libpq accepts one).
    """
    urls = split_urls(url)
    if len(urls) > 1:
        return ",".join(_redact_one(part) for part in urls)
    return _redact_one(url)


def _redact_one(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # unparsable (a bad IPv6 host): mask what looks like a password
        return _PASSWORD_PARAMETER.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1:***@", url))
    if not parts.netloc:  # not a URL (a key=value DSN): mask what looks like a password
        return _PASSWORD_PARAMETER.sub(r"\1***", url)
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[-1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    if parts.query:
        parts = parts._replace(query=_PASSWORD_PARAMETER.sub(r"\1***", parts.query))
    return urllib.parse.urlunsplit(parts)


def broker_failure(exc: BaseException) -> tuple[str, str]:
    """(reason, hint) for a failed connection to RabbitMQ, each a few words on one line."""
    if isinstance(exc, (aiormq.exceptions.ProbableAuthenticationError,
                        aiormq.exceptions.AuthenticationError)):
        return ("the broker refused the login",
                "check the user and password in GAPLESS_AMQP_URL")
    if isinstance(exc, aiormq.exceptions.InvalidFrameError) and "Connection.Close" in str(exc):
        return ("the broker closed the connection while opening it",
                "check the virtual host of GAPLESS_AMQP_URL and the user's permissions on it")
    if isinstance(exc, TimeoutError):
        return "no answer in time", "is RabbitMQ running and reachable? check GAPLESS_AMQP_URL"
    code = getattr(exc, "errno", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    if isinstance(code, int) and code in errno.errorcode:
        return os.strerror(code).lower(), BROKER_HINT
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return reason, BROKER_HINT


def broker_unavailable(amqp_url: str, exc: BaseException) -> BrokerUnavailable:
    """The error to raise when a connection to ``amqp_url`` could not be opened."""
    url = redact_url(amqp_url)
    reason, hint = broker_failure(exc)
    return BrokerUnavailable(f"cannot connect to RabbitMQ at {url} ({reason})", url=url,
                             reason=reason, hint=hint)


# ------------------------------------------------------------------ library logs while connecting
#
# aiormq logs "error when creating transport" (and aio-pika may log) for every failed attempt,
# then raises. While gapless opens a connection, the exception is the whole story: the caller
# reports it (the CLI as one line). So the libraries' records of the attempt are held back and
# dropped when it fails, or passed on when it succeeds. Nothing else is touched: the reconnection
# warnings of a robust connection in normal operation come from its own task, after the attempt
# that created it, and are logged as always.

_LIBRARY_LOGGERS = ("aiormq", "aio_pika")


@dataclass
class _Attempt:
    active: bool = True
    records: list[logging.LogRecord] = field(default_factory=list)


_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("gapless_broker_connect", default=None)


class _HoldDuringAttempt(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        attempt = _ATTEMPT.get()
        if attempt is None or not attempt.active:
            return True
        attempt.records.append(record)
        return False


_HOLD = _HoldDuringAttempt()


@contextlib.contextmanager
def _library_logs_held() -> Iterator[None]:
    """Hold the libraries' log records of this task until the block ends: passed on when it
    succeeds (or at debug level), dropped when it raises."""
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in _LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            if _HOLD not in logger.filters:
                logger.addFilter(_HOLD)
    attempt = _Attempt()
    token = _ATTEMPT.set(attempt)
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        # Tasks started inside the block share this object: they log normally from now on.
        attempt.active = False
        _ATTEMPT.reset(token)
        if succeeded or logging.getLogger().isEnabledFor(logging.DEBUG):
            for record in attempt.records:
                logging.getLogger(record.name).handle(record)


def main_queue_arguments(prefix: str, queue_type: QueueType = "classic", *,
                         delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> dict[str, FieldValue]:
    """The arguments of the work queues; every declarer must use exactly these.

    classic: one queue ``<prefix>`` with ``x-max-priority: 4``. quorum: replicated quorum
    queues ``<prefix>`` and ``<prefix>.user`` with at-least-once dead-lettering (which needs
    ``x-overflow: reject-publish``) and a delivery limit, so a message that never reaches an
    outcome (one that kills its worker, say) ends in ``<prefix>.dead`` instead of looping.
    """
    if queue_type == "quorum":
        return {"x-queue-type": "quorum", "x-dead-letter-exchange": dead_exchange_name(prefix),
                "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
                "x-delivery-limit": delivery_limit}
    return {"x-max-priority": MAX_PRIORITY, "x-dead-letter-exchange": dead_exchange_name(prefix)}


def dead_queue_arguments(queue_type: QueueType = "classic") -> dict[str, FieldValue]:
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else {}


def work_queues(settings: Settings) -> tuple[str, ...]:
    """The queues a worker consumes, user work first: ``(<prefix>.user, <prefix>)`` in quorum
    mode, ``(<prefix>,)`` in classic mode (priorities inside one queue)."""
    if settings.queue_type == "quorum":
        return (user_queue_name(settings.queue), settings.queue)
    return (settings.queue,)


def work_queue(settings: Settings, priority: int | None) -> str:
    """Where a message of this AMQP priority goes: in quorum mode user work (4 and above) to
    ``<prefix>.user``, the rest to ``<prefix>``; in classic mode everything to ``<prefix>``."""
    if settings.queue_type == "quorum" and (priority or 0) >= PRIORITY_USER:
        return user_queue_name(settings.queue)
    return settings.queue


async def declare_topology(channel: AbstractChannel, settings: Settings) -> list[AbstractQueue]:
    """Declare the work queues (:func:`work_queues`), exchange ``<prefix>.dlx`` and queue
    ``<prefix>.dead``; the work queues, user work first.

    Idempotent: the worker, ``gapless publish`` and the API all call it with the same arguments.
    Raises ConfigurationError when one exists with other arguments (the broker refuses to
    change them, and closes the channel), e.g. a classic queue of the prefix in quorum mode.
    """
    prefix, queue_type = settings.queue, settings.queue_type
    try:
        dead_exchange = await channel.declare_exchange(
            dead_exchange_name(prefix), aio_pika.ExchangeType.FANOUT, durable=True)
        dead_queue = await channel.declare_queue(dead_queue_name(prefix), durable=True,
                                                 arguments=dead_queue_arguments(queue_type))
        await dead_queue.bind(dead_exchange, routing_key="")
        arguments = main_queue_arguments(prefix, queue_type,
                                         delivery_limit=settings.delivery_limit)
        return [await channel.declare_queue(name, durable=True, arguments=arguments)
                for name in work_queues(settings)]
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise ConfigurationError(
            f"queue or exchange of prefix {prefix!r} exists with different settings "
            f"({exc}); is GAPLESS_QUEUE_TYPE={queue_type} what it was declared with? delete "
            f"it or choose another GAPLESS_QUEUE") from exc


def amqp_priority(priority: str | int | None, default: int | None) -> int | None:
    """``"user"`` → 4, ``"batch"`` → 1, an int as given (0..255), None → ``default``."""
    if priority is None:
        return default
    if isinstance(priority, str):
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be 'user' or 'batch', got {priority!r}")
        return PRIORITIES[priority]
    if not 0 <= priority <= 255:
        raise ValueError(f"an AMQP priority is 0..255, got {priority}")
    return priority


def _message_id(invoice_id: str | None) -> str | None:
    if invoice_id is None or len(invoice_id.encode()) > _MAX_SHORTSTR:
        return None
    return invoice_id


async def _publish_confirmed(channel: AbstractChannel, message: aio_pika.Message,
                             routing_key: str, confirm_timeout: float) -> None:
    """Publish on the default exchange with ``mandatory`` and wait for the broker's confirm."""
    if not channel.publisher_confirms:
        raise ConfigurationError("publishing needs a channel with publisher confirms "
                                 "(aio-pika's default); without them nothing is guaranteed")
    try:
        result = await channel.default_exchange.publish(
            message, routing_key=routing_key, mandatory=True, timeout=confirm_timeout)
    except aiormq.exceptions.PublishError as exc:  # Basic.Return: no queue took it
        raise PublishRefused(f"unroutable: no queue {routing_key!r} ({exc})") from exc
    except aiormq.exceptions.DeliveryError as exc:  # Basic.Nack
        raise PublishNacked(f"the broker refused the message for {routing_key!r}") from exc
    except (TimeoutError, aiormq.exceptions.AMQPError, ConnectionError,
            RuntimeError) as exc:
        raise PublishUnconfirmed(
            f"no confirm for a message to {routing_key!r} ({type(exc).__name__}); the outcome "
            "is unknown and publishing it again is safe") from exc
    if isinstance(result, aiormq.abc.DeliveredMessage):
        # Basic.Return on a channel opened without on_return_raises.
        raise PublishRefused(f"unroutable: no queue {routing_key!r}")


def dead_copy(body: bytes, *, reason: str, headers: dict[str, FieldValue] | None = None,
              content_type: str | None = None, message_id: str | None = None,
              priority: int | None = None, worker: str | None = None) -> aio_pika.Message:
    """The copy of a message that goes into ``<prefix>.dead``.

    It keeps the body, content type, message id and headers, and adds ``x-gapless-reason`` (one
    line, no payload), ``x-gapless-dead-at`` (UTC ISO time) and ``x-gapless-worker`` when
    given. The worker acks the original only once the copy is confirmed, so a bad message
    leaves the work queue exactly once, never looping through redelivery.
    """
    all_headers: dict[str, FieldValue] = dict(headers or {})
    all_headers[HEADER_DEAD_REASON] = reason
    all_headers[HEADER_DEAD_AT] = datetime.now(UTC).isoformat()
    if worker is not None:
        all_headers[HEADER_DEAD_WORKER] = worker
    return aio_pika.Message(
        body, headers=all_headers, content_type=content_type, message_id=message_id,
        priority=priority, delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        timestamp=datetime.now(UTC))


async def dead_letter(channel: AbstractChannel, prefix: str, body: bytes, *, reason: str,
                      headers: dict[str, FieldValue] | None = None,
                      content_type: str | None = None, message_id: str | None = None,
                      priority: int | None = None, worker: str | None = None,
                      confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT_S) -> None:
    """Copy a message (:func:`dead_copy`) into ``<prefix>.dead`` on ``channel`` (which needs
    publisher confirms) and wait for the broker's confirm. Raises PublishRefused /
    PublishUnconfirmed; :meth:`Publisher.dead_letter` also retries on a fresh connection."""
    message = dead_copy(body, reason=reason, headers=headers, content_type=content_type,
                        message_id=message_id, priority=priority, worker=worker)
    await _publish_confirmed(channel, message, dead_queue_name(prefix), confirm_timeout)
    log.info("message_dead_lettered", queue=dead_queue_name(prefix), message_id=message_id,
             reason=reason)


async def connect(settings: Settings) -> NodesConnection:
    """A robust connection to the first node of ``GAPLESS_AMQP_URL`` that answers; it reconnects
    by itself, to the next node in turn, and restores declared topology and consumers.

    BrokerUnavailable when no node answers (with no library log lines).
    """
    try:
        with _library_logs_held():
            return await open_robust(settings.amqp_url)
    except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
        raise broker_unavailable(settings.amqp_url, exc) from exc


async def connect_once(settings: Settings) -> AbstractConnection:
    """A plain connection for a short task (no reconnection) to the first node that answers;
    BrokerUnavailable when none does (with no library log lines)."""
    try:
        with _library_logs_held():
            connection, _node = await open_plain(settings.amqp_url)
            return connection
    except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
        raise broker_unavailable(settings.amqp_url, exc) from exc


class Publisher:
    """Publishes to the work queues with persistent delivery and publisher confirms.

    ``async with Publisher(settings) as publisher: await publisher.publish(message)``. Opening it
    connects to the first node of ``GAPLESS_AMQP_URL`` that answers, opens a channel with
    publisher confirms and declares the topology. Many ``publish`` calls may run concurrently
    on one Publisher: confirms are pipelined on the channel.

    Every wait for a confirm is bounded (``confirm_timeout``). A publish whose confirm did not
    arrive, or that the broker nacked, is published again on a **fresh connection** to the next
    node, up to ``attempts`` times: after a queue leader change a channel may stay open yet nack
    (or never confirm) every later publish while a new connection works. Publishing again is
    safe: the worker maps a repeated ``invoice_id`` onto the same invoice. An unroutable message
    (no such queue) is refused at once.
    """

    def __init__(self, settings: Settings, *, confirm_timeout: float | None = None,
                 attempts: int | None = None) -> None:
        self.settings = settings
        self.confirm_timeout = (settings.confirm_timeout_s if confirm_timeout is None
                                else confirm_timeout)
        self.attempts = settings.publish_attempts if attempts is None else attempts
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._node = 0
        #: Bumped at every reopen, so concurrent failures of one channel reopen it once.
        self._generation = 0
        self._reopening = asyncio.Lock()

    @property
    def channel(self) -> AbstractChannel:
        if self._channel is None:
            raise RuntimeError("Publisher is not started; use `async with Publisher(...)`")
        return self._channel

    @property
    def node(self) -> str:
        """``host:port`` of the node this publisher is connected to."""
        return node_label(node_urls(self.settings.amqp_url)[self._node])

    async def start(self) -> None:
        await self._open(self._node)
        log.debug("publisher_started", queue=self.settings.queue, node=self.node)

    async def _open(self, start: int) -> None:
        try:
            with _library_logs_held():
                connection, self._node = await open_plain(self.settings.amqp_url, start=start)
        except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
            raise broker_unavailable(self.settings.amqp_url, exc) from exc
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            await declare_topology(channel, self.settings)
        except BaseException:
            await connection.close()
            raise
        self._connection, self._channel = connection, channel

    async def _reopen(self, generation: int) -> None:
        """A fresh connection, to the next node, unless another publish already made one."""
        async with self._reopening:
            if generation != self._generation:
                return
            old, self._connection, self._channel = self._connection, None, None
            if old is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(old.close(), self.confirm_timeout)
            await self._open(self._node + 1)
            self._generation += 1
            log.info("publisher_reconnected", node=self.node)

    async def ping(self) -> None:
        """One round trip to the broker (a passive declare of ``<prefix>``), on a fresh
        connection if this one is gone; raises when the broker does not answer."""
        channel = self._channel
        if channel is None or channel.is_closed:
            await self._reopen(self._generation)
            channel = self.channel
        underlay = await channel.get_underlay_channel()
        await underlay.queue_declare(self.settings.queue, passive=True)

    async def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            await connection.close()

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def _confirmed(self, message: aio_pika.Message, routing_key: str) -> None:
        """Publish and wait for the confirm, again on a fresh connection when it does not come
        (or the broker nacks), up to ``attempts`` times."""
        for attempt in range(1, self.attempts + 1):
            generation = self._generation
            try:
                if self._channel is None:
                    raise PublishUnconfirmed("no channel (the last reconnection failed)")
                await _publish_confirmed(self._channel, message, routing_key,
                                         self.confirm_timeout)
                return
            except (PublishUnconfirmed, PublishNacked) as exc:
                if attempt == self.attempts:
                    raise
                log.warning("publish_retrying", routing_key=routing_key, attempt=attempt,
                            error=type(exc).__name__, node=self.node)
                # A leader election takes seconds: back off (0.25, 0.5, 1, 2 s …) so the
                # attempts span it rather than all meeting it.
                await asyncio.sleep(min(RETRY_BACKOFF_S * 2 ** (attempt - 1), 2.0))
                try:
                    await self._reopen(generation)
                except BrokerUnavailable as unavailable:
                    raise PublishUnconfirmed(
                        f"no confirm for a message to {routing_key!r}, and no node answers "
                        f"({unavailable.reason}); publishing it again is safe") from unavailable

    async def publish(self, message: InvoiceMessage | dict[str, Any] | bytes, *,
                      priority: str | int | None = None,
                      headers: dict[str, FieldValue] | None = None,
                      content_type: str = CONTENT_TYPE_JSON,
                      message_id: str | None = None) -> None:
        """Publish one message and wait for the broker's confirm.

        A model or dict is validated first (InvalidMessage, nothing sent); its AMQP priority is
        ``priority`` if given, else the message's own (user 4, batch 1, absent → batch) and its
        ``message_id`` is the ``invoice_id``. Raw ``bytes`` are sent as they are — no
        validation, priority 0 unless ``priority`` is given (aio-pika always sends the property)
        — which is how tests and tools put malformed messages on the queue. In quorum mode user
        work (priority 4 and above) goes to ``<prefix>.user``, the rest to ``<prefix>``. Raises
        PublishRefused or PublishUnconfirmed.
        """
        if isinstance(message, bytes):
            body, default_priority = message, None
        else:
            model = validate_message(message)
            body, default_priority = model.body(), model.priority_value
            message_id = message_id or _message_id(model.invoice_id)
        amqp_message = aio_pika.Message(
            body, headers=headers, content_type=content_type, message_id=message_id,
            priority=amqp_priority(priority, default_priority),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT, timestamp=datetime.now(UTC),
            app_id="gapless")
        routing_key = work_queue(self.settings, amqp_message.priority)
        await self._confirmed(amqp_message, routing_key)
        log.debug("message_published", queue=routing_key, message_id=message_id,
                  priority=amqp_message.priority)

    async def dead_letter(self, body: bytes, *, reason: str,
                          headers: dict[str, FieldValue] | None = None,
                          content_type: str | None = None, message_id: str | None = None,
                          priority: int | None = None, worker: str | None = None) -> None:
        """Copy a message into ``<prefix>.dead`` with the reason (see :func:`dead_letter`),
        confirmed, again on a fresh connection when the confirm does not come."""
        message = dead_copy(body, reason=reason, headers=headers, content_type=content_type,
                            message_id=message_id, priority=priority, worker=worker)
        await self._confirmed(message, dead_queue_name(self.settings.queue))
        log.info("message_dead_lettered", queue=dead_queue_name(self.settings.queue),
                 message_id=message_id, reason=reason)


async def publish_invoice(message: dict[str, Any] | InvoiceMessage, *,
                          settings: Settings | None = None, priority: str | None = None) -> None:
    """Publish one invoice for issuing: the producer API for other Python projects.

    Validates first (raises :class:`gapless.message.InvalidMessage` with a one-line reason and
    sends nothing), then publishes to ``<GAPLESS_QUEUE>`` — persistent, confirmed, with the
    priority given here or in the message (user 4, batch 1) — and returns once the broker has
    the message. Raises PublishRefused / PublishUnconfirmed / BrokerUnavailable otherwise.
    Settings default to the ``GAPLESS_*`` environment. Each call opens and closes a connection;
    to publish many, use :class:`Publisher` directly.
    """
    model = validate_message(message)
    if priority is not None:
        amqp_priority(priority, None)  # refuse a bad value before connecting
    async with Publisher(settings or load_settings()) as publisher:
        await publisher.publish(model, priority=priority)


async def queue_depths(settings: Settings) -> dict[str, int]:
    """Ready-message counts of the work queues and ``<prefix>.dead`` (0 for a missing queue).

    Passive declarations: nothing is created. Each uses its own channel, because the broker
    closes a channel whose passive declare finds no queue.
    """
    names = (*work_queues(settings), dead_queue_name(settings.queue))
    connection = await connect_once(settings)
    depths: dict[str, int] = {}
    async with connection:
        for name in names:
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                depths[name] = 0
                continue
            depths[name] = queue.declaration_result.message_count or 0
            await channel.close()
    return depths


__all__ = [
    "BrokerUnavailable",
    "PublishNacked",
    "PublishRefused",
    "PublishUnconfirmed",
    "Publisher",
    "amqp_priority",
    "broker_unavailable",
    "connect",
    "connect_once",
    "dead_copy",
    "dead_letter",
    "declare_topology",
    "main_queue_arguments",
    "publish_invoice",
    "queue_depths",
    "redact_url",
    "work_queue",
    "work_queues",
]
