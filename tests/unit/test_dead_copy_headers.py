"""The headers of a dead-letter copy are bounded (gapless.amqp.headers), whatever the original
carried: frame-filling strings, many small headers, nested tables, byte arrays, strings that are
not UTF-8, gapless's own headers forged by a producer."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pamqp import encode

from gapless.amqp.headers import (
    HEADER_VALUE_MAX_BYTES,
    HEADERS_BUDGET_BYTES,
    REASON_MAX_BYTES,
    TooLargeForFrame,
    bounded_reason,
    cap_headers,
    check_frame,
    header_frame_size,
)
from gapless.amqp.publisher import dead_copy
from gapless.constants import HEADER_DEAD_HEADERS_CUT, HEADER_DEAD_REASON, HEADER_DEAD_WORKER

FRAME_MAX = 131072


def encoded(headers: dict[str, Any]) -> int:
    return len(encode.field_table(headers))


def frame_filling() -> dict[str, Any]:
    """About 125 KiB of headers: eight long strings and a thousand short ones."""
    headers: dict[str, Any] = {f"x-filler-{n}": "f" * 15000 for n in range(8)}
    headers.update({f"x-small-{n}": n for n in range(1000)})
    return headers


def test_small_headers_are_copied_as_they_are() -> None:
    headers = {"traceparent": "00-abc-def-01", "x-retries": 3, "x-ok": True}
    assert cap_headers(headers) == headers


def test_frame_filling_headers_are_cut_to_the_budget_and_the_cut_is_said() -> None:
    headers = frame_filling()
    assert encoded(headers) > 120 * 1024
    kept = cap_headers(headers)
    assert encoded(kept) <= HEADERS_BUDGET_BYTES + 200  # the budget, and the note of the cut
    assert kept["x-filler-0"] == "f" * HEADER_VALUE_MAX_BYTES  # cut to the value limit, kept
    cut = str(kept[HEADER_DEAD_HEADERS_CUT])
    assert cut.startswith(f"{1008 - (len(kept) - 1)} of 1008 headers dropped, ")
    assert "truncated" in cut
    assert f"at most {HEADERS_BUDGET_BYTES} copied" in cut


def test_the_copy_of_a_frame_filling_message_fits_the_frame() -> None:
    copy = dead_copy(b"{}", reason="x" * 100_000, headers=frame_filling(),
                     content_type="application/json", message_id="m" * 255, priority=4,
                     worker="host:1")
    assert header_frame_size(copy.body_size, copy.properties) < 24 * 1024
    check_frame(copy.body_size, copy.properties, FRAME_MAX)
    headers = copy.headers
    assert len(str(headers[HEADER_DEAD_REASON]).encode()) <= REASON_MAX_BYTES
    assert headers[HEADER_DEAD_WORKER] == "host:1"


def test_a_large_nested_table_is_dropped_and_a_small_one_kept() -> None:
    big = {"rows": [{"n": n, "text": "t" * 100} for n in range(100)]}
    small = {"deep": [1, bytearray(b"\x00\xff"), {"x": 1.5}, None, Decimal("1.25")]}
    kept = cap_headers({"x-big": big, "x-small": small})
    assert "x-big" not in kept
    assert kept["x-small"] == small
    assert str(kept[HEADER_DEAD_HEADERS_CUT]).startswith("1 of 2 headers dropped, 0 truncated")


def test_exotic_types_are_copied_so_that_they_encode_again() -> None:
    """pamqp decodes a long string that is not UTF-8 into bytes, which it cannot encode: the
    copy carries it as a byte array."""
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    headers = {"x-raw": b"\xff\xfe", "x-nested": {"list": [b"\x80", {"b": b"\x81"}]},
               "x-when": moment, "x-none": None, "x-big-int": 2**40, "x-bytes": bytearray(3)}
    kept = cap_headers(headers)
    assert kept["x-raw"] == bytearray(b"\xff\xfe")
    assert kept["x-nested"] == {"list": [bytearray(b"\x80"), {"b": bytearray(b"\x81")}]}
    assert kept["x-when"] == moment
    assert HEADER_DEAD_HEADERS_CUT not in kept
    encode.field_table(kept)  # encodes


def test_unencodable_and_overlong_keys_are_dropped() -> None:
    headers: dict[str, Any] = {"x-int": 2**70, "k" * 129: "v", "x-set": {1, 2}, "x-ok": "ok"}
    kept = cap_headers(headers)
    assert set(kept) == {"x-ok", HEADER_DEAD_HEADERS_CUT}
    assert str(kept[HEADER_DEAD_HEADERS_CUT]).startswith("3 of 4 headers dropped")


def test_long_byte_arrays_and_multibyte_strings_are_cut_on_a_boundary() -> None:
    kept = cap_headers({"x-bin": bytearray(10_000), "x-text": "ğ" * 10_000})
    assert kept["x-bin"] == bytearray(HEADER_VALUE_MAX_BYTES)
    text = str(kept["x-text"])
    assert text == "ğ" * (HEADER_VALUE_MAX_BYTES // 2)
    assert "2 truncated" in str(kept[HEADER_DEAD_HEADERS_CUT])


def test_a_producers_own_gapless_headers_are_not_copied() -> None:
    forged = {HEADER_DEAD_REASON: "forged", HEADER_DEAD_HEADERS_CUT: "forged",
              "x-gapless-replayed-at": "2026-01-01T00:00:00+00:00"}
    kept = cap_headers(forged)
    assert kept == {"x-gapless-replayed-at": "2026-01-01T00:00:00+00:00"}
    copy = dead_copy(b"{}", reason="lines: field required", headers=forged)
    assert copy.headers[HEADER_DEAD_REASON] == "lines: field required"


def test_x_death_is_copied_while_it_fits() -> None:
    deaths = [{"count": 3, "reason": "rejected", "queue": f"q{n}", "exchange": "",
               "routing-keys": [f"q{n}"], "time": datetime(2026, 1, 1, tzinfo=UTC)}
              for n in range(5)]
    assert cap_headers({"x-death": deaths}) == {"x-death": deaths}


@pytest.mark.parametrize(("reason", "expected"), [
    ("lines: field required", "lines: field required"),
    ("two\nlines\r\x00and\u2028more", "two lines  and more"),
])
def test_a_reason_is_one_line(reason: str, expected: str) -> None:
    assert bounded_reason(reason) == expected


def test_a_long_reason_is_cut_with_an_ellipsis() -> None:
    reason = bounded_reason("ş" * 5000)
    assert len(reason.encode()) <= REASON_MAX_BYTES
    assert reason.endswith("…")


def test_a_message_larger_than_the_frame_is_refused_before_sending() -> None:
    import aio_pika

    message = aio_pika.Message(b"{}", headers={"x-filler": "f" * FRAME_MAX})
    with pytest.raises(TooLargeForFrame, match="more than the broker's frame of 131072"):
        check_frame(message.body_size, message.properties, FRAME_MAX)
    check_frame(message.body_size, message.properties, 0)  # no limit negotiated
