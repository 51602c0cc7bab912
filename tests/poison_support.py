"""Publishing what a careless or hostile producer could: headers that nearly fill the broker's
frame, headers nested thousands of levels deep, header keys and strings that are not UTF-8
(shared by the poison-message tests of the integration and acceptance tiers)."""

from __future__ import annotations

import sys
from typing import Any

import aio_pika
from pamqp.frame import marshal
from pamqp.header import ContentHeader

from gapless.constants import dead_queue_name
from gapless.settings import Settings

#: What the content header frame of the poison message leaves free of the broker's frame_max:
#: too little for the reason headers a dead-letter copy adds.
SLACK = 48


def header_frame_size(message: aio_pika.Message) -> int:
    """The bytes of the content header frame that carries ``message``'s properties."""
    return len(marshal(ContentHeader(0, message.body_size, message.properties), 1))


def filled(message: aio_pika.Message, frame_max: int) -> aio_pika.Message:
    """``message`` with headers added that make its content header frame ``frame_max - SLACK``
    bytes (eight string headers of about 16 KiB each)."""
    fillers = [f"x-filler-{n}" for n in range(8)]
    headers: dict[str, Any] = {**(message.headers or {}), **dict.fromkeys(fillers, "")}

    def with_headers() -> aio_pika.Message:
        return aio_pika.Message(message.body, headers=headers,
                                content_type=message.content_type,
                                message_id=message.message_id,
                                delivery_mode=message.delivery_mode)

    room = frame_max - SLACK - header_frame_size(with_headers())
    for name in fillers:
        headers[name] = "f" * (room // len(fillers))
    headers[fillers[0]] += "f" * (frame_max - SLACK - header_frame_size(with_headers()))
    result = with_headers()
    assert header_frame_size(result) == frame_max - SLACK
    return result


async def publish_raw(settings: Settings, body: bytes, *, message_id: str,
                      headers: dict[str, Any] | None = None, fill: bool = False) -> None:
    """Publish to ``<prefix>`` with confirms, as any producer could; ``fill``: with headers
    that nearly fill the negotiated frame_max."""
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        message = aio_pika.Message(body, headers=headers, content_type="application/json",
                                   message_id=message_id,
                                   delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        if fill:
            underlay = connection.transport.connection
            message = filled(message, underlay.connection_tune.frame_max)
        await channel.default_exchange.publish(message, routing_key=settings.queue)


async def dead_depth(settings: Settings) -> int:
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        return int(queue.declaration_result.message_count or 0)


class RawText(str):
    """A header string sent as these bytes, valid UTF-8 or not (pamqp encodes text itself)."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawText:
        text = super().__new__(cls, raw.decode("utf-8", "replace"))
        text.raw = raw
        return text

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


async def publish_deep(settings: Settings, body: bytes, *, message_id: str,
                       headers: dict[str, Any]) -> None:
    """Publish headers pamqp needs more than the default recursion limit to encode."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        await publish_raw(settings, body, message_id=message_id, headers=headers)
    finally:
        sys.setrecursionlimit(limit)
