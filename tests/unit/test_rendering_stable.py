"""The same inputs render the same bytes in every version of gapless that writes the same
format (``FORMAT``, ``DESPATCH_FORMAT``): a document is hashed into the chain and stored, and an
auditor re-rendering it, or a rewrite of the renderer, must find the very same bytes.

``tests/fixtures/rendered_messages.jsonl`` holds 133 messages of every kind (invoices of every
type and profile, dispatch notes of every profile; hostile texts among them), rendered here for
three issuers (a company, a person, one whose texts need escaping); the digest of all their
documents is recorded below for the format it was made with. A change to the renderer that
changes any byte must bump the format and record the new digest.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from gapless.documents import (
    DESPATCH_FORMAT,
    FORMAT,
    build_issuer,
    check_despatch_inputs,
    check_ubl_inputs,
    render_despatch,
    render_ubl_tr,
)
from gapless.message import DespatchMessage, InvoiceMessage, validate_message

MESSAGES = Path(__file__).resolve().parent.parent / "fixtures" / "rendered_messages.jsonl"
#: The digest of every document of the fixture, by the formats that wrote them.
RECORDED = {("ubl-tr-2.1/4", "ubl-tr-2.1-despatch/1"):
            "7ed019431e8c5fbc73f2dec7bf375c919007edd156ea9cc13c1ac2c03b6f9635"}

ISSUERS = (
    build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                 street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                 postal_zone="34716", email="efatura@acme.example"),
    build_issuer(tax_id="10000000146", name="Ayşe Nur Yılmaz", tax_office="Konak",
                 street="Cumhuriyet Blv. 12", district="Konak", city="İzmir"),
    build_issuer(tax_id="1234567890", name='Ada & "Bros" <Ltd>', tax_office="Kadıköy",
                 street="Rıhtım Cad.\tNo: 1 > 0", district="Kadıköy", city="İstanbul",
                 postal_zone="34716", email="a&b@example.com"),
)
SEALS = (datetime(2026, 11, 26, 12, tzinfo=UTC), datetime(2025, 12, 31, 21, 30, 5, tzinfo=UTC))


def documents() -> list[bytes]:
    bodies = []
    for line in MESSAGES.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        for index, issuer in enumerate(ISSUERS):
            message = validate_message(item["message"])
            sealed = {"number": "ABC2026000000001", "uuid": uuid.UUID(int=7 + index),
                      "sealed_at": SEALS[index % 2], "tz": "Europe/Istanbul", "issuer": issuer}
            if item["document"] == "note":
                assert isinstance(message, DespatchMessage)
                check_despatch_inputs(message, issuer)
                bodies.append(render_despatch(message, **sealed))
            else:
                assert isinstance(message, InvoiceMessage)
                check_ubl_inputs(message, issuer)
                bodies.append(render_ubl_tr(message, **sealed))
    return bodies


def test_the_fixture_renders_the_recorded_bytes() -> None:
    bodies = documents()
    assert len(bodies) == 133 * len(ISSUERS)
    digest = hashlib.sha256(b"".join(hashlib.sha256(body).digest() for body in bodies))
    recorded = RECORDED.get((FORMAT, DESPATCH_FORMAT))
    assert recorded is not None, (
        f"no digest recorded for {FORMAT} and {DESPATCH_FORMAT}: record {digest.hexdigest()}")
    assert digest.hexdigest() == recorded, (
        "the documents' bytes changed without a new FORMAT or DESPATCH_FORMAT: bump the one "
        "whose bytes changed and record the digest of the new format")
