"""A fresh draft's payload is made only when read: the worker's UBL-TR documents are made from
the message, so the dict (``Message.payload()``) is never built for them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gapless.ledger.invoices import Draft, Sending
from gapless.message import jsontext


class Counted:
    """A payload maker that counts its calls."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return self.payload


def sending(contents: Any) -> Sending:
    return Sending(pk=1, invoice_id="inv-1", tenant="acme", series="ABC",
                   number="ABC2026000000001", reserved_no=1, contents=contents, attempt=1,
                   uuid="6f1c2e1a-86a5-4f0e-9a55-3a2b8c7d1e90",
                   sealed_at=datetime(2026, 11, 28, tzinfo=UTC), profile_version=None)


def test_a_payload_maker_runs_once_and_only_when_the_payload_is_read() -> None:
    maker = Counted({"invoice_id": "inv-1", "lines": [{"quantity": "1"}]})
    lease = sending(maker)
    assert maker.calls == 0
    assert lease.payload == maker.payload
    assert lease.payload is lease.payload
    assert maker.calls == 1


def test_a_stored_payload_is_the_dict_itself() -> None:
    stored = {"invoice_id": "inv-1"}
    assert sending(stored).payload is stored


def test_a_drafts_text_is_written_from_its_maker_only_when_it_has_none() -> None:
    maker = Counted({"invoice_id": "inv-1", "note": "ç"})
    assert Draft("inv-1", "acme", "ABC", 1, maker, '{"given": 1}').payload_text == '{"given": 1}'
    assert maker.calls == 0
    text = Draft("inv-1", "acme", "ABC", 1, maker).payload_text
    assert jsontext.loads(text, max_depth=8) == maker.payload
    assert maker.calls == 1
