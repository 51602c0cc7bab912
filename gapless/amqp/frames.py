"""The content frames of a published message — its header frame and body frames — byte for byte
as pamqp marshals them, made without pamqp's per-property work for the messages a publisher
sends by the thousand.

pamqp encodes a header frame's properties one by one through a generic encoder, every time
(seven properties for a work message: a sixth of the CPU of ``gapless publish --file``). The
work messages of one publisher differ only in their ``message_id`` (the invoice), the body's
size and, from one second to the next, the timestamp and the priority; so the properties
around the ``message_id`` are marshalled by pamqp once per combination and kept, and a message's
header frame is those bytes with its own ``message_id`` and body size put in. Anything else —
AMQP headers (a dead letter's), a naive timestamp, a ``message_id`` pamqp would leave out or
refuse — goes through pamqp itself. ``tests/unit/test_amqp_frames.py`` holds the two to the same
bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from datetime import datetime

import pamqp.frame
from aiormq import spec
from pamqp import constants
from pamqp.header import ContentHeader

#: Frame type, channel, payload size (AMQP 0-9-1, 4.2.3).
_FRAME = struct.Struct(">BHI")
#: A content header's class id, weight and body size (4.2.6).
_CONTENT = struct.Struct(">HHQ")
_END = constants.FRAME_END_CHAR
_BASIC = spec.Basic.frame_id
#: The properties a header frame writes before ``message_id``, and after it (pamqp's order).
_BEFORE = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
           "correlation_id", "reply_to", "expiration")
_AFTER = ("timestamp", "message_type", "user_id", "app_id", "cluster_id")
_MESSAGE_ID_FLAG = spec.Basic.Properties.flags["message_id"]
_MAX_SHORTSTR = 255
#: Kept combinations of the other properties: a publisher meets a few a second.
_KEPT = 256

_parts: dict[tuple[object, ...], tuple[bytes, bytes, bytes]] = {}


def _marshalled(properties: spec.Basic.Properties, names: tuple[str, ...]) -> tuple[int, bytes]:
    """pamqp's flags and bytes of ``names`` of ``properties`` alone."""
    encoded = spec.Basic.Properties(**{name: getattr(properties, name) for name in names}
                                    ).marshal()
    return int.from_bytes(encoded[:2], "big"), encoded[2:]


def _around(properties: spec.Basic.Properties) -> tuple[bytes, bytes, bytes] | None:
    """The flags and the property bytes before and after ``message_id``, or None when the
    properties are not the kind kept (pamqp marshals those itself)."""
    headers = properties.headers
    stamp = properties.timestamp
    if headers or (stamp is not None and (not isinstance(stamp, datetime)
                                          or stamp.utcoffset() is None)):
        return None
    key = (properties.content_type, properties.content_encoding, headers is None,
           properties.delivery_mode, properties.priority, properties.correlation_id,
           properties.reply_to, properties.expiration,
           None if stamp is None else int(stamp.timestamp()), properties.message_type,
           properties.user_id, properties.app_id, properties.cluster_id)
    kept = _parts.get(key)
    if kept is None:
        before_flags, before = _marshalled(properties, _BEFORE)
        after_flags, after = _marshalled(properties, _AFTER)
        flags = before_flags | _MESSAGE_ID_FLAG | after_flags
        if len(_parts) >= _KEPT:
            _parts.clear()
        kept = _parts[key] = (struct.pack(">H", flags), before, after)
    return kept


def content_header(channel: int, properties: spec.Basic.Properties, body_size: int) -> bytes:
    """The header frame of a message of ``body_size`` bytes with ``properties`` on ``channel``:
    the bytes ``pamqp.frame.marshal(ContentHeader(…), channel)`` makes."""
    message_id = properties.message_id
    encoded_id = message_id.encode() if message_id else b""
    around = _around(properties) if 0 < len(encoded_id) <= _MAX_SHORTSTR else None
    if around is None:
        return pamqp.frame.marshal(ContentHeader(body_size=body_size, properties=properties),
                                   channel)
    flags, before, after = around
    payload = b"".join((_CONTENT.pack(_BASIC, 0, body_size), flags, before,
                        bytes((len(encoded_id),)), encoded_id, after))
    return b"".join((_FRAME.pack(constants.FRAME_HEADER, channel, len(payload)), payload, _END))


def body_frames(channel: int, body: bytes, largest: int) -> Iterator[bytes]:
    """The body frames of ``body`` on ``channel``, at most ``largest`` bytes each: what
    ``pamqp.frame.marshal(ContentBody(part), channel)`` makes of each part."""
    for start in range(0, len(body), largest):
        part = body[start:start + largest]
        yield b"".join((_FRAME.pack(constants.FRAME_BODY, channel, len(part)), part, _END))
