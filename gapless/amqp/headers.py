"""Headers of a message gapless copies without having written them (a dead-letter copy), bounded,
and the size check every publish passes before it is sent.

A producer chooses a message's headers, and RabbitMQ takes them up to its frame size (``frame_max``,
128 KiB by default): the properties and headers of a message travel in one frame. A copy that
adds gapless's headers to a frame-filling set would not fit, and the broker answers such a frame
by closing the connection. So a copy keeps the original's headers only within a budget measured
in encoded bytes (:func:`cap_headers`):

* a string or byte-array value longer than :data:`HEADER_VALUE_MAX_BYTES` is cut to that length;
* a header larger than that all the same (a nested table or array), one that no longer fits
  :data:`HEADERS_BUDGET_BYTES`, and one that cannot be encoded again are dropped;
* gapless's own dead-letter headers are not copied (the copy writes them afresh);
* what was cut is said in ``x-gapless-headers-cut`` (e.g. "2 of 40 headers dropped, 1 truncated;
  131000 bytes, at most 16384 copied").

A reason is one line of at most :data:`REASON_MAX_BYTES` (:func:`bounded_reason`).
"""

from __future__ import annotations

from typing import Any

from pamqp import encode
from pamqp.common import FieldValue
from pamqp.frame import marshal
from pamqp.header import ContentHeader

from gapless.constants import (
    HEADER_DEAD_AT,
    HEADER_DEAD_HEADERS_CUT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
)

#: The original's headers a dead-letter copy carries, in encoded bytes (far below any frame).
HEADERS_BUDGET_BYTES = 16 * 1024
#: A longer string or byte-array header value is cut to this many bytes.
HEADER_VALUE_MAX_BYTES = 4 * 1024
#: The longest reason header, in UTF-8 bytes.
REASON_MAX_BYTES = 1024
#: pamqp cuts longer table keys (the wire allows 255): such a header is dropped instead.
_KEY_MAX_BYTES = 128
#: Written by the dead-letter copy itself: an original's are not copied.
OWN_HEADERS = frozenset({HEADER_DEAD_REASON, HEADER_DEAD_AT, HEADER_DEAD_WORKER,
                         HEADER_DEAD_HEADERS_CUT})


class TooLargeForFrame(ValueError):
    """A message's properties and headers do not fit the broker's frame."""


def cap_headers(headers: dict[str, Any] | None, *, budget: int = HEADERS_BUDGET_BYTES,
                value_max: int = HEADER_VALUE_MAX_BYTES) -> dict[str, FieldValue]:
    """The headers a copy of a message carries: the original's, in their order, within
    ``budget`` encoded bytes (see the module's docstring); with ``x-gapless-headers-cut`` when
    anything was cut. Never raises for what a delivery's headers can hold."""
    kept: dict[str, FieldValue] = {}
    count = dropped = truncated = original_bytes = 0
    left = budget
    for key, raw in (headers or {}).items():
        if key in OWN_HEADERS:
            continue
        count += 1
        sizes = _entry_sizes(key, raw)
        if sizes is None:
            dropped += 1
            continue
        original_bytes += sum(sizes)
        value, cut = _truncated(_encodable(raw), value_max)
        if cut:
            sizes = _entry_sizes(key, value)
        # A value's own encoding adds a type byte and a 4-byte length to its content.
        if sizes is None or sizes[1] > value_max + 5 or sum(sizes) > left:
            dropped += 1
            continue
        truncated += cut
        kept[key] = value
        left -= sum(sizes)
    if dropped or truncated:
        kept[HEADER_DEAD_HEADERS_CUT] = (
            f"{dropped} of {count} headers dropped, {truncated} truncated; "
            f"{original_bytes} bytes, at most {budget} copied")
    return kept


def bounded_reason(reason: str, limit: int = REASON_MAX_BYTES) -> str:
    """``reason`` on one line (control characters become spaces) of at most ``limit`` UTF-8
    bytes, ending in "…" when cut."""
    line = "".join(" " if _breaks_line(char) else char for char in reason)
    encoded = line.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return line
    return encoded[:limit - 3].decode("utf-8", "ignore") + "…"


def _breaks_line(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or code in (0x2028, 0x2029)


def header_frame_size(body_size: int, properties: Any) -> int:
    """The bytes of the content header frame carrying ``properties`` (pamqp
    ``Basic.Properties``) of a message of ``body_size`` bytes, frame header and end included:
    what has to fit the connection's ``frame_max``."""
    return len(marshal(ContentHeader(0, body_size, properties), 1))


def check_frame(body_size: int, properties: Any, frame_max: int) -> None:
    """Raise :class:`TooLargeForFrame` when the message cannot be sent in a frame of
    ``frame_max`` bytes (the broker would close the connection), or its headers cannot be
    encoded at all."""
    try:
        size = header_frame_size(body_size, properties)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise TooLargeForFrame(f"its headers cannot be encoded ({type(exc).__name__})") from exc
    if frame_max and size > frame_max:
        raise TooLargeForFrame(f"its properties and headers take {size} bytes, more than the "
                               f"broker's frame of {frame_max}")


def _entry_sizes(key: str, value: Any) -> tuple[int, int] | None:
    """Encoded bytes of one table entry's key and value (as :func:`_encodable` makes it); None
    when it cannot be encoded."""
    try:
        if len(key.encode("utf-8")) > _KEY_MAX_BYTES:
            return None
        return (len(encode.short_string(key)),
                len(encode.encode_table_value(_encodable(value))))
    except (TypeError, ValueError, OverflowError, RecursionError, UnicodeError):
        return None


def _encodable(value: Any) -> Any:
    """A header value as pamqp can encode it again: a long string that was not UTF-8 arrives as
    ``bytes``, which pamqp only writes as a byte array."""
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    if isinstance(value, dict):
        return {key: _encodable(item) for key, item in value.items()}
    return value


def _truncated(value: Any, limit: int) -> tuple[Any, bool]:
    if isinstance(value, str):
        encoded = value.encode("utf-8", "surrogatepass")
        if len(encoded) > limit:
            return encoded[:limit].decode("utf-8", "ignore"), True
    elif isinstance(value, bytearray) and len(value) > limit:
        return value[:limit], True
    return value, False
