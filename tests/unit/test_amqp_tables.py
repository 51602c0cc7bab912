"""Frames whose headers pamqp could not decode (nested thousands of levels deep, keys that are not
UTF-8) decode with gapless.amqp.tables, and every other table decodes as before."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pamqp import commands, decode, encode
from pamqp.frame import marshal, unmarshal
from pamqp.header import ContentHeader

import gapless.amqp  # noqa: F401  (installs the decoding)
from gapless.amqp.tables import MAX_DEPTH, field_array, field_table, too_deep

VARIED: dict[str, Any] = {
    "text": "şğü", "empty": "", "int": 7, "negative": -40000, "big": 2**40, "yes": True,
    "float": 1.5, "decimal": Decimal("12.34"), "none": None, "bytes": bytearray(b"\x00\xff"),
    "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    "list": [1, "a", [2, {"k": "v"}], {}], "table": {"inner": {"deeper": [None, False]}},
}


def table_bytes(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A field table written by hand: (raw key, encoded value) pairs."""
    body = b"".join(bytes([len(key)]) + key + value for key, value in entries)
    return struct.pack(">I", len(body)) + body


def deep_table(depth: int) -> bytes:
    """``{"a": {"a": … {"leaf": 1}}}`` nested ``depth`` times, built without recursion."""
    table = table_bytes([(b"leaf", b"b\x01")])
    for _ in range(depth):
        table = table_bytes([(b"a", b"F" + table)])
    return table


def test_pamqp_decodes_with_gapless_tables() -> None:
    assert decode.METHODS["table"] is field_table
    assert decode.TABLE_MAPPING[b"A"] is field_array


def test_tables_of_every_type_decode_as_they_were_encoded() -> None:
    raw = encode.field_table(VARIED)
    assert field_table(raw) == (len(raw), VARIED)
    assert field_array(encode.field_array([VARIED, [1]]))[1] == [VARIED, [1]]


def test_a_table_nested_thousands_of_levels_deep_is_cut_at_max_depth() -> None:
    raw = deep_table(5000)
    consumed, value = field_table(raw)
    assert consumed == len(raw)
    level = value
    for _ in range(MAX_DEPTH - 1):  # the outermost table is the first level
        level = level["a"]
    assert isinstance(level["a"], str)
    assert level["a"].startswith(too_deep(0).split(":")[0])


def test_arrays_nested_deep_are_cut_too() -> None:
    array = struct.pack(">I", 0)
    for _ in range(3000):
        array = struct.pack(">I", len(array) + 1) + b"A" + array
    _, value = field_array(array)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == [too_deep(len(array) - 4 - 5 * MAX_DEPTH)]


def test_a_key_that_is_not_utf8_is_decoded_with_replacement_characters() -> None:
    raw = table_bytes([(b"x-\xff", b"S" + struct.pack(">I", 1) + b"v"), (b"ok", b"b\x02")])
    assert field_table(raw)[1] == {"x-\ufffd": "v", "ok": 2}


def test_a_content_header_frame_with_such_headers_unmarshals() -> None:
    properties = commands.Basic.Properties(headers={"x-ok": 1}, message_id="m")
    frame = marshal(ContentHeader(0, 2, properties), 1)
    # Swap the encoded headers for a deep table and a bad key (the broker passes both on).
    headers = table_bytes([(b"x-deep", b"F" + deep_table(3000)), (b"\xfe", b"b\x01")])
    payload = frame[7:-1].replace(encode.field_table({"x-ok": 1}), headers)
    frame = frame[:3] + struct.pack(">I", len(payload)) + payload + frame[-1:]
    _, _, header = unmarshal(frame)
    assert isinstance(header, ContentHeader)
    assert header.properties.message_id == "m"
    assert header.properties.headers["\ufffd"] == 1
