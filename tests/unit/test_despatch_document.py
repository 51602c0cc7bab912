"""The dispatch note's document (UBL-TR 2.1 DespatchAdvice), pure: every combination the contract
allows — SEVK and MATBUDAN; drivers with a plate (and trailers) or a carrier, or both; lines with
or without prices; with or without an order; TEMELIRSALIYE, HKSIRSALIYE and IDISIRSALIYE; company
or person customers and issuers — passes GİB's DespatchAdvice XSD and the schematron's
`despatchadvice` pattern (efatura-kontrol) with zero errors; what needs the issuer profile is
refused before the seal, naming the field; rendering is deterministic and dated by the seal."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gapless.demo.samples import tckn
from gapless.documents import (
    build_issuer,
    check_despatch_inputs,
    check_inputs,
    check_ubl_inputs,
    render_despatch,
    render_ubl_tr,
    summarize,
)
from gapless.documents import render as render_document
from gapless.message import DespatchMessage, InvalidMessage, InvoiceMessage, validate_message
from tests.ubl import NS, assert_valid_despatch, field, parse_ubl

COMPANY = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                       street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                       postal_zone="34716", email="irsaliye@acme.example")
PERSON = build_issuer(tax_id="10000000146", name="Ayşe Nur Yılmaz", tax_office="Konak",
                      street="Cumhuriyet Blv. 12", district="Konak", city="İzmir")
#: In the past (GİB refuses a date after today); still 2025 in UTC, already 2026 in Istanbul.
SEALED = datetime(2025, 12, 31, 21, 30, 5, tzinfo=UTC)
NUMBER = "IRS2026000000001"
UNITS = ("C62", "KGM", "LTR", "MTR", "SET", "PA")

_names = st.text(alphabet="abcçdefgğhıijklmnoöprsştuüvyzABCÇDEFGĞHIİJKLMNOÖPRSŞTUÜVYZ&<>'\" ",
                 min_size=1, max_size=30).filter(str.strip)
_decimals = st.decimals(min_value="0.001", max_value="99999", places=3).map(str)
_prices = st.decimals(min_value="0", max_value="9999", places=2).map(str)
_plates = st.from_regex(r"(0[1-9]|[1-7][0-9]|8[01])[A-Z]{1,3}[0-9]{1,4}", fullmatch=True)
_foreign = st.from_regex(r"[A-Z0-9_-]{1,12}", fullmatch=True)
_postal = st.from_regex(r"(0[1-9]|[1-7][0-9]|8[01])[0-9]{3}", fullmatch=True)


@st.composite
def addresses(draw: st.DrawFn, *, postal: bool) -> dict[str, Any]:
    address: dict[str, Any] = {"district": draw(_names), "city": draw(_names)}
    if draw(st.booleans()):
        address["street"] = draw(_names)
    if draw(st.booleans()):
        address["country"] = "Türkiye"
    if postal:
        address["postal_zone"] = draw(_postal)
    return address


@st.composite
def customers(draw: st.DrawFn) -> dict[str, Any]:
    address = draw(addresses(postal=draw(st.booleans())))
    if draw(st.booleans()):
        return {"tax_id": "9876543210", "name": draw(_names), "tax_office": draw(_names),
                "address": address}
    return {"tax_id": tckn(random.Random(draw(st.integers(0, 10**6)))), "name": draw(_names),
            "person": {"first_name": draw(_names), "family_name": draw(_names)},
            "address": address}


@st.composite
def notes(draw: st.DrawFn) -> dict[str, Any]:
    """A dispatch note of any combination the contract allows."""
    rng = random.Random(draw(st.integers(0, 10**6)))
    profile = draw(st.sampled_from([None, "TEMELIRSALIYE", "HKSIRSALIYE", "IDISIRSALIYE"]))
    kind = draw(st.sampled_from([None, "SEVK", "MATBUDAN"]))
    despatch: dict[str, Any] = {
        "despatch_date": "2025-12-31",
        "despatch_time": draw(st.times()).strftime("%H:%M:%S"),
        "delivery_address": draw(addresses(postal=True))}
    if profile is not None:
        despatch["profile"] = profile
    if kind is not None:
        despatch["type"] = kind
    if kind == "MATBUDAN":
        despatch["printed"] = {"number": draw(st.from_regex(r"[A-Z0-9]{16}", fullmatch=True)),
                               "issue_date": "2025-12-30"}
    carriage = draw(st.sampled_from(["drivers", "carrier", "both"]))
    foreign = draw(st.booleans())
    if carriage in ("drivers", "both"):
        despatch["drivers"] = [
            {"first_name": draw(_names), "family_name": draw(_names), "tckn": tckn(rng)}
            for _ in range(draw(st.integers(1, 3)))]
    if carriage in ("drivers", "both") or draw(st.booleans()):
        plates = _foreign if foreign else _plates
        if foreign:
            despatch["plate_scheme"] = "YABANCIPLAKA"
        elif draw(st.booleans()):
            despatch["plate_scheme"] = "PLAKA"
        despatch["license_plate"] = draw(plates)
        if draw(st.booleans()):
            despatch["trailer_plates"] = draw(st.lists(plates, min_size=1, max_size=2))
    if carriage in ("carrier", "both"):
        despatch["carrier"] = {"tax_id": draw(st.sampled_from(["9876543210", tckn(rng)])),
                               "name": draw(_names)}
        if draw(st.booleans()):
            despatch["carrier"]["address"] = draw(addresses(postal=False))
    if draw(st.booleans()):
        despatch["order"] = {"number": "PO-2025/77", "issue_date": "2025-12-29"}
    if profile == "IDISIRSALIYE":
        despatch["sevkiyat_no"] = draw(st.from_regex(r"(SE|ES)-[0-9]{7}", fullmatch=True))
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        line: dict[str, Any] = {"description": draw(_names), "quantity": draw(_decimals)}
        if draw(st.booleans()):
            line["unit_code"] = draw(st.sampled_from(UNITS))
        if draw(st.booleans()):
            line["unit_price"] = draw(_prices)
        if profile == "HKSIRSALIYE":
            line["kunye_no"] = draw(st.from_regex(r"[0-9]{19}", fullmatch=True))
        if profile == "IDISIRSALIYE":
            line["etiket_no"] = draw(st.from_regex(r"[A-Z]{2}[0-9]{7}", fullmatch=True))
        lines.append(line)
    message: dict[str, Any] = {
        "document": "despatch", "invoice_id": "wh-1", "tenant": "acme",
        "issue_date": "2025-12-31", "customer": draw(customers()), "despatch": despatch,
        "lines": lines}
    if draw(st.booleans()):
        message["note"] = draw(_names)
    if draw(st.booleans()):
        message["currency"] = draw(st.sampled_from(["TRY", "EUR"]))
    return message


def render(data: dict[str, Any], issuer: Any = COMPANY) -> bytes:
    message = validate_message(data)
    assert isinstance(message, DespatchMessage)
    check_despatch_inputs(message, issuer)
    return render_despatch(message, number=NUMBER, uuid=uuid.UUID(int=7), sealed_at=SEALED,
                           tz="Europe/Istanbul", issuer=issuer)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=notes(), issuer=st.sampled_from([COMPANY, PERSON]))
def test_every_combination_passes_gib_s_xsd_and_schematron(data: dict[str, Any],
                                                           issuer: Any) -> None:
    document = render(data, issuer)
    assert_valid_despatch(document)
    despatch = data["despatch"]
    assert field(document, "cbc:ProfileID") == despatch.get("profile", "TEMELIRSALIYE")
    assert field(document, "cbc:DespatchAdviceTypeCode") == despatch.get("type", "SEVK")
    root = parse_ubl(document)
    assert len(root.findall("cac:DespatchLine", NS)) == len(data["lines"])
    assert len(root.findall("cac:Shipment/cac:ShipmentStage/cac:DriverPerson", NS)) == \
        len(despatch.get("drivers", ()))
    assert (root.find("cac:Shipment/cac:Delivery/cac:CarrierParty", NS) is not None) == \
        ("carrier" in despatch)
    assert len(root.findall(
        "cac:Shipment/cac:TransportHandlingUnit/cac:TransportEquipment/cbc:ID", NS)) == \
        len(despatch.get("trailer_plates", ()))
    priced = [line for line in data["lines"] if "unit_price" in line]
    assert len(root.findall("cac:DespatchLine/cac:Shipment/cac:GoodsItem/cac:InvoiceLine",
                            NS)) == len(priced)


SEVK: dict[str, Any] = {
    "document": "despatch", "invoice_id": "wh-7-000123", "tenant": "acme",
    "issue_date": "2025-12-31",
    "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Kadıköy",
                 "address": {"district": "Kadıköy", "city": "İstanbul"}},
    "despatch": {"despatch_date": "2025-12-31", "despatch_time": "10:00:00",
                 "delivery_address": {"district": "Tuzla", "city": "İstanbul",
                                      "postal_zone": "34940"},
                 "drivers": [{"first_name": "Ali", "family_name": "Yılmaz",
                              "tckn": "10000000078"}],
                 "license_plate": "34ABC123"},
    "lines": [{"description": "Widget", "quantity": "12"}]}


def test_the_note_is_dated_by_its_seal_in_the_series_time_zone() -> None:
    document = render(SEVK)
    assert field(document, "cbc:IssueDate") == "2026-01-01"
    assert field(document, "cbc:IssueTime") == "00:30:05"
    assert field(document, "cbc:ID") == NUMBER
    assert field(document, "cbc:UUID") == str(uuid.UUID(int=7))
    assert field(document, "cac:Shipment/cac:Delivery/cac:Despatch/cbc:ActualDespatchTime") == \
        "10:00:00"
    assert field(document, "cac:DeliveryCustomerParty/cac:Party/cac:PartyName/cbc:Name") == \
        "Example Ltd"
    assert field(document, "cac:DespatchSupplierParty/cac:Party/cac:PartyName/cbc:Name") == \
        COMPANY.name
    message = validate_message(SEVK)
    assert isinstance(message, DespatchMessage)
    with pytest.raises(ValueError, match="timezone-aware"):
        render_despatch(message, number=NUMBER, uuid=uuid.uuid4(),
                        sealed_at=SEALED.replace(tzinfo=None), tz="UTC", issuer=COMPANY)


def test_rendering_is_deterministic() -> None:
    assert render(SEVK) == render(SEVK)


def test_the_parties_are_the_invoice_s() -> None:
    """The supplier and customer parties of a note are an invoice's, under the note's tags."""
    invoice = validate_message({
        "invoice_id": "inv-1", "tenant": "acme", "issue_date": "2025-12-31", "currency": "TRY",
        "customer": SEVK["customer"],
        "lines": [{"description": "Widget", "quantity": "1", "unit_price": "1",
                   "vat_rate": "20"}]})
    assert isinstance(invoice, InvoiceMessage)
    invoice_xml = render_ubl_tr(invoice, number="ABC2026000000001",
                                uuid=uuid.UUID(int=1), sealed_at=SEALED, tz="Europe/Istanbul",
                                issuer=COMPANY).decode()
    note_xml = render(SEVK).decode()

    def part(text: str, tag: str) -> str:
        start = text.index(f"<cac:{tag}>")
        end = text.index(f"</cac:{tag}>") + len(f"</cac:{tag}>")
        return text[start:end].replace(tag, "TAG")

    assert part(invoice_xml, "AccountingSupplierParty") == \
        part(note_xml, "DespatchSupplierParty")
    assert part(invoice_xml, "AccountingCustomerParty") == \
        part(note_xml, "DeliveryCustomerParty")
    assert part(invoice_xml, "Signature") == part(note_xml, "Signature")


def _refusal(data: dict[str, Any]) -> str:
    message = validate_message(data)
    assert isinstance(message, DespatchMessage)
    with pytest.raises(InvalidMessage) as caught:
        check_despatch_inputs(message, COMPANY)
    return caught.value.reason


def _with(**customer: Any) -> dict[str, Any]:
    return {**SEVK, "customer": customer}


@pytest.mark.parametrize(("data", "expected"), [
    (_with(tax_id="9876543210", name="Example Ltd", address={"district": "A", "city": "B"}),
     "customer.tax_office: required for a company (10-digit VKN) customer in a UBL-TR "
     "document"),
    (_with(tax_id="9876543210", name="Example Ltd", tax_office="Kadıköy"),
     "customer.address: required for a UBL-TR document (at least district and city)"),
    (_with(tax_id="10000000078", name="Ali Yılmaz", address={"district": "A", "city": "B"}),
     "customer.person: first_name and family_name are required for an 11-digit TCKN customer "
     "in a UBL-TR document"),
    (_with(tax_id="10000000079", name="Ali Yılmaz", address={"district": "A", "city": "B"},
           person={"first_name": "Ali", "family_name": "Yılmaz"}),
     "customer.tax_id: an 11-digit TCKN whose check digits do not match"),
    ({**SEVK, "lines": [{"description": "Widget", "quantity": "1", "unit_code": "ZZZ"}]},
     "lines.0.unit_code: not a unit code GİB accepts (UN/ECE Rec. 20)"),
    ({**SEVK, "currency": "XYZ", "lines": [{"description": "Widget", "quantity": "1",
                                            "unit_price": "1"}]},
     "currency: not a currency GİB accepts (ISO 4217)"),
    ({**SEVK, "lines": [{"description": "Widget", "quantity": "999999999999",
                         "unit_price": "999999999"}]},
     "lines.0: the line amount has more than 15 digits before the point"),
    ({**SEVK, "despatch": {**SEVK["despatch"], "carrier": {
        "tax_id": "9876543210", "name": "Kargo", "address": {"city": "İstanbul"}}}},
     "despatch.carrier.address.district: required for a UBL-TR document (or leave the "
     "carrier's address out)"),
], ids=["no tax office", "no address", "no person", "tckn check digits", "unit code",
        "currency", "amount", "carrier address"])
def test_what_needs_the_issuer_is_refused_before_the_seal(data: dict[str, Any],
                                                          expected: str) -> None:
    assert _refusal(data) == expected


def test_a_note_is_summarized_for_people() -> None:
    summary = summarize(render(SEVK))
    assert summary == {
        "number": NUMBER, "uuid": str(uuid.UUID(int=7)), "issued": "2026-01-01 00:30:05",
        "profile": "TEMELIRSALIYE", "type": "SEVK", "supplier": COMPANY.name,
        "customer": "Example Ltd", "despatched": "2025-12-31 10:00:00", "plate": "34ABC123",
        "drivers": "1", "carrier": None, "lines": "1"}


def test_either_document_is_checked_and_rendered_by_its_message() -> None:
    note = validate_message(SEVK)
    check_inputs(note, COMPANY)
    assert render_document(note, number=NUMBER, uuid=uuid.UUID(int=7), sealed_at=SEALED,
                           tz="Europe/Istanbul", issuer=COMPANY) == render(SEVK)
    invoice = validate_message({
        "invoice_id": "inv-1", "tenant": "acme", "issue_date": "2025-12-31", "currency": "TRY",
        "customer": SEVK["customer"],
        "lines": [{"description": "Widget", "quantity": "1", "unit_price": "1",
                   "vat_rate": "20"}]})
    check_inputs(invoice, COMPANY)
    document = render_document(invoice, number="ABC2026000000001", uuid=uuid.UUID(int=1),
                               sealed_at=SEALED, tz="Europe/Istanbul", issuer=COMPANY)
    assert parse_ubl(document).tag.endswith("}Invoice")
    with pytest.raises(InvalidMessage, match=r"^customer\.tax_office: "):
        check_inputs(validate_message(_with(tax_id="9876543210", name="X",
                                            address={"district": "A", "city": "B"})), COMPANY)


def test_the_invoice_s_check_refuses_a_note_naming_the_field() -> None:
    """A caller that takes every message for an invoice dead-letters a note (the field named)
    instead of failing on a field the note has not."""
    with pytest.raises(InvalidMessage) as caught:
        check_ubl_inputs(validate_message(SEVK), COMPANY)  # type: ignore[arg-type]
    assert caught.value.reason == ("document: a dispatch note is not an invoice: it is checked "
                                   "and rendered as its own document")
