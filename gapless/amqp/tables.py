"""Decoding the field tables of a frame (a message's headers) so that no message can end the
connection that receives it.

pamqp, with which aiormq decodes every frame, recurses once per nesting level of a table or
array and decodes table keys as strict UTF-8. RabbitMQ passes headers on as the producer wrote
them, so a header nested a few thousand levels deep (it fits the 128 KiB frame) raises
RecursionError, and a key that is not UTF-8 raises UnicodeDecodeError, in the connection's
reader: the connection closes with every delivery on it, RabbitMQ delivers the message again,
and a consumer never gets past it (for ever, in classic mode).

:func:`install` (run when :mod:`gapless.amqp` is imported, before any connection) makes pamqp
decode tables and arrays with :func:`field_table` and :func:`field_array`, which decode as
pamqp does except that

* a table or array nested deeper than :data:`MAX_DEPTH` levels is replaced by the string
  ``"(nested deeper than 32 levels: N bytes)"`` (its length prefix lets it be skipped without
  reading it);
* a key that is not UTF-8 is decoded with replacement characters (U+FFFD).
"""

from __future__ import annotations

import struct
import threading
from typing import Any

from pamqp import decode

#: Tables and arrays nested deeper than this inside a frame's table are not decoded.
MAX_DEPTH = 32

_LENGTH = struct.Struct(">I")
_nesting = threading.local()


def too_deep(size: int) -> str:
    """What stands for a table or array of ``size`` bytes nested deeper than MAX_DEPTH."""
    return f"(nested deeper than {MAX_DEPTH} levels: {size} bytes)"


def _length(value: bytes, what: str) -> int:
    try:
        length: int = _LENGTH.unpack_from(value)[0]
    except struct.error as exc:
        raise ValueError(f"Could not unpack {what} length") from exc
    if 4 + length > len(value):
        raise ValueError(f"Field {what} length exceeds available data")
    return length


def field_table(value: bytes) -> tuple[int, Any]:
    """A table at the start of ``value``: (bytes consumed, the dict, or :func:`too_deep`)."""
    end = 4 + _length(value, "table")
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_DEPTH:
        return end, too_deep(end - 4)
    data: dict[str, Any] = {}
    offset = 4
    _nesting.depth = depth + 1
    try:
        while offset < end:
            key_length = value[offset]
            offset += 1
            if offset + key_length > end:
                raise ValueError("Field table key length exceeds data")
            key = value[offset:offset + key_length].decode("utf-8", "replace")
            offset += key_length
            consumed, data[key] = decode.embedded_value(value[offset:end])
            offset += consumed
    finally:
        _nesting.depth = depth
    return end, data


def field_array(value: bytes) -> tuple[int, Any]:
    """An array at the start of ``value``: (bytes consumed, the list, or :func:`too_deep`)."""
    end = 4 + _length(value, "array")
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_DEPTH:
        return end, too_deep(end - 4)
    data: list[Any] = []
    offset = 4
    _nesting.depth = depth + 1
    try:
        while offset < end:
            consumed, item = decode.embedded_value(value[offset:end])
            offset += consumed
            data.append(item)
    finally:
        _nesting.depth = depth
    return end, data


def install() -> None:
    """Make pamqp decode tables and arrays with :func:`field_table` and :func:`field_array`
    (idempotent). Raises RuntimeError when pamqp no longer has the tables it replaces."""
    if not {"table", "array"} <= decode.METHODS.keys() or not {b"F", b"A"} <= (
            decode.TABLE_MAPPING.keys()):
        raise RuntimeError("pamqp's decoder has changed: gapless.amqp.tables needs updating")
    decode.METHODS["table"] = field_table
    decode.METHODS["array"] = field_array
    decode.TABLE_MAPPING[b"F"] = field_table
    decode.TABLE_MAPPING[b"A"] = field_array
    decode.field_table = field_table
    decode.field_array = field_array
