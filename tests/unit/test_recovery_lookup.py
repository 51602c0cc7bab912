"""Recovery asks whether an orphan's document arrived by its number where the adapter can look
numbers up, else by its UUID (Nilvera): a lost send is repaired either way, and a document held
under another number is an alarm. The question alone, against a scripted guard (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gapless.integrator.base import UNKNOWN, Document, Receipt
from gapless.issuing.outcome import Said
from gapless.ledger.invoices import Sending
from gapless.recovery.reconcile import _ask_then_send

SENDING = Sending(pk=1, invoice_id="inv-1", tenant="acme", series="ABC",
                  number="ABC2026000000007", reserved_no=7, contents={}, attempt=2,
                  uuid="6f1c2e1a-86a5-4f0e-9a55-3a2b8c7d1e90",
                  sealed_at=datetime(2026, 11, 25, tzinfo=UTC), profile_version=None)
DOCUMENT = Document.of(tenant="acme", number=SENDING.number, invoice_id="inv-1",
                       uuid=SENDING.uuid, body=b"{}", media_type="application/json",
                       format="json/1")


class ScriptedGuard:
    """Answers lookups from a script and records what was asked."""

    def __init__(self, *, by_number: bool, found: Receipt | None) -> None:
        self.looks_up_numbers = by_number
        self.found = found
        self.asked: list[tuple[str, str]] = []

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        self.asked.append(("number", number))
        return self.found

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        self.asked.append(("uuid", uuid))
        return self.found

    async def send(self, document: Document) -> Receipt:
        self.asked.append(("send", document.number))
        return Receipt(document.tenant, document.number, document.invoice_id, "REF-NEW",
                       document.uuid)


@pytest.mark.parametrize(("by_number", "found", "said", "asked"), [
    (True, None, Said.ACCEPTED, [("number", SENDING.number), ("send", SENDING.number)]),
    (True, Receipt("acme", SENDING.number, "inv-1", "REF"), Said.FOUND,
     [("number", SENDING.number)]),
    (True, Receipt("acme", SENDING.number, "someone-else", "REF"), Said.DUPLICATE_OF_ANOTHER,
     [("number", SENDING.number)]),
    (False, None, Said.ACCEPTED, [("uuid", SENDING.uuid), ("send", SENDING.number)]),
    (False, Receipt("acme", UNKNOWN, UNKNOWN, "REF", SENDING.uuid), Said.FOUND,
     [("uuid", SENDING.uuid)]),
    (False, Receipt("acme", SENDING.number, UNKNOWN, "REF", SENDING.uuid), Said.FOUND,
     [("uuid", SENDING.uuid)]),
    (False, Receipt("acme", "ABC2026000000099", UNKNOWN, "REF", SENDING.uuid),
     Said.DUPLICATE_OF_ANOTHER, [("uuid", SENDING.uuid)]),
])
async def test_recovery_asks_by_number_or_by_uuid(by_number: bool, found: Receipt | None,
                                                  said: Said,
                                                  asked: list[tuple[str, str]]) -> None:
    guard: Any = ScriptedGuard(by_number=by_number, found=found)
    answer = await _ask_then_send(guard, SENDING, DOCUMENT)
    assert answer.said is said
    assert guard.asked == asked
    if said is Said.FOUND:
        assert answer.receipt is not None
        assert (answer.receipt.number, answer.receipt.invoice_id) == (SENDING.number, "inv-1")
    if said is Said.DUPLICATE_OF_ANOTHER and not by_number:
        assert answer.duplicate is not None
        assert answer.duplicate.holder_number == "ABC2026000000099"
