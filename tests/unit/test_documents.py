"""UBL-TR rendering (gapless.documents), pure: every document rendered here passes GİB's own XSD
and schematron (efatura-kontrol) with zero errors and its amounts add up; the amounts equal an
independent computation from the message; rendering is deterministic across processes; a message
that cannot make a valid document is refused before any number, naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lxml import etree

from gapless.demo.samples import sample_messages, tckn
from gapless.documents import (
    PLACEHOLDER_NS,
    Issuer,
    IssuerError,
    build_issuer,
    check_ubl_inputs,
    is_gib_number,
    render_ubl_tr,
    summarize,
)
from gapless.documents.checks import MAX_AMOUNT
from gapless.message import InvalidMessage, validate_message
from tests.helpers import ROOT
from tests.ubl import NS, assert_valid, field

COMPANY = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
           "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
           "postal_zone": "34716", "email": "efatura@acme.example"}
PERSON = {"tax_id": "10000000146", "name": "Ayşe Nur Yılmaz", "tax_office": "Konak",
          "street": "Cumhuriyet Blv. 12", "district": "Konak", "city": "İzmir"}
#: A moment in the past (GİB refuses an IssueDate after today) that is still 2025 in UTC but
#: already 2026 in Istanbul.
SEALED = datetime(2025, 12, 31, 21, 30, 5, tzinfo=UTC)
UNITS = ("C62", "KGM", "LTR", "MTR", "HUR", "KWH", "SET", "DAY", "MTK", "PA")
CENT = Decimal("0.01")

ISSUERS = [build_issuer(**COMPANY), build_issuer(**PERSON)]


def base_message(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "invoice_id": "inv-1", "tenant": "acme", "series": "ABC", "issue_date": "2025-12-31",
        "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}]}
    message.update(changes)
    return message


def render(message: dict[str, Any], issuer: Issuer = ISSUERS[0], *,
           number: str = "ABC2026000000001", document_uuid: uuid.UUID | None = None) -> bytes:
    parsed = validate_message(message)
    check_ubl_inputs(parsed, issuer)
    return render_ubl_tr(parsed, number=number,
                         uuid=document_uuid or uuid.UUID("6f1c2e1a-86a5-4f0e-9a55-3a2b8c7d1e90"),
                         sealed_at=SEALED, tz="Europe/Istanbul", issuer=issuer)


# ------------------------------------------------------------------------------- strategies


@st.composite
def lines(draw: st.DrawFn, *, minimum: Decimal) -> dict[str, Any]:
    """A line whose quantity has up to 3 decimals and whose net amount is at least
    ``minimum`` (so that its VAT never rounds to 0.00 when ``minimum`` ≥ 1)."""
    quantity = Decimal(draw(st.integers(1, 500_000))) / Decimal(10) ** draw(st.integers(0, 3))
    price = Decimal(draw(st.integers(1, 10**9))) / Decimal(10) ** draw(st.integers(0, 4))
    assume(quantity * price >= minimum)
    line = {"description": draw(st.sampled_from(["Widget", "Çay (kg)", "Hizmet bedeli",
                                                 "Kablo 2 m", "Danışmanlık\nsaatlik"])),
            "quantity": format(quantity, "f"), "unit_price": format(price, "f"),
            "vat_rate": draw(st.sampled_from(["1", "10", "20"]))}
    if draw(st.booleans()):
        line["unit_code"] = draw(st.sampled_from(UNITS))
    return line


@st.composite
def customers(draw: st.DrawFn) -> dict[str, Any]:
    address: dict[str, str] = {"district": draw(st.sampled_from(["Çankaya", "Konak", "Nilüfer"])),
                               "city": draw(st.sampled_from(["Ankara", "İzmir", "Bursa"]))}
    if draw(st.booleans()):
        address["street"] = "Atatürk Cad. No:" + str(draw(st.integers(1, 300)))
    if draw(st.booleans()):
        address["postal_zone"] = str(draw(st.integers(1000, 81999))).zfill(5)
    if draw(st.booleans()):
        address["country"] = "Türkiye"
    if draw(st.booleans()):
        return {"tax_id": tckn(draw(st.randoms(use_true_random=False))), "name": "Ali Veli",
                "person": {"first_name": "Ali", "family_name": "Veli"}, "address": address}
    tax_id = draw(st.from_regex(r"[0-9]{10}", fullmatch=True))
    return {"tax_id": tax_id, "name": "Örnek Ticaret A.Ş.", "tax_office": "Büyük Mükellefler",
            "address": address}


@st.composite
def messages(draw: st.DrawFn, *, minimum: Decimal = Decimal(1)) -> dict[str, Any]:
    currency = draw(st.sampled_from(["TRY", "TRY", "USD", "EUR"]))
    drawn = draw(st.lists(lines(minimum=minimum), min_size=1, max_size=50))
    # A valid document's payable amount (net and up to 20 % VAT) has at most 15 digits before
    # the point: a larger total is refused by the checks, the property below holds for the rest.
    assume(sum(Decimal(line["quantity"]) * Decimal(line["unit_price"]) for line in drawn)
           * Decimal("1.2") < MAX_AMOUNT)
    message = base_message(customer=draw(customers()), lines=drawn, currency=currency)
    if currency != "TRY":
        message["exchange_rate"] = format(Decimal(draw(st.integers(1, 10**8))) / 10**6, "f")
    if draw(st.booleans()):
        message["profile"] = draw(st.sampled_from(["TEMELFATURA", "TICARIFATURA",
                                                   "EARSIVFATURA"]))
    if draw(st.booleans()):
        message["note"] = "Ödeme 30 gün içinde."
    return message


# ------------------------------------------------------------------------------- validity


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), issuer=st.sampled_from(ISSUERS))
def test_every_rendered_document_passes_gib_xsd_and_schematron(
        message: dict[str, Any], issuer: Issuer) -> None:
    assert_valid(render(message, issuer))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(minimum=Decimal("0.01")))
def test_a_vat_that_rounds_to_zero_is_accepted_and_carries_an_exemption_reason(
        message: dict[str, Any]) -> None:
    # Lines as small as 0.01: a 1 % VAT of them rounds to 0.00, which GİB accepts only with an
    # exemption reason (351, "not an exemption") — the check accepts, the render adds it.
    parsed = validate_message(message)
    check_ubl_inputs(parsed, ISSUERS[0])
    body = render_ubl_tr(parsed, number="ABC2026000000007", uuid=uuid.uuid4(),
                         sealed_at=SEALED, tz="Europe/Istanbul", issuer=ISSUERS[0])
    assert_valid(body)
    for subtotal in etree.fromstring(body).iterfind(".//cac:TaxSubtotal", NS):
        if Decimal(subtotal.findtext("cbc:TaxAmount", namespaces=NS) or "") == 0:
            assert subtotal.findtext("cac:TaxCategory/cbc:TaxExemptionReasonCode",
                                     namespaces=NS) == "351"


# ------------------------------------------------------------------------------- amounts


def expected_amounts(message: dict[str, Any]) -> dict[str, Any]:
    """The amounts, computed here from the message alone: net per line (half-up to the cent),
    VAT per rate from the sum of its lines' nets, totals as sums."""
    def cents(value: Decimal) -> Decimal:
        return value.quantize(CENT, rounding=ROUND_HALF_UP)

    nets = [cents(Decimal(line["quantity"]) * Decimal(line["unit_price"]))
            for line in message["lines"]]
    bases: dict[Decimal, Decimal] = {}
    for line, net in zip(message["lines"], nets, strict=True):
        rate = Decimal(line["vat_rate"])
        bases[rate] = bases.get(rate, Decimal(0)) + net
    taxes = {rate: cents(base * rate / 100) for rate, base in bases.items()}
    net_total = sum(nets, Decimal(0))
    tax_total = sum(taxes.values(), Decimal(0))
    return {"nets": nets, "bases": bases, "taxes": taxes, "net": net_total, "tax": tax_total,
            "payable": net_total + tax_total}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages())
def test_line_tax_and_payable_amounts_equal_an_independent_computation(
        message: dict[str, Any]) -> None:
    root = etree.fromstring(render(message))
    expected = expected_amounts(message)
    lines_in_xml = root.findall("cac:InvoiceLine", NS)
    assert [Decimal(line.findtext("cbc:LineExtensionAmount", namespaces=NS) or "")
            for line in lines_in_xml] == expected["nets"]
    subtotals = {Decimal(sub.findtext("cbc:Percent", namespaces=NS) or ""):
                 (Decimal(sub.findtext("cbc:TaxableAmount", namespaces=NS) or ""),
                  Decimal(sub.findtext("cbc:TaxAmount", namespaces=NS) or ""))
                 for sub in root.findall("cac:TaxTotal/cac:TaxSubtotal", NS)}
    assert subtotals == {rate: (expected["bases"][rate], expected["taxes"][rate])
                         for rate in expected["bases"]}
    total = "cac:LegalMonetaryTotal/cbc:"
    assert Decimal(root.findtext(total + "LineExtensionAmount", namespaces=NS) or "") == (
        expected["net"])
    assert Decimal(root.findtext("cac:TaxTotal/cbc:TaxAmount", namespaces=NS) or "") == (
        expected["tax"])
    assert Decimal(root.findtext(total + "PayableAmount", namespaces=NS) or "") == (
        expected["payable"])
    currencies = {element.get("currencyID") for element in root.iter()
                  if element.get("currencyID") is not None}
    assert currencies == {message["currency"]}


def test_a_known_invoice_adds_up_to_the_cent() -> None:
    message = base_message(lines=[
        {"description": "A", "quantity": "3", "unit_price": "3.335", "vat_rate": "20"},
        {"description": "B", "quantity": "1.5", "unit_price": "0.99", "vat_rate": "20"},
        {"description": "C", "quantity": "7", "unit_price": "12.50", "vat_rate": "1"}])
    body = render(message)
    assert_valid(body)
    # 3 × 3.335 = 10.005 → 10.01; 1.5 × 0.99 = 1.485 → 1.49; 7 × 12.50 = 87.50
    # VAT 20 % of 11.50 = 2.30; 1 % of 87.50 = 0.875 → 0.88; payable 99.00 + 3.18 = 102.18
    assert field(body, "cac:LegalMonetaryTotal/cbc:LineExtensionAmount") == "99.00"
    assert field(body, "cac:TaxTotal/cbc:TaxAmount") == "3.18"
    assert field(body, "cac:LegalMonetaryTotal/cbc:PayableAmount") == "102.18"


# ------------------------------------------------------------------------------- identity


def test_number_uuid_and_the_seal_moment_in_the_series_time_zone() -> None:
    document_uuid = uuid.UUID("0d9d3c36-2f5f-4b93-9d1b-6a0c8f4b2a11")
    body = render(base_message(), number="ABC2026000000042", document_uuid=document_uuid)
    assert_valid(body)
    assert field(body, "cbc:ID") == "ABC2026000000042"
    assert field(body, "cbc:UUID") == str(document_uuid)
    # 2025-12-31T21:30:05Z is 2026-01-01 00:30:05 in Istanbul: the number's year, the date.
    assert (field(body, "cbc:IssueDate"), field(body, "cbc:IssueTime")) == (
        "2026-01-01", "00:30:05")
    assert etree.fromstring(body).find(f".//{{{PLACEHOLDER_NS}}}Unsigned") is not None
    assert summarize(body)["number"] == "ABC2026000000042"


def test_a_person_issuer_and_customer_are_named_as_persons() -> None:
    customer = {"tax_id": "10000000146", "name": "Ali Veli",
                "person": {"first_name": "Ali", "family_name": "Veli"},
                "address": {"district": "Konak", "city": "İzmir"}}
    body = render(base_message(customer=customer), ISSUERS[1])
    assert_valid(body)
    root = etree.fromstring(body)
    supplier = "cac:AccountingSupplierParty/cac:Party/"
    assert root.findtext(supplier + "cac:Person/cbc:FirstName", namespaces=NS) == "Ayşe Nur"
    assert root.findtext(supplier + "cac:Person/cbc:FamilyName", namespaces=NS) == "Yılmaz"
    assert root.find(supplier + "cac:PartyIdentification/cbc:ID", NS).get("schemeID") == "TCKN"
    assert summarize(body)["customer"] == "Ali Veli"


def test_rendering_is_byte_for_byte_the_same_in_another_process() -> None:
    message = base_message(currency="EUR", exchange_rate="37.1234", note="Teşekkürler",
                           lines=[{"description": f"Kalem {n}", "quantity": "1.25",
                                   "unit_price": "19.99", "vat_rate": "10",
                                   "unit_code": "KGM"} for n in range(5)])
    here = render(message)
    assert render(message) == here
    script = (
        "import json, sys, uuid\n"
        "from datetime import datetime\n"
        "from gapless.documents import build_issuer, render_ubl_tr\n"
        "from gapless.message import validate_message\n"
        "args = json.loads(sys.stdin.read())\n"
        "body = render_ubl_tr(validate_message(args['message']), number='ABC2026000000001',\n"
        "    uuid=uuid.UUID(args['uuid']), sealed_at=datetime.fromisoformat(args['at']),\n"
        "    tz='Europe/Istanbul', issuer=build_issuer(**args['issuer']))\n"
        "sys.stdout.buffer.write(body)\n")
    there = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, check=True, capture_output=True,
        input=json.dumps({"message": message, "uuid": "6f1c2e1a-86a5-4f0e-9a55-3a2b8c7d1e90",
                          "at": SEALED.isoformat(), "issuer": COMPANY}).encode()).stdout
    assert there == here


# ------------------------------------------------------------------------------- refusals


def without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("no address", base_message(customer=without(base_message()["customer"], "address")),
     "customer.address: required"),
    ("no city", base_message(customer={**base_message()["customer"],
                                       "address": {"district": "Çankaya"}}),
     "customer.address.city: required"),
    ("no district", base_message(customer={**base_message()["customer"],
                                           "address": {"city": "Ankara"}}),
     "customer.address.district: required"),
    ("company without tax office",
     base_message(customer=without(base_message()["customer"], "tax_office")),
     "customer.tax_office: required"),
    ("TCKN without a person", base_message(customer={
        **base_message()["customer"], "tax_id": "10000000146"}), "customer.person: "),
    ("TCKN with wrong check digits", base_message(customer={
        **base_message()["customer"], "tax_id": "10000000147",
        "person": {"first_name": "A", "family_name": "B"}}), "customer.tax_id: "),
    ("unknown unit code", base_message(lines=[{**base_message()["lines"][0],
                                               "unit_code": "QQQ"}]), "lines.0.unit_code: "),
    ("VAT rate 18 (gone since 2023)",
     base_message(lines=[{**base_message()["lines"][0], "vat_rate": "18"}]),
     "lines.0.vat_rate: "),
    ("unknown currency", base_message(currency="ABC", exchange_rate="2"), "currency: "),
    ("foreign currency without a rate", base_message(currency="USD"), "exchange_rate: "),
    ("a rate for TRY", base_message(exchange_rate="1"), "exchange_rate: "),
    # Huge but valid amounts: the largest quantity times the largest price has 41 digits,
    # more than Python's default decimal context holds (it used to raise InvalidOperation).
    ("largest quantity times largest price",
     base_message(lines=[{**base_message()["lines"][0], "quantity": "999999999999.999999",
                          "unit_price": "999999999999999.99999999"}]),
     "lines.0: the line amount has more than 15 digits"),
    ("a 27-digit line amount",
     base_message(lines=[{**base_message()["lines"][0], "quantity": "999999999999",
                          "unit_price": "999999999999999"}]),
     "lines.0: the line amount has more than 15 digits"),
    ("a total past 15 digits over many lines",
     base_message(lines=[{**base_message()["lines"][0], "quantity": "1",
                          "unit_price": "999999999999999"}] * 1000),
     "lines: the payable amount has more than 15 digits"),
]


@pytest.mark.parametrize(("name", "message", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_message_that_cannot_make_its_document_is_refused_naming_the_field(
        name: str, message: dict[str, Any], reason: str) -> None:
    parsed = validate_message(message)
    with pytest.raises(InvalidMessage) as refused:
        check_ubl_inputs(parsed, ISSUERS[0])
    assert refused.value.reason.startswith(reason), refused.value.reason
    assert message["customer"]["tax_id"] not in refused.value.reason
    assert "\n" not in refused.value.reason


@given(quantity=st.integers(1, 10**18 - 1), quantity_scale=st.integers(0, 6),
       price=st.integers(0, 10**23 - 1), price_scale=st.integers(0, 8))
@settings(max_examples=200, deadline=None)
def test_a_line_amount_is_exact_or_refused_never_an_arithmetic_error(
        quantity: int, quantity_scale: int, price: int, price_scale: int) -> None:
    """Any quantity and price the message allows: the line's gross is the exact product
    rounded half-up to the cent (integer arithmetic as the oracle), or a refusal naming the
    line when it or the payable has more than 15 digits — never a decimal exception."""
    q_text = str(Decimal(quantity).scaleb(-quantity_scale))
    p_text = str(Decimal(price).scaleb(-price_scale))
    assume("E" not in q_text and "E" not in p_text)
    assume(len(q_text.partition(".")[0]) <= 12 and len(p_text.partition(".")[0]) <= 15)
    message = base_message(lines=[{**base_message()["lines"][0], "quantity": q_text,
                                   "unit_price": p_text}])
    scale = quantity_scale + price_scale
    exact_cents, remainder = divmod(quantity * price * 100, 10**scale)
    cents = exact_cents + (1 if 2 * remainder >= 10**scale else 0)
    try:
        check_ubl_inputs(validate_message(message), ISSUERS[0])
    except InvalidMessage as refused:
        reason = refused.reason
    else:
        reason = None
    if reason is not None:
        # Only for an amount past 15 digits: the line's, or with its 20 % VAT the payable.
        assert cents * 6 >= 5 * 10**17 - 3, reason
        assert reason.startswith("lines"), reason
        return
    assert Decimal(field(render(message), "cac:InvoiceLine/cbc:LineExtensionAmount")) == \
        Decimal(cents) / 100


@pytest.mark.parametrize("seed", range(5))
def test_the_demo_and_bench_samples_all_make_valid_documents(seed: int) -> None:
    # gapless demo and the benchmarks publish these: none may be refused before its number.
    messages = list(sample_messages(40, tenant="acme", series="ABC", priority="batch",
                                    reject_every=10, seed=seed))
    for message in messages:
        check_ubl_inputs(validate_message(message), ISSUERS[0])
    assert_valid(render(messages[seed]))


def test_the_forced_rejection_tax_id_passes_the_check() -> None:
    # The integrator is the authority on registration: 0000000000 must reach it (and is
    # rejected there, the contract's forced rejection).
    message = base_message(customer={**base_message()["customer"], "tax_id": "0000000000"})
    assert_valid(render(message))


@pytest.mark.parametrize(("fields", "flag"), [
    ({"tax_id": "12345"}, "--tax-id"),
    ({"tax_id": "10000000147"}, "--tax-id"),
    ({"name": "  "}, "--name"),
    ({"tax_id": "10000000146", "name": "Madonna"}, "--name"),
    ({"city": ""}, "--city"),
    ({"email": "not-an-address"}, "--email"),
    ({"tax_office": "x" * 300}, "--tax-office"),
])
def test_an_unusable_issuer_profile_is_refused_naming_the_flag(fields: dict[str, str],
                                                                 flag: str) -> None:
    with pytest.raises(IssuerError) as refused:
        build_issuer(**{**COMPANY, **fields})
    assert str(refused.value).startswith(f"{flag}: ")
    assert "12345" not in str(refused.value) or flag != "--tax-id"


@pytest.mark.parametrize(("number", "valid"), [
    ("ABC2026000000001", True), ("A1B2099123456789", True), ("ABC2026000001", False),
    ("abc2026000000001", False), ("ABCD026000000001", False), ("ABC1999000000001", False)])
def test_gib_numbers(number: str, valid: bool) -> None:
    assert is_gib_number(number) is valid
