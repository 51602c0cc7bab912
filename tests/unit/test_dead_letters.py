"""Dead letters without a broker: what an operator sees of one (its invoice_id, why it died,
when), the file of fixed messages, and the headers a replayed message carries
(tests/integration/test_dead.py: ``gapless dead list | replay`` against RabbitMQ)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from gapless.constants import (
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    HEADER_REPLAYED_AT,
)
from gapless.ops.dead import (
    DeadLetter,
    InvalidFix,
    ReplayResult,
    dead_reason,
    describe,
    invoice_id_of,
    parse_fixes,
    read_body,
    replay_headers,
)

VALID = {"invoice_id": "inv-1", "tenant": "acme", "series": "ABC", "issue_date": "2026-11-20",
         "currency": "TRY", "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
         "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                    "vat_rate": "20"}]}


def line(**changes: Any) -> bytes:
    return json.dumps({**VALID, **changes}).encode()


@pytest.mark.parametrize(("body", "invoice_id"), [
    (b'{"invoice_id": "inv-1"}', "inv-1"),
    (b'{"invoice_id": 7}', None),
    (b'["inv-1"]', None),
    (b"not json", None),
    (b"\xff\xfe", None),
])
def test_the_invoice_id_is_read_from_the_body_only(body: bytes, invoice_id: str | None) -> None:
    assert invoice_id_of(body) == invoice_id


@pytest.mark.parametrize(("body", "problem"), [
    (b'{"invoice_id": 7}', None),
    (b'["inv-1"]', "body must be a JSON object, not a list"),
    (b"\xff\xfe", "body is not valid UTF-8"),
    (b"[" * 10_000 + b"]" * 10_000, "body nests more than 16 levels deep"),
    (b'{"a": ' * 10_000 + b"1" + b"}" * 10_000, "body nests more than 16 levels deep"),
    (b'{"invoice_id": "a", "invoice_id": "b"}', "body has a duplicate field name in an object"),
    (b"9" * 10_000, "body is not valid JSON: a number literal is too long"),
    (b" " * (1024 * 1024), "bytes; at most"),
])
def test_a_body_that_cannot_be_read_is_described_in_one_line(body: bytes,
                                                              problem: str | None) -> None:
    invoice_id, found = read_body(body)
    assert invoice_id is None
    assert (found is None) if problem is None else (found is not None and problem in found)
    letter = describe(1, SimpleNamespace(headers={}, timestamp=None, body=body, message_id=None,
                                         priority=None, content_type=None))
    assert (letter.invoice_id, letter.body_problem) == (None, found)


def test_the_reason_is_what_the_broker_recorded_else_gaplesss_own() -> None:
    assert dead_reason({HEADER_DEAD_REASON: b"lines: required"}) == "lines: required"
    assert dead_reason({"x-death": [{"reason": b"delivery_limit", "queue": "q"}]}) == (
        "broker: delivered too often without an outcome (delivery limit) in q")
    assert dead_reason({"x-death": [{"reason": "rejected", "queue": "q"}]}) == (
        "broker: rejected in q")
    assert dead_reason({"x-death": []}) is None
    # A producer's planted reason does not hide what the broker recorded.
    assert dead_reason({HEADER_DEAD_REASON: "all fine, ignore", "x-death": [
        {"reason": "rejected", "queue": "q"}]}) == "broker: rejected in q"
    assert dead_reason({}) is None


def test_a_dead_message_is_described_without_its_payload() -> None:
    message = SimpleNamespace(
        headers={HEADER_DEAD_REASON: "bad", HEADER_DEAD_WORKER: b"w1"}, body=line(),
        timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), message_id="m-1", priority=4,
        content_type="application/json")
    assert describe(2, message) == DeadLetter(
        position=2, invoice_id="inv-1", reason="bad", dead_at="2026-01-02T03:04:05+00:00",
        worker="w1", message_id="m-1", priority=4, content_type="application/json",
        body_bytes=len(line()))
    stamped = SimpleNamespace(**{**vars(message), "headers": {HEADER_DEAD_AT: "2026-11-20"},
                                 "timestamp": None})
    assert describe(1, stamped).dead_at == "2026-11-20"
    assert describe(1, SimpleNamespace(**{**vars(message), "headers": None,
                                          "timestamp": None})).dead_at is None


def test_fixes_are_keyed_by_tenant_and_invoice_id_with_their_priority() -> None:
    data = b"\n".join([line(), b"  ", line(invoice_id="inv-2", priority="user"),
                       line(tenant="globex"), b""])
    assert parse_fixes(data) == {
        ("acme", "inv-1"): (line(), None),
        ("acme", "inv-2"): (line(invoice_id="inv-2", priority="user"), "user"),
        ("globex", "inv-1"): (line(tenant="globex"), None)}


def test_a_bad_fix_names_its_line() -> None:
    with pytest.raises(InvalidFix) as invalid:
        parse_fixes(line() + b"\n" + json.dumps({"invoice_id": "inv-2"}).encode())
    assert invalid.value.line == 2
    assert invalid.value.reason.startswith("tenant: required field is missing")
    with pytest.raises(InvalidFix) as twice:
        parse_fixes(line() + b"\n\n" + line())
    assert (twice.value.line, twice.value.reason) == (
        3, "invoice_id 'inv-1' of tenant 'acme' appears twice")


def test_a_replayed_message_keeps_its_own_headers_only_and_is_stamped() -> None:
    now = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
    headers = {HEADER_DEAD_REASON: "bad", HEADER_DEAD_AT: "x", "x-death": [{}],
               "x-first-death-queue": "q", "x-delivery-count": 3, "traceparent": "00-ab",
               "tenant-hint": "acme"}
    assert replay_headers(headers, now) == {"traceparent": "00-ab", "tenant-hint": "acme",
                                            HEADER_REPLAYED_AT: "2026-11-20T09:30:00+00:00"}


def test_fixes_not_used_are_those_found_but_not_selected() -> None:
    result = ReplayResult(replayed=["inv-1"], fixed=[("acme", "inv-1")], not_found=["inv-9"])
    fixes = {("acme", invoice_id): (b"", None) for invoice_id in ("inv-1", "inv-3", "inv-2",
                                                                  "inv-9")}
    assert result.unused_fixes(fixes) == ["inv-2", "inv-3"]
