"""The dead-letter queue ``<prefix>.dead``: list its messages, put (fixed) ones back on the main
queue — what ``gapless dead list | replay`` run.

Both take dead messages with ``basic.get`` *without* auto-ack, so a message is never lost
whatever happens to this process: until it is acked it belongs to the broker, and a crash or a
closed connection returns it to the dead queue.

* :func:`list_dead` gets up to ``limit`` messages, holds them unacked while reading their
  headers, and then rejects them with ``requeue`` — they stay in the dead queue, in their order.
* :func:`replay_dead` walks the dead queue the same way; every selected message is re-published
  to the main queue (persistent, publisher confirm, with its original priority), and only
  **after the confirm** is its dead copy acked. A crash between the two leaves the message in
  both queues: the worker maps a repeated ``invoice_id`` onto the same invoice, so the duplicate
  is harmless. Messages not selected are requeued untouched. A replayed message that is still
  invalid goes back to the dead queue with its reason the next time a worker sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gapless.constants import (
    CONTENT_TYPE_JSON,
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    HEADER_REPLAYED_AT,
    dead_queue_name,
)
from gapless.errors import GaplessError
from gapless.logging import get_logger
from gapless.settings import Settings

log = get_logger("gapless.dead")

#: Headers that describe a previous death; a replayed message starts without them.
_DEATH_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue",
                  "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                  "x-last-death-reason", "x-delivery-count")


@dataclass(frozen=True)
class DeadLetter:
    """What an operator needs to decide about one dead message (never its payload)."""

    position: int
    invoice_id: str | None
    reason: str | None
    dead_at: str | None
    worker: str | None
    message_id: str | None
    priority: int | None
    content_type: str | None
    body_bytes: int
    #: Why the body cannot be read (not UTF-8, not JSON, nested too deep, too large, not an
    #: object), one line; None when it is a JSON object.
    body_problem: str | None = None


def _loggable(text: str | None) -> str | None:
    """A value from a dead message as a log field: as it is when printable, else its ``ascii``
    form, so a console log line on the operator's terminal carries no escape sequence."""
    return text if text is None or text.isprintable() else ascii(text)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def read_body(body: bytes) -> tuple[str | None, str | None]:
    """``(invoice_id, problem)`` of a dead body: its ``invoice_id`` when the body is a JSON
    object that has one, and — when it cannot be read — why, in one line (:func:`read_key`)."""
    _, invoice_id, problem = read_key(body)
    return invoice_id, problem


def read_key(body: bytes) -> tuple[str | None, str | None, str | None]:
    """``(tenant, invoice_id, problem)`` of a dead body: the tenant and invoice_id it names
    (an invoice is the pair: ids are unique per tenant) and — when it cannot be read — why.

    Read as the worker reads a delivery: no more than ``MAX_BODY_BYTES``, then
    :func:`gapless.message.parse.decode_json` (strict UTF-8 and JSON, bounded depth), so a body
    that broke the worker is described here, never raised. Not the ``message_id``: a publisher
    that gives none gets a random one from its client library, which would pass for an
    invoice_id here.
    """
    from gapless.message.fields import MAX_BODY_BYTES, InvalidMessage, json_type
    from gapless.message.parse import decode_json

    if len(body) > MAX_BODY_BYTES:
        return None, None, f"body is {len(body)} bytes; at most {MAX_BODY_BYTES} are read"
    try:
        data = decode_json(body)
    except InvalidMessage as exc:
        return None, None, exc.reason
    if not isinstance(data, dict):
        return None, None, f"body must be a JSON object, not {json_type(data)}"
    tenant, invoice_id = data.get("tenant"), data.get("invoice_id")
    return ((tenant if isinstance(tenant, str) else None),
            (invoice_id if isinstance(invoice_id, str) else None), None)


def invoice_id_of(body: bytes) -> str | None:
    """The body's ``invoice_id`` when the body is a JSON object that has one (:func:`read_body`)."""
    return read_body(body)[0]


def dead_reason(headers: dict[str, Any]) -> str | None:
    """What RabbitMQ recorded when it dead-lettered the message itself (``x-death``), else
    gapless's own reason header.

    The broker's record comes first: a message the broker dead-lettered still carries whatever
    headers its producer wrote, ``x-gapless-reason`` included, while the worker's own copies go
    straight to ``<prefix>.dead`` (no ``x-death`` of their own) with the producer's
    ``x-gapless-*`` headers removed.
    """
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        why, queue = _text(deaths[0].get("reason")), _text(deaths[0].get("queue"))
        if why == "delivery_limit":
            return (f"broker: delivered too often without an outcome (delivery limit) "
                    f"in {queue}")
        return f"broker: {why} in {queue}"
    return _text(headers.get(HEADER_DEAD_REASON)) or None


def describe(position: int, message: Any) -> DeadLetter:
    """What an operator sees of the dead ``message`` (an incoming aio-pika message) at
    ``position`` (1: the head of the queue); its body is only measured and searched for an
    ``invoice_id`` (:func:`read_body`)."""
    headers = dict(message.headers or {})
    dead_at = _text(headers.get(HEADER_DEAD_AT))
    if dead_at is None and message.timestamp is not None:
        dead_at = message.timestamp.isoformat()
    invoice_id, body_problem = read_body(message.body)
    return DeadLetter(
        position=position, invoice_id=invoice_id, body_problem=body_problem,
        reason=dead_reason(headers), dead_at=dead_at, worker=_text(headers.get(HEADER_DEAD_WORKER)),
        message_id=message.message_id, priority=message.priority,
        content_type=message.content_type, body_bytes=len(message.body))


async def requeue(messages: list[Any]) -> None:
    """Give held messages back to the dead queue (a lost channel does the same by itself)."""
    import aiormq

    for message in messages:
        try:
            await message.nack(requeue=True)
        except (aiormq.exceptions.AMQPError, RuntimeError, ConnectionError):
            log.warning("dead_requeue_failed", message_id=_loggable(message.message_id))


@dataclass(frozen=True)
class DeadLetters:
    """The dead queue's length when read, and the messages read from its head (in order)."""

    queue: str
    total: int
    messages: list[DeadLetter]


async def list_dead(settings: Settings, limit: int) -> DeadLetters:
    """The messages in the dead queue and the first ``limit`` of them; every one stays queued
    (held unacked while read, then requeued in its place). A missing dead queue has none."""
    import aiormq

    from gapless.amqp.connection import connect_once

    name = dead_queue_name(settings.queue)
    connection = await connect_once(settings)
    held: list[Any] = []
    async with connection:
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return DeadLetters(name, 0, [])
        total = queue.declaration_result.message_count or 0
        try:
            while len(held) < limit:
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                held.append(message)
            return DeadLetters(name, total, [describe(n, m) for n, m in enumerate(held, start=1)])
        finally:
            await requeue(held)


#: A fixed message's invoice: (tenant, invoice_id).
FixKey = tuple[str, str]


@dataclass
class ReplayResult:
    """What a replay did: the invoice_ids replayed in order (None: a body without one) with
    their tenants, those replayed with a fixed body, how many dead messages stayed, and the
    invoice_ids asked for that the dead queue did not hold (sorted). ``problems`` goes with
    ``replayed``: why each body cannot be read (:func:`read_body`), None for a readable one."""

    replayed: list[str | None] = field(default_factory=list)
    tenants: list[str | None] = field(default_factory=list)
    problems: list[str | None] = field(default_factory=list)
    fixed: list[FixKey] = field(default_factory=list)
    kept: int = 0
    not_found: list[str] = field(default_factory=list)

    def unused_fixes(self, fixes: dict[FixKey, Any]) -> list[str]:
        """The invoice_ids of ``fixes`` whose message was there but not selected (sorted)."""
        missing = set(self.not_found)
        return sorted(invoice_id for key in set(fixes) - set(self.fixed)
                      if (invoice_id := key[1]) not in missing)


class InvalidFix(GaplessError):
    """A line of a file of fixed messages is not a valid contract message: nothing is
    replayed."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def parse_fixes(data: bytes) -> dict[FixKey, tuple[bytes, str | None]]:
    """Fixed bodies keyed by (tenant, invoice_id) from JSON Lines:
    ``{(tenant, id): (body, priority or None)}``.

    Each line must be a valid contract message (the point of a fix), and name an invoice no
    other line names; else :class:`InvalidFix` for the first bad line. Blank lines are skipped.
    A fix replaces the dead message of its own tenant's invoice only.
    """
    from gapless.message import InvalidMessage, parse_message

    fixes: dict[FixKey, tuple[bytes, str | None]] = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            message = parse_message(raw, CONTENT_TYPE_JSON)
        except InvalidMessage as exc:
            raise InvalidFix(number, exc.reason) from None
        key = (message.tenant, message.invoice_id)
        if key in fixes:
            raise InvalidFix(number, f"invoice_id {message.invoice_id!r} of tenant "
                                     f"{message.tenant!r} appears twice")
        fixes[key] = (raw.strip(), message.priority)
    return fixes


async def replay_dead(settings: Settings, *, replay_all: bool, invoice_ids: set[str],
                      fixes: dict[FixKey, tuple[bytes, str | None]],
                      tenant: str | None = None) -> ReplayResult:
    """Move the selected dead messages to the main queue: publish (confirmed), then ack.

    Selected: every message with ``replay_all``, else those whose invoice_id is in
    ``invoice_ids``, else (neither given) those ``fixes`` names; with ``tenant``, only that
    tenant's messages. A message with a fix for its (tenant, invoice_id) is published with the
    fixed body.
    """
    from gapless.amqp.connection import connect_once
    from gapless.amqp.publisher import Publisher

    def selected(body_tenant: str | None, invoice_id: str | None) -> bool:
        if tenant is not None and body_tenant != tenant:
            return False
        if replay_all:
            return True
        if invoice_ids:
            return invoice_id in invoice_ids
        return (body_tenant, invoice_id) in fixes

    result = ReplayResult()
    found: set[str] = set()
    held: list[Any] = []
    # Read on a connection of its own: the publisher may move to a fresh connection (another
    # node) when a confirm does not come, and the held dead copies must stay ackable.
    async with Publisher(settings) as publisher, await connect_once(settings) as reading:
        channel = await reading.channel()
        dead = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        try:
            while True:
                message = await dead.get(no_ack=False, fail=False)
                if message is None:
                    break
                held.append(message)
                body_tenant, invoice_id, problem = read_key(message.body)
                if not selected(body_tenant, invoice_id):
                    continue
                if invoice_id is not None:
                    found.add(invoice_id)
                key = (body_tenant or "", invoice_id or "")
                fix = fixes.get(key) if body_tenant and invoice_id else None
                await republish(publisher, message, fix)
                held.remove(message)
                result.replayed.append(invoice_id)
                result.tenants.append(body_tenant)
                result.problems.append(problem)
                if fix is not None:
                    result.fixed.append(key)
                log.info("dead_letter_replayed", queue=settings.queue,
                         invoice_id=_loggable(invoice_id), fixed=fix is not None)
        finally:
            result.kept = len(held)
            await requeue(held)
    if not replay_all:
        wanted = invoice_ids or {invoice_id for _, invoice_id in fixes}
        result.not_found = sorted(wanted - found)
    return result


def replay_headers(headers: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The headers a replayed message carries: its own, without gapless's (``x-gapless-…``) and
    the broker's dead-lettering ones, stamped with the replay's moment."""
    kept = {key: value for key, value in headers.items()
            if not key.startswith("x-gapless-") and key not in _DEATH_HEADERS}
    kept[HEADER_REPLAYED_AT] = now.isoformat()
    return kept


async def republish(publisher: Any, message: Any, fix: tuple[bytes, str | None] | None) -> None:
    """Publish one dead message (its fixed body, if any) on the main queue, confirmed, then ack
    the dead copy. The gapless and dead-lettering headers go; a replay stamp is added."""
    from gapless.amqp.topology import amqp_priority

    body, priority = message.body, message.priority
    if fix is not None:
        body, fix_priority = fix
        if fix_priority is not None:
            priority = amqp_priority(fix_priority, None)
    headers = replay_headers(dict(message.headers or {}), datetime.now(UTC))
    await publisher.publish(body, priority=priority, headers=headers,
                            content_type=message.content_type or CONTENT_TYPE_JSON,
                            message_id=message.message_id)
    # The confirm is in: only now may the dead copy go.
    await message.ack()
