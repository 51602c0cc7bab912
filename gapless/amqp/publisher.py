"""Publishing with confirms: what producers, the API, the worker's dead-lettering and
``gapless publish`` share (the queues are :mod:`gapless.amqp.topology`'s).

Publishing guarantee: :meth:`Publisher.publish` returns only after the broker confirmed the
message (persistent, routed to the queue); a nack or an unroutable message raises
:class:`PublishRefused`; a lost connection or a confirm timeout raises
:class:`PublishUnconfirmed` (the outcome is unknown, and republishing is safe: the worker maps a
repeated ``invoice_id`` onto the same invoice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import aio_pika
import aiormq
import pamqp.frame
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
)
from aiormq import spec
from aiormq.abc import ChannelFrame
from pamqp.common import FieldValue

from gapless.amqp import frames
from gapless.amqp.connection import BrokerUnavailable, broker_unavailable, library_logs_held
from gapless.amqp.headers import TooLargeForFrame, bounded_reason, cap_headers, check_frame
from gapless.amqp.nodes import open_plain
from gapless.amqp.topology import amqp_priority, declare_topology, work_queue
from gapless.constants import (
    CONTENT_TYPE_JSON,
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    dead_queue_name,
)
from gapless.errors import ConfigurationError, GaplessError
from gapless.logging import get_logger
from gapless.message import AnyMessage, validate_message
from gapless.settings import Settings, load_settings
from gapless.urls import node_label, node_urls

log = get_logger(__name__)


#: delivery_mode of a message the broker writes to disk.
PERSISTENT = int(aio_pika.DeliveryMode.PERSISTENT)

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


def _message_id(invoice_id: str | None) -> str | None:
    if invoice_id is None or len(invoice_id.encode()) > _MAX_SHORTSTR:
        return None
    return invoice_id


def _properties(*, message_id: str | None, priority: int | None,
                headers: dict[str, FieldValue] | None = None,
                content_type: str | None = CONTENT_TYPE_JSON) -> spec.Basic.Properties:
    """A work message's AMQP properties: persistent, stamped now, ``app_id`` gapless (what an
    ``aio_pika.Message`` would carry, without building one per message)."""
    return spec.Basic.Properties(
        content_type=content_type, headers=headers or {}, delivery_mode=PERSISTENT,
        priority=priority, message_id=message_id, timestamp=datetime.now(UTC),
        app_id="gapless")


async def _publish_confirmed(channel: AbstractChannel, body: bytes,
                             properties: spec.Basic.Properties, routing_key: str,
                             confirm_timeout: float) -> None:
    """Publish on the default exchange with ``mandatory`` and wait for the broker's confirm."""
    if not channel.publisher_confirms:
        raise ConfigurationError("publishing needs a channel with publisher confirms "
                                 "(aio-pika's default); without them nothing is guaranteed")
    try:
        if channel.is_closed:
            raise aiormq.exceptions.ChannelInvalidStateError(f"{channel!r} closed")
        underlay = await channel.get_underlay_channel()
        if properties.headers:
            # A frame larger than the connection's frame_max makes the broker close the
            # connection (and with it every confirm still awaited on it): refuse such a message
            # before sending. Without headers the properties are a few hundred bytes at most
            # (a message_id is a shortstr), far below the smallest frame_max (4,096).
            check_frame(len(body), properties, underlay.connection.connection_tune.frame_max)
        result = await underlay.basic_publish(
            body, routing_key=routing_key, properties=properties, mandatory=True,
            timeout=confirm_timeout)
    except TooLargeForFrame as exc:
        raise PublishRefused(f"the message for {routing_key!r} cannot be sent: {exc}") from exc
    except (TimeoutError, aiormq.exceptions.AMQPError, ConnectionError,
            RuntimeError) as exc:
        raise _met(exc, routing_key) from exc
    if isinstance(result, aiormq.abc.DeliveredMessage):
        # Basic.Return on a channel opened without on_return_raises.
        raise PublishRefused(f"unroutable: no queue {routing_key!r}")


def _met(exc: BaseException, routing_key: str) -> PublishRefused | PublishUnconfirmed:
    """What a publish to ``routing_key`` that ended in ``exc`` met: refused (a Basic.Return:
    no queue took it), nacked, or unconfirmed (anything else: a timeout, a lost channel)."""
    if isinstance(exc, aiormq.exceptions.PublishError):
        return PublishRefused(f"unroutable: no queue {routing_key!r} ({exc})")
    if isinstance(exc, aiormq.exceptions.DeliveryError):
        return PublishNacked(f"the broker refused the message for {routing_key!r}")
    return _unconfirmed(routing_key, type(exc).__name__)


#: One message on its way out: body, properties, routing key (the default exchange).
Outgoing = tuple[bytes, spec.Basic.Properties, str]
#: What became of one message: None (confirmed), else what it met.
Outcome = PublishRefused | PublishUnconfirmed | None


async def _publish_pipelined(channel: AbstractChannel, outgoing: Sequence[Outgoing],
                             confirm_timeout: float) -> list[Outcome]:
    """Publish ``outgoing`` on the default exchange with ``mandatory``, all in one write to the
    connection, then await their confirms together; one outcome per message, in order.

    What aiormq's ``basic_publish`` does for one message, done once for many: the frames of
    every message are marshalled into one buffer (pamqp's bytes, :mod:`gapless.amqp.frames`);
    under the channel's publishing lock, each message gets the next delivery tag and a
    confirmation future (:class:`_Confirms`, where aiormq's frame reader settles acks, nacks
    and returns) and the buffer is queued for the connection's writer. (A coroutine, a lock
    round and a timeout per message cost the publishing process about three times the CPU:
    bench/publish.py.) The message ids of one call must be distinct (a returned message is
    matched to its confirm by ``message_id``); a message without one gets a random one, as
    aiormq gives it. Nothing is sent when the write cannot be queued.
    """
    if not channel.publisher_confirms:
        raise ConfigurationError("publishing needs a channel with publisher confirms "
                                 "(aio-pika's default); without them nothing is guaranteed")
    if channel.is_closed:
        return [_unconfirmed(routing_key, "ChannelInvalidStateError")
                for _, _, routing_key in outgoing]
    try:
        underlay = await channel.get_underlay_channel()
    except (aiormq.exceptions.AMQPError, ConnectionError, RuntimeError) as exc:
        return [_unconfirmed(routing_key, type(exc).__name__) for _, _, routing_key in outgoing]
    if not isinstance(underlay, aiormq.Channel):  # the bookkeeping below is aiormq's Channel's
        raise ConfigurationError(f"pipelined publishing needs an aiormq Channel, not {underlay!r}")
    number, largest = underlay.number, underlay.max_content_size
    ids: list[str] = []
    parts: list[bytes] = []
    #: Basic.Publish is the same frame for every message to one queue: marshalled once.
    publish_frames: dict[str, bytes] = {}
    for body, properties, routing_key in outgoing:
        if not properties.message_id:
            properties.message_id = uuid.UUID(int=random.getrandbits(128), version=4).hex
        ids.append(properties.message_id)
        method = publish_frames.get(routing_key)
        if method is None:
            method = publish_frames[routing_key] = pamqp.frame.marshal(
                spec.Basic.Publish(exchange="", routing_key=routing_key, mandatory=True), number)
        parts.append(method)
        parts.append(frames.content_header(number, properties, len(body)))
        parts.extend(frames.body_frames(number, body, largest))
    write = ChannelFrame(payload=b"".join(parts), should_close=False,
                         drain_future=underlay.create_future())
    batch = _Confirms(underlay, ids)
    try:
        async with asyncio.timeout(confirm_timeout):
            async with underlay.lock:
                batch.register(underlay.delivery_tag + 1)
                try:
                    await underlay.write_queue.put(write)
                except BaseException:  # not queued: the broker never sees these tags
                    batch.forget()
                    raise
                underlay.delivery_tag += len(outgoing)
            await batch.settled()
    except (TimeoutError, aiormq.exceptions.AMQPError, ConnectionError, RuntimeError):
        pass  # each message not confirmed by now is unconfirmed (below)
    finally:
        batch.close()
    if not batch.futures:  # forgotten: the write was never queued
        return [_unconfirmed(routing_key, "not written") for _, _, routing_key in outgoing]
    return [_outcome(confirmation, routing_key)
            for confirmation, (_, _, routing_key) in zip(batch.futures, outgoing, strict=True)]


class _Confirms:
    """The confirmation futures of one pipelined write, in aiormq's channel bookkeeping.

    They are plain futures of the loop: aiormq's frame reader settles them by delivery tag (an
    ack, a nack, a return matched by ``message_id``), but a closed channel does not reject them
    (aiormq's future store would, at the cost of a store entry and callbacks per message). One
    store future per write, the ``closed`` sentinel, is rejected instead when the channel or its
    connection closes, and ends the wait.
    """

    def __init__(self, underlay: aiormq.Channel, ids: list[str]) -> None:
        self.underlay, self.ids = underlay, ids
        self.loop = asyncio.get_running_loop()
        self.futures: list[asyncio.Future[Any]] = []
        self.first = 0
        self.waiting = len(ids)
        self.all_settled: asyncio.Future[None] = self.loop.create_future()
        self.closed = underlay.create_future()

    def register(self, first: int) -> None:
        """Each message's future under its delivery tag (``first`` on), and its id's tag."""
        self.first = first
        confirmations, by_id = self.underlay.confirmations, self.underlay.message_id_delivery_tag
        for tag, message_id in enumerate(self.ids, first):
            future: asyncio.Future[Any] = self.loop.create_future()
            future.add_done_callback(functools.partial(self._one_settled, message_id, tag))
            confirmations[tag] = future
            by_id[message_id] = tag
            self.futures.append(future)

    def _one_settled(self, message_id: str, tag: int, _: asyncio.Future[Any]) -> None:
        by_id = self.underlay.message_id_delivery_tag
        if by_id.get(message_id) == tag:
            del by_id[message_id]
        self.waiting -= 1
        if not self.waiting and not self.all_settled.done():
            self.all_settled.set_result(None)

    async def settled(self) -> None:
        """Until every future is settled, or the channel closes."""
        await asyncio.wait((self.all_settled, self.closed), return_when=asyncio.FIRST_COMPLETED)

    def forget(self) -> None:
        """Take back the tags and futures of a write that was never queued."""
        for tag, future in enumerate(self.futures, self.first):
            self.underlay.confirmations.pop(tag, None)
            future.cancel()
        self.futures.clear()

    def close(self) -> None:
        """Leave aiormq's future store (the sentinel) and stop waiting on what did not come."""
        if not self.closed.done():
            self.closed.set_result(None)
        elif not self.closed.cancelled():
            self.closed.exception()  # retrieved: the close is reported per message
        for future in self.futures:
            if not future.done():
                future.cancel()  # aiormq ignores a confirm that comes later


def _unconfirmed(routing_key: str, why: str) -> PublishUnconfirmed:
    return PublishUnconfirmed(
        f"no confirm for a message to {routing_key!r} ({why}); the outcome is unknown and "
        "publishing it again is safe")


def _outcome(confirmation: asyncio.Future[Any], routing_key: str) -> Outcome:
    """One message's outcome from its settled (or cancelled) confirmation future."""
    if confirmation.cancelled():  # not confirmed in time, or the channel closed first
        return _unconfirmed(routing_key, "no confirm in time or channel closed")
    exc = confirmation.exception()
    if exc is not None:
        return _met(exc, routing_key)
    if isinstance(confirmation.result(), aiormq.abc.DeliveredMessage):
        # Basic.Return on a channel opened without on_return_raises.
        return PublishRefused(f"unroutable: no queue {routing_key!r}")
    return None


def dead_copy(body: bytes, *, reason: str, headers: dict[str, FieldValue] | None = None,
              content_type: str | None = None, message_id: str | None = None,
              priority: int | None = None, worker: str | None = None) -> aio_pika.Message:
    """The copy of a message that goes into ``<prefix>.dead``.

    It keeps the body whole (the broker took it once), the content type, message id, and the
    headers within a budget (:func:`gapless.amqp.headers.cap_headers`: what is cut is said in
    ``x-gapless-headers-cut``), and adds ``x-gapless-reason`` (one line, no payload, at most
    1 KiB), ``x-gapless-dead-at`` (UTC ISO time) and ``x-gapless-worker`` when given. So the
    copy fits the broker's frame whatever headers the original had. The worker acks the
    original only once the copy is confirmed, and rejects it to the broker's own dead-lettering
    when the copy cannot be published: a bad message leaves the work queue, never looping
    through redelivery.
    """
    all_headers = cap_headers(headers)
    all_headers[HEADER_DEAD_REASON] = bounded_reason(reason)
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
    await _publish_confirmed(channel, message.body, message.properties, dead_queue_name(prefix),
                             confirm_timeout)
    log.info("message_dead_lettered", queue=dead_queue_name(prefix), message_id=message_id,
             reason=bounded_reason(reason))


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
        #: Messages published in this turn of the event loop, to go out in one write.
        self._gathered: list[tuple[Outgoing, asyncio.Future[Outcome]]] = []
        #: The writes of gathered messages whose confirms are awaited.
        self._groups: set[asyncio.Task[None]] = set()

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
            with library_logs_held():
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
        # Writes still awaiting their confirms end with the channel: their publishers are told.
        await asyncio.gather(*self._groups, return_exceptions=True)

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def _confirmed(self, outgoing: Outgoing, *, together: bool = False) -> None:
        """Publish and wait for the confirm, again on a fresh connection when it does not come
        (or the broker nacks), up to ``attempts`` times. ``together``: in one write with the
        other messages published in the same turn of the event loop (:meth:`_together`);
        otherwise alone, its header frame checked against the connection's frame size first (a
        message with headers)."""
        body, properties, routing_key = outgoing
        for attempt in range(1, self.attempts + 1):
            generation = self._generation
            outcome: Outcome
            if together:
                outcome = await self._together(outgoing)
            elif self._channel is None:
                outcome = PublishUnconfirmed("no channel (the last reconnection failed)")
            else:
                try:
                    await _publish_confirmed(self._channel, body, properties, routing_key,
                                             self.confirm_timeout)
                    outcome = None
                except (PublishUnconfirmed, PublishRefused) as exc:
                    outcome = exc
            if outcome is None:
                return
            if attempt == self.attempts or not isinstance(outcome,
                                                          PublishUnconfirmed | PublishNacked):
                raise outcome
            await self._again(generation, attempt, routing_key, type(outcome).__name__)

    async def _together(self, outgoing: Outgoing) -> Outcome:
        """One message's outcome, published in one write (:func:`_publish_pipelined`) with
        every other message gathered in this turn of the event loop: concurrent publishers (the
        API's requests) share a write and its confirm wait instead of a lock round, a timeout and
        a coroutine of aiormq's each."""
        loop = asyncio.get_running_loop()
        if not self._gathered:
            loop.call_soon(self._send_gathered)
        future: asyncio.Future[Outcome] = loop.create_future()
        self._gathered.append((outgoing, future))
        return await future

    def _send_gathered(self) -> None:
        gathered, self._gathered = self._gathered, []
        task = asyncio.get_running_loop().create_task(self._send_group(gathered))
        self._groups.add(task)
        task.add_done_callback(self._groups.discard)

    async def _send_group(self, gathered: list[tuple[Outgoing, asyncio.Future[Outcome]]]) -> None:
        outgoing = [message for message, _ in gathered]
        outcomes = await self._written(outgoing, list(range(len(outgoing))))
        for (_, future), outcome in zip(gathered, outcomes, strict=True):
            if not future.done():  # its publisher may have been cancelled meanwhile
                future.set_result(outcome)

    async def _written(self, outgoing: Sequence[Outgoing], todo: list[int]) -> list[Outcome]:
        """The outcomes of ``outgoing[i]`` for each ``i`` in ``todo``, in that order: written on
        the channel of the moment (:func:`_publish_pipelined`), one write per run of distinct
        message ids (:func:`_distinct_ids`)."""
        outcomes: list[Outcome] = []
        for part in _distinct_ids(todo, outgoing):
            if self._channel is None:
                outcomes += [PublishUnconfirmed("no channel (the last reconnection failed)")
                             ] * len(part)
            else:
                outcomes += await _publish_pipelined(
                    self._channel, [outgoing[index] for index in part], self.confirm_timeout)
        return outcomes

    async def _again(self, generation: int, attempt: int, routing_key: str, error: str) -> None:
        """Before publishing again after ``attempt``: back off, then a fresh connection to the
        next node (unless a concurrent publish made one). Raises PublishUnconfirmed when no node
        answers."""
        log.warning("publish_retrying", routing_key=routing_key, attempt=attempt, error=error,
                    node=self.node)
        # A leader election takes seconds: back off (0.25, 0.5, 1, 2 s …) so the attempts span
        # it rather than all meeting it.
        await asyncio.sleep(min(RETRY_BACKOFF_S * 2 ** (attempt - 1), 2.0))
        try:
            await self._reopen(generation)
        except BrokerUnavailable as unavailable:
            raise PublishUnconfirmed(
                f"no confirm for a message to {routing_key!r}, and no node answers "
                f"({unavailable.reason}); publishing it again is safe") from unavailable

    async def publish(self, message: AnyMessage | dict[str, Any] | bytes, *,
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
        properties = _properties(message_id=message_id,
                                 priority=amqp_priority(priority, default_priority),
                                 headers=headers, content_type=content_type)
        routing_key = work_queue(self.settings, properties.priority)
        await self._confirmed((body, properties, routing_key), together=not headers)
        log.debug("message_published", queue=routing_key, message_id=message_id,
                  priority=properties.priority)

    async def dead_letter(self, body: bytes, *, reason: str,
                          headers: dict[str, FieldValue] | None = None,
                          content_type: str | None = None, message_id: str | None = None,
                          priority: int | None = None, worker: str | None = None) -> None:
        """Copy a message into ``<prefix>.dead`` with the reason (see :func:`dead_letter`),
        confirmed, again on a fresh connection when the confirm does not come."""
        message = dead_copy(body, reason=reason, headers=headers, content_type=content_type,
                            message_id=message_id, priority=priority, worker=worker)
        await self._confirmed((message.body, message.properties,
                               dead_queue_name(self.settings.queue)))
        log.info("message_dead_lettered", queue=dead_queue_name(self.settings.queue),
                 message_id=message_id, reason=bounded_reason(reason))

    async def publish_many(self, messages: Sequence[AnyMessage], *,
                           priority: str | int | None = None) -> list[Outcome]:
        """Publish several messages with their confirms pipelined: the messages are written to
        the channel together (:func:`_publish_pipelined`, one write for all) and their confirms
        awaited together, not one round trip per message. Each message is published as
        :meth:`publish` would (validated model, ``priority`` or its own, ``message_id`` the
        ``invoice_id``); those whose confirm did not come, or that the broker nacked, are
        published again together on a fresh connection, up to ``attempts`` times.

        Returns one outcome per message, in order: None when the broker confirmed it, else the
        PublishRefused or PublishUnconfirmed it met (the others are not affected).
        """
        outgoing: list[Outgoing] = []
        for model in messages:
            properties = _properties(message_id=_message_id(model.invoice_id),
                                     priority=amqp_priority(priority, model.priority_value))
            outgoing.append((model.body(), properties,
                             work_queue(self.settings, properties.priority)))
        outcomes: list[Outcome] = [None] * len(outgoing)
        todo = list(range(len(outgoing)))
        for attempt in range(1, self.attempts + 1):
            generation = self._generation
            for index, outcome in zip(todo, await self._written(outgoing, todo), strict=True):
                outcomes[index] = outcome
            todo = [index for index in todo
                    if isinstance(outcomes[index], PublishUnconfirmed | PublishNacked)]
            if not todo or attempt == self.attempts:
                break
            try:
                await self._again(generation, attempt, outgoing[todo[0]][2],
                                  f"{type(outcomes[todo[0]]).__name__} ({len(todo)} messages)")
            except PublishUnconfirmed as unavailable:
                for index in todo:
                    outcomes[index] = unavailable
                break
        log.debug("messages_published", count=len(outgoing),
                  refused=sum(outcome is not None for outcome in outcomes))
        return outcomes


def _distinct_ids(todo: list[int], outgoing: Sequence[Outgoing]) -> list[list[int]]:
    """``todo`` cut, in order, into runs whose messages' ids are distinct (a returned message is
    matched to its confirm by ``message_id``, so one write must not hold an id twice)."""
    parts: list[list[int]] = [[]]
    seen: set[str] = set()
    for index in todo:
        message_id = outgoing[index][1].message_id
        if message_id is not None:
            if message_id in seen:
                parts.append([])
                seen = set()
            seen.add(message_id)
        parts[-1].append(index)
    return [part for part in parts if part]


async def publish_invoice(message: dict[str, Any] | AnyMessage, *,
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
