"""Every document kind of the contract ("Document kinds"): hypothesis-generated invoices of every
type and profile (1–30 lines, mixed VAT rates including 0, discounts, withholding codes across
GİB's list, VKN and TCKN buyers, TRY and foreign currencies, dispatch notes billed, e-Arşiv
invoices that travel with the goods) pass GİB's XSD and schematron, and
their amounts equal a computation written here from the message alone (no gapless code); each
refusal of a kind's rules names the field before any number is used."""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from gapless.demo.samples import tckn
from gapless.documents import build_issuer, check_ubl_inputs, render_ubl_tr, summarize
from gapless.message import InvalidMessage, validate_message
from tests.ubl import NS, assert_valid, field

ISSUER = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                      postal_zone="34716")
SEALED = datetime(2025, 12, 31, 9, 30, tzinfo=UTC)
TODAY = "2025-12-31"
CENT = Decimal("0.01")

#: GİB's withholding codes and the share of the VAT each withholds (percent), written here from
#: GİB's list independently of gapless's data file.
WITHHOLDING = {
    "601": 40, "602": 90, "603": 70, "604": 50, "605": 50, "606": 90, "607": 90, "608": 90,
    "609": 70, "610": 90, "611": 90, "612": 90, "613": 90, "614": 50, "615": 70, "616": 50,
    "617": 70, "618": 70, "619": 70, "620": 70, "621": 90, "622": 90, "623": 50, "624": 20,
    "625": 30, "626": 20, "627": 50, **{str(code): 100 for code in range(801, 826)}}
EXEMPT = {"ISTISNA": ["301", "302", "303", "304", "311", "317", "325", "350"],
          "IHRACKAYITLI": ["701", "703", "704"], "OZELMATRAH": [str(c) for c in range(801, 813)]}
#: Types a document under each profile may carry (GİB's rules, as the contract reads them).
PROFILE_TYPES = {
    "TEMELFATURA": ["SATIS", "IADE", "TEVKIFAT", "TEVKIFATIADE", "ISTISNA", "IHRACKAYITLI",
                    "OZELMATRAH"],
    "TICARIFATURA": ["SATIS", "TEVKIFAT", "ISTISNA", "IHRACKAYITLI", "OZELMATRAH"],
    "EARSIVFATURA": ["SATIS", "IADE", "TEVKIFAT", "TEVKIFATIADE", "ISTISNA", "OZELMATRAH"],
    "KAMU": ["SATIS", "IADE", "TEVKIFAT", "ISTISNA"],
    "IHRACAT": ["ISTISNA"],
}
RETURNS = {"IADE", "TEVKIFATIADE"}
#: Only these put the withholding in the document's totals (a TEVKIFATIADE carries it per line).
DOCUMENT_WITHHOLDING = {"TEVKIFAT", "IADE"}
ABROAD = {"district": "Mitte", "city": "Berlin", "country": "Almanya"}


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


# ------------------------------------------------------------------------------- strategies


@st.composite
def amounts(draw: st.DrawFn) -> tuple[str, str]:
    """Quantity and unit price whose product is at least 1.00 (so a 1 % VAT is never zero)."""
    quantity = Decimal(draw(st.integers(1, 50_000))) / Decimal(10) ** draw(st.integers(0, 2))
    price = Decimal(draw(st.integers(100, 10**8))) / Decimal(10) ** draw(st.integers(2, 4))
    if quantity * price < 1:
        quantity = Decimal(1)
        price = max(price, Decimal(1))
    return format(quantity, "f"), format(price, "f")


@st.composite
def a_line(draw: st.DrawFn, kind: str, *, zero: bool, withholding: str | None) -> dict[str, Any]:
    quantity, price = draw(amounts())
    line: dict[str, Any] = {"description": draw(st.sampled_from(["Widget", "Çay (kg)",
                                                                 "Danışmanlık", "Temizlik"])),
                            "quantity": quantity, "unit_price": price,
                            "vat_rate": "0" if zero else draw(st.sampled_from(["1", "10", "20"]))}
    if draw(st.booleans()):
        gross = cents(Decimal(quantity) * Decimal(price))
        line["discount"] = format(cents(gross * draw(st.integers(0, 50)) / 100), "f")
    if zero and kind in EXEMPT and draw(st.integers(0, 3)):
        line["vat_exemption_code"] = draw(st.sampled_from(EXEMPT[kind]))
        if draw(st.booleans()):
            line["vat_exemption_reason"] = "Sözleşme gereği istisna"
    if withholding is not None:
        line["withholding_code"] = withholding
        if draw(st.booleans()):
            line["withholding_rate"] = str(WITHHOLDING[withholding])
    return line


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A message of any kind the contract names, valid for its type and profile."""
    profile = draw(st.sampled_from(sorted(PROFILE_TYPES)))
    kind = draw(st.sampled_from(PROFILE_TYPES[profile]))
    count = draw(st.integers(1, 30))
    lines = []
    for index in range(count):
        withholding = (draw(st.sampled_from(sorted(WITHHOLDING)))
                       if kind in {"TEVKIFAT", "TEVKIFATIADE"} else None)
        zero = withholding is None and (profile == "IHRACAT" or draw(st.integers(0, 3)) == 0)
        line = draw(a_line(kind, zero=zero, withholding=withholding))
        if withholding is not None:
            line.pop("discount", None)  # keep the VAT above zero whatever the discount
        lines.append(line)
        if profile == "IHRACAT":
            line.update(vat_exemption_code="301", gtip=f"{8471300000 + index:012d}")
    if kind in EXEMPT:  # the type's reason to be: one zero-VAT line with a code of its kind
        lines[0].update(vat_rate="0", vat_exemption_code=EXEMPT[kind][0])
        lines[0].pop("withholding_code", None)
    currency = draw(st.sampled_from(["TRY", "TRY", "EUR", "USD"]))
    message: dict[str, Any] = {
        "invoice_id": "kind-1", "tenant": "acme", "series": "ABC", "issue_date": TODAY,
        "currency": currency, "type": kind, "lines": lines,
        "customer": draw(st.sampled_from([
            {"tax_id": "9876543210", "name": "Örnek Ticaret A.Ş.", "tax_office": "Çankaya",
             "address": {"district": "Çankaya", "city": "Ankara"}},
            {"tax_id": tckn(draw(st.randoms(use_true_random=False))), "name": "Ali Veli",
             "person": {"first_name": "Ali", "family_name": "Veli"},
             "address": {"district": "Konak", "city": "İzmir"}}]))}
    if draw(st.booleans()) or profile != "TEMELFATURA":
        message["profile"] = profile
    if currency != "TRY":
        message["exchange_rate"] = f"{draw(st.integers(30, 45))}.{draw(st.integers(0, 9999))}"
    if kind in RETURNS:
        message["billing_reference"] = [
            {"number": f"SUP2025{draw(st.integers(1, 10**9 - 1)):09d}",
             "issue_date": f"2025-12-{draw(st.integers(1, 31)):02d}"}
            for _ in range(draw(st.integers(1, 3)))]
        numbers = {ref["number"] for ref in message["billing_reference"]}
        message["billing_reference"] = [r for r in message["billing_reference"]
                                        if r["number"] in numbers and not numbers.discard(
                                            r["number"])]
    if profile == "IHRACAT":
        message["customer"] = {"tax_id": "1460415308", "name": "Hansa Handel GmbH",
                               "address": ABROAD}
        message["export"] = {"incoterms": draw(st.sampled_from(["FOB", "CIF", "EXW", "DAP"])),
                             "transport_mode": draw(st.sampled_from(["1", "3", "4"])),
                             "delivery_address": ABROAD}
    if profile == "KAMU":
        message["payment"] = {"iban": "TR330006100519786457841326"}
    if profile == "EARSIVFATURA" and draw(st.booleans()):
        message["earsiv"] = {"send_type": draw(st.sampled_from(["ELEKTRONIK", "KAGIT"])),
                             "internet_sale": {"website": "https://shop.example",
                                               "payment_method": "KREDIKARTI/BANKAKARTI",
                                               "payment_date": TODAY,
                                               "carrier": {"tax_id": "3880024731",
                                                           "name": "Hızlı Kargo A.Ş."},
                                               "shipment_date": TODAY}}
    if profile == "EARSIVFATURA" and draw(st.booleans()):
        message.setdefault("earsiv", {})["is_despatch"] = True
    if draw(st.integers(0, 2)) == 0:
        prefix = draw(st.sampled_from(["IRS", "DSP", "A1B"]))
        numbers = draw(st.lists(st.integers(1, 10**9 - 1), min_size=1, max_size=4, unique=True))
        message["despatch_references"] = [
            {"number": f"{prefix}2025{number:09d}",
             "issue_date": f"2025-12-{draw(st.integers(1, 31)):02d}"} for number in numbers]
    return message


def render(message: dict[str, Any]) -> bytes:
    parsed = validate_message(message)
    check_ubl_inputs(parsed, ISSUER)
    return render_ubl_tr(parsed, number="ABC2025000000001", uuid=uuid.uuid4(),
                         sealed_at=SEALED, tz="Europe/Istanbul", issuer=ISSUER)


# ------------------------------------------------------------------------------- amounts


def independent_amounts(message: dict[str, Any]) -> dict[str, Any]:
    """The document's amounts from the message alone: half-up to the cent once where computed;
    VAT per (rate, exemption) group from the sum of its nets; withholding per code from the sum
    of its lines' VAT; totals as sums."""
    lines = []
    taxable: dict[tuple[Decimal, str], Decimal] = defaultdict(Decimal)
    withheld_base: dict[str, Decimal] = defaultdict(Decimal)
    for line in message["lines"]:
        gross = cents(Decimal(line["quantity"]) * Decimal(line["unit_price"]))
        discount = Decimal(line.get("discount", "0"))
        rate = Decimal(line["vat_rate"])
        net = gross - discount
        tax = cents(net * rate / 100)
        code = line.get("withholding_code")
        withheld = cents(tax * WITHHOLDING[code] / 100) if code else None
        lines.append({"net": net, "discount": discount, "tax": tax, "withheld": withheld})
        taxable[(rate, line.get("vat_exemption_code", ""))] += net
        if code:
            withheld_base[code] += tax
    groups = {key: (base, cents(base * key[0] / 100)) for key, base in taxable.items()}
    withholdings = ({code: (base, cents(base * WITHHOLDING[code] / 100))
                     for code, base in withheld_base.items()}
                    if message.get("type") in DOCUMENT_WITHHOLDING else {})
    line_extension = sum((cents(Decimal(line["quantity"]) * Decimal(line["unit_price"]))
                          for line in message["lines"]), Decimal(0))
    allowance = sum((line["discount"] for line in lines), Decimal(0))
    tax = sum((tax for _, tax in groups.values()), Decimal(0))
    withheld = sum((amount for _, amount in withholdings.values()), Decimal(0))
    exclusive = line_extension - allowance
    return {"lines": lines, "groups": groups, "withholdings": withholdings,
            "line_extension": line_extension, "allowance": allowance, "exclusive": exclusive,
            "tax": tax, "inclusive": exclusive + tax, "payable": exclusive + tax - withheld}


def amount(element: Any, path: str) -> Decimal:
    return Decimal(element.findtext(path, namespaces=NS) or "NaN")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=documents())
def test_every_kind_passes_gib_rules_and_adds_up_to_an_independent_computation(
        message: dict[str, Any]) -> None:
    body = render(message)
    assert_valid(body)
    root = etree.fromstring(body)
    expected = independent_amounts(message)
    assert field(body, "cbc:InvoiceTypeCode") == message["type"]
    # lines: net amount, discount, VAT and withholding of each
    for line, want in zip(root.findall("cac:InvoiceLine", NS), expected["lines"], strict=True):
        assert amount(line, "cbc:LineExtensionAmount") == want["net"]
        discounts = line.findall("cac:AllowanceCharge/cbc:Amount", NS)
        assert sum((Decimal(d.text or "") for d in discounts), Decimal(0)) == want["discount"]
        assert amount(line, "cac:TaxTotal/cbc:TaxAmount") == want["tax"]
        if want["withheld"] is None:
            assert line.find("cac:WithholdingTaxTotal", NS) is None
        else:
            assert amount(line, "cac:WithholdingTaxTotal/cbc:TaxAmount") == want["withheld"]
    # the document's VAT groups: (rate, exemption code shown) -> (taxable, tax); a zero VAT
    # always names its reason: the message's code, else 351
    groups = {}
    for subtotal in root.findall("cac:TaxTotal/cac:TaxSubtotal", NS):
        category = "cac:TaxCategory/cbc:"
        code = subtotal.findtext(category + "TaxExemptionReasonCode", namespaces=NS)
        if code is not None:
            assert subtotal.findtext(category + "TaxExemptionReason", namespaces=NS)
        groups[(Decimal(subtotal.findtext("cbc:Percent", namespaces=NS) or ""), code)] = (
            amount(subtotal, "cbc:TaxableAmount"), amount(subtotal, "cbc:TaxAmount"))
    assert groups == {(rate, (code or "351") if tax == 0 else None): (taxable, tax)
                      for (rate, code), (taxable, tax) in expected["groups"].items()}
    withholdings = {
        sub.findtext("cac:TaxCategory/cac:TaxScheme/cbc:TaxTypeCode", namespaces=NS):
            (amount(sub, "cbc:TaxableAmount"), amount(sub, "cbc:TaxAmount"))
        for sub in root.findall("cac:WithholdingTaxTotal/cac:TaxSubtotal", NS)}
    assert withholdings == expected["withholdings"]
    total = "cac:LegalMonetaryTotal/cbc:"
    assert amount(root, total + "LineExtensionAmount") == expected["line_extension"]
    assert amount(root, total + "AllowanceTotalAmount") == expected["allowance"]
    assert amount(root, total + "TaxExclusiveAmount") == expected["exclusive"]
    assert amount(root, "cac:TaxTotal/cbc:TaxAmount") == expected["tax"]
    assert amount(root, total + "TaxInclusiveAmount") == expected["inclusive"]
    assert amount(root, total + "PayableAmount") == expected["payable"]
    notes = [note.text or "" for note in root.findall("cbc:Note", NS)]
    assert notes[-1].startswith("YALNIZ: ")
    # returns: each reference exactly as the message gives it
    references = [(ref.findtext("cbc:ID", namespaces=NS),
                   ref.findtext("cbc:IssueDate", namespaces=NS),
                   ref.findtext("cbc:DocumentTypeCode", namespaces=NS))
                  for ref in root.findall("cac:BillingReference/cac:InvoiceDocumentReference",
                                          NS)]
    assert references == [(ref["number"], ref["issue_date"], "IADE")
                          for ref in message.get("billing_reference", [])]
    # dispatch notes billed: each as given, in order; IS_DESPATCH exactly when the message says
    despatches = [(ref.findtext("cbc:ID", namespaces=NS),
                   ref.findtext("cbc:IssueDate", namespaces=NS))
                  for ref in root.findall("cac:DespatchDocumentReference", NS)]
    assert despatches == [(ref["number"], ref["issue_date"])
                          for ref in message.get("despatch_references", [])]
    codes = [ref.findtext("cbc:DocumentTypeCode", namespaces=NS)
             for ref in root.findall("cac:AdditionalDocumentReference", NS)]
    assert ("IS_DESPATCH" in codes) == message.get("earsiv", {}).get("is_despatch", False)


# ------------------------------------------------------------------------------- examples


def sale(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "invoice_id": "kind-2", "tenant": "acme", "series": "ABC", "issue_date": TODAY,
        "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Örnek Ticaret A.Ş.",
                     "tax_office": "Çankaya", "address": {"district": "Çankaya",
                                                          "city": "Ankara"}},
        "lines": [{"description": "Temizlik hizmeti", "quantity": "3", "unit_price": "33.335",
                   "vat_rate": "20"}]}
    message.update(changes)
    return message


def line(**changes: Any) -> dict[str, Any]:
    return {**sale()["lines"][0], **changes}


def test_the_worked_example_of_the_rounding_rule() -> None:
    # The example of docs/architecture.md, "Money": 3 × 33.335 = 100.005 → 100.01; less 5.00
    # discount → 95.01; VAT 20 % = 19.002 → 19.00; code 624 withholds 2/10 of it: 3.80;
    # 95.01 + 19.00 = 114.01 with VAT; payable 114.01 − 3.80 = 110.21.
    body = render(sale(type="TEVKIFAT", lines=[line(discount="5.00", withholding_code="624")]))
    assert_valid(body)
    total = "cac:LegalMonetaryTotal/cbc:"
    assert field(body, total + "LineExtensionAmount") == "100.01"
    assert field(body, total + "AllowanceTotalAmount") == "5.00"
    assert field(body, total + "TaxExclusiveAmount") == "95.01"
    assert field(body, "cac:TaxTotal/cbc:TaxAmount") == "19.00"
    assert field(body, "cac:WithholdingTaxTotal/cbc:TaxAmount") == "3.80"
    assert field(body, "cac:WithholdingTaxTotal/cac:TaxSubtotal/cbc:Percent") == "20"
    assert field(body, total + "TaxInclusiveAmount") == "114.01"
    assert field(body, total + "PayableAmount") == "110.21"
    assert summarize(body)["withheld"] == "3.80 TRY"
    assert field(body, "cbc:Note") == "YALNIZ: YÜZON TÜRK LİRASI YİRMİBİR KURUŞ"


def test_a_zero_vat_line_of_a_sale_gets_351_and_an_exemption_code_its_name() -> None:
    body = render(sale(lines=[line(vat_rate="0"), line(vat_rate="20")]))
    assert_valid(body)
    assert field(body, "cac:TaxTotal/cac:TaxSubtotal/cac:TaxCategory/"
                       "cbc:TaxExemptionReasonCode") == "351"
    body = render(sale(type="ISTISNA", lines=[line(vat_rate="0", vat_exemption_code="301")]))
    assert_valid(body)
    category = "cac:TaxTotal/cac:TaxSubtotal/cac:TaxCategory/"
    assert field(body, category + "cbc:TaxExemptionReasonCode") == "301"
    assert "ihracat" in (field(body, category + "cbc:TaxExemptionReason") or "").lower()


def test_an_export_names_the_customs_office_and_the_foreign_buyer() -> None:
    body = render(sale(profile="IHRACAT", type="ISTISNA", currency="EUR", exchange_rate="37.5",
                       customer={"tax_id": "1460415308", "name": "Hansa Handel GmbH",
                                 "address": ABROAD},
                       export={"incoterms": "FOB", "transport_mode": "1",
                               "delivery_address": ABROAD},
                       lines=[line(vat_rate="0", vat_exemption_code="301",
                                   gtip="847130000000")]))
    assert_valid(body)
    assert field(body, "cac:AccountingCustomerParty/cac:Party/cac:PartyIdentification/"
                       "cbc:ID") == "1460415308"
    root = etree.fromstring(body)
    buyer = root.find("cac:BuyerCustomerParty/cac:Party/cac:PartyIdentification/cbc:ID", NS)
    assert (buyer.text, buyer.get("schemeID")) == ("EXPORT", "PARTYTYPE")
    delivery = "cac:InvoiceLine/cac:Delivery/"
    assert field(body, delivery + "cac:DeliveryTerms/cbc:ID") == "FOB"
    assert field(body, delivery + "cac:Shipment/cac:GoodsItem/cbc:RequiredCustomsID") == (
        "847130000000")
    assert field(body, delivery + "cac:Shipment/cac:ShipmentStage/cbc:TransportModeCode") == "1"
    assert summarize(body)["customer"] == "Hansa Handel GmbH"


def test_an_export_registered_sale_under_702_carries_gtip_and_the_dib_line_code() -> None:
    body = render(sale(type="IHRACKAYITLI", lines=[
        line(vat_rate="0", vat_exemption_code="702", gtip="847130000000",
             dib_line_code="D1234567890")]))
    assert_valid(body)
    assert field(body, "cac:InvoiceLine/cac:Delivery/cac:Shipment/cac:TransportHandlingUnit/"
                       "cac:CustomsDeclaration/cac:IssuerParty/cac:PartyIdentification/"
                       "cbc:ID") == "D1234567890"


def test_kamu_carries_the_iban_and_earsiv_its_send_type_and_internet_sale() -> None:
    body = render(sale(profile="KAMU", payment={"iban": "TR330006100519786457841326"}))
    assert_valid(body)
    assert field(body, "cac:PaymentMeans/cac:PayeeFinancialAccount/cbc:ID") == (
        "TR330006100519786457841326")
    body = render(sale(profile="EARSIVFATURA", earsiv={"internet_sale": {
        "website": "https://shop.example", "payment_method": "KAPIDAODEME",
        "payment_date": TODAY, "carrier": {"tax_id": "3880024731", "name": "Hızlı Kargo"},
        "shipment_date": TODAY}}))
    assert_valid(body)
    references = {ref.findtext("cbc:DocumentTypeCode", namespaces=NS):
                  ref.findtext("cbc:ID", namespaces=NS)
                  for ref in etree.fromstring(body).findall("cac:AdditionalDocumentReference",
                                                            NS)}
    assert references["SEND_TYPE"] == "ELEKTRONIK"
    assert references["INT_WEBSITE"] == "https://shop.example"
    assert references["INT_PAYMENT_METHOD"] == "KAPIDAODEME"
    assert references["INT_PAYMENTDATE"] == TODAY
    assert field(body, "cac:Delivery/cac:CarrierParty/cac:PartyName/cbc:Name") == "Hızlı Kargo"
    assert field(body, "cac:Delivery/cac:Despatch/cbc:ActualDespatchDate") == TODAY


@pytest.mark.parametrize(("amount_text", "currency", "words"), [
    ("0.00", "TRY", "YALNIZ: SIFIR TÜRK LİRASI"),
    ("1234.15", "TRY", "YALNIZ: BİNİKİYÜZOTUZDÖRT TÜRK LİRASI ONBEŞ KURUŞ"),
    ("101.01", "TRY", "YALNIZ: YÜZBİR TÜRK LİRASI BİR KURUŞ"),
    ("2000000.50", "EUR", "YALNIZ: İKİMİLYON AVRO ELLİ SENT"),
    ("19.07", "JPY", "YALNIZ: ONDOKUZ JPY 07/100"),
    ("101001.00", "TRY", "YALNIZ: YÜZBİRBİNBİR TÜRK LİRASI"),
    ("441001.11", "TRY", "YALNIZ: DÖRTYÜZKIRKBİRBİNBİR TÜRK LİRASI ONBİR KURUŞ"),
    ("1005000001.00", "USD", "YALNIZ: BİRMİLYARBEŞMİLYONBİR ABD DOLARI"),
    ("1001000.00", "TRY", "YALNIZ: BİRMİLYONBİN TÜRK LİRASI"),
])
def test_the_amount_in_turkish_words(amount_text: str, currency: str, words: str) -> None:
    from gapless.documents.words import amount_in_words

    assert amount_in_words(Decimal(amount_text), currency) == words


# ------------------------------------------------------------------------------- refusals

REF = [{"number": "SUP2025000000012", "issue_date": "2025-12-20"}]
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("a return under TICARIFATURA", sale(type="IADE", profile="TICARIFATURA",
                                         billing_reference=REF), "type: "),
    ("an export of a plain sale", sale(profile="IHRACAT", type="SATIS"), "type: "),
    ("a return without its references", sale(type="IADE"), "billing_reference: "),
    ("a reference on a sale", sale(billing_reference=REF), "billing_reference: "),
    ("a reference that is not a GİB number",
     sale(type="IADE", billing_reference=[{"number": "INV-12", "issue_date": "2025-12-20"}]),
     "billing_reference.0.number: "),
    ("a reference dated after the return",
     sale(type="IADE", billing_reference=[{"number": "SUP2025000000012",
                                           "issue_date": "2026-01-02"}]),
     "billing_reference.0.issue_date: "),
    ("the same invoice returned twice", sale(type="IADE", billing_reference=REF * 2),
     "billing_reference.1.number: "),
    ("an unknown exemption code", sale(lines=[line(vat_rate="0", vat_exemption_code="399")]),
     "lines.0.vat_exemption_code: 399 is not"),
    ("an export exemption in a sale", sale(lines=[line(vat_rate="0",
                                                       vat_exemption_code="301")]),
     "lines.0.vat_exemption_code: code 301 is not allowed in a SATIS"),
    ("an exemption code on a taxed line", sale(type="ISTISNA", lines=[
        line(vat_exemption_code="301")]), "lines.0.vat_exemption_code: only for"),
    ("an exempt sale without an exemption", sale(type="ISTISNA"), "lines: a ISTISNA"),
    ("a reason without a code", sale(lines=[line(vat_exemption_reason="x")]),
     "lines.0.vat_exemption_reason: "),
    ("withholding in a sale", sale(lines=[line(withholding_code="602")]),
     "lines.0.withholding_code: VAT withholding is not allowed"),
    ("a withholding line without a code", sale(type="TEVKIFAT"),
     "lines.0.withholding_code: required"),
    ("an unknown withholding code", sale(type="TEVKIFAT", lines=[line(withholding_code="650")]),
     "lines.0.withholding_code: 650 is not"),
    ("a rate that disagrees with its code", sale(type="TEVKIFAT", lines=[
        line(withholding_code="602", withholding_rate="50")]),
     "lines.0.withholding_rate: 50 disagrees with code 602"),
    ("withholding on a zero VAT", sale(type="TEVKIFAT", lines=[
        line(vat_rate="0", withholding_code="602")]), "lines.0.withholding_code: withholding"),
    ("702 without a GTİP", sale(type="IHRACKAYITLI", lines=[
        line(vat_rate="0", vat_exemption_code="702", dib_line_code="D1234567890")]),
     "lines.0.gtip: "),
    ("702 without a DİB line code", sale(type="IHRACKAYITLI", lines=[
        line(vat_rate="0", vat_exemption_code="702", gtip="847130000000")]),
     "lines.0.dib_line_code: "),
    ("an export without delivery terms", sale(profile="IHRACAT", type="ISTISNA", lines=[
        line(vat_rate="0", vat_exemption_code="301", gtip="847130000000")]), "export: "),
    ("export terms on a domestic sale", sale(export={
        "incoterms": "FOB", "transport_mode": "1", "delivery_address": ABROAD}), "export: "),
    ("an unknown INCOTERMS code", sale(
        profile="IHRACAT", type="ISTISNA",
        customer={"tax_id": "1460415308", "name": "Hansa", "address": ABROAD},
        export={"incoterms": "XYZ", "transport_mode": "1", "delivery_address": ABROAD},
        lines=[line(vat_rate="0", vat_exemption_code="301", gtip="847130000000")]),
     "export.incoterms: "),
    ("a public-sector invoice without an IBAN", sale(profile="KAMU"), "payment: "),
    ("e-Arşiv facts on an e-Fatura", sale(earsiv={"send_type": "KAGIT"}), "earsiv: "),
    ("a discount larger than the line", sale(lines=[line(discount="200.00")]),
     "lines.0.discount: "),
]


@pytest.mark.parametrize(("name", "message", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_kind_the_rules_refuse_is_refused_naming_the_field(
        name: str, message: dict[str, Any], reason: str) -> None:
    parsed = validate_message(message)
    with pytest.raises(InvalidMessage) as refused:
        check_ubl_inputs(parsed, ISSUER)
    assert refused.value.reason.startswith(reason), refused.value.reason
    assert "9876543210" not in refused.value.reason
    assert "\n" not in refused.value.reason


@pytest.mark.parametrize(("changes", "reason"), [
    ({"type": "RETURN"}, "type: must be one of"),
    ({"lines": [line(vat_exemption_code="30")]}, "lines.0.vat_exemption_code: must be a 3-digit"),
    ({"lines": [line(discount="1.005")]}, "lines.0.discount: "),
    ({"lines": [line(gtip="1234")]}, "lines.0.gtip: must be the 12-digit"),
    ({"billing_reference": []}, "billing_reference: "),
    ({"billing_reference": [{"number": "SUP2025000000012", "issue_date": "2025-13-01"}]},
     "billing_reference.0.issue_date: "),
    ({"payment": {"iban": "TR330006100519786457841327"}}, "payment.iban: is not a valid IBAN"),
    ({"earsiv": {"send_type": "FAX"}}, "earsiv.send_type: must be one of"),
])
def test_a_malformed_kind_field_is_refused_by_the_message_contract(
        changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        validate_message(sale(**changes))
    assert refused.value.reason.startswith(reason), refused.value.reason


#: Turkish number words and their values (the scales last: they multiply what came before).
_WORD_VALUES = {"SIFIR": 0, "BİR": 1, "İKİ": 2, "ÜÇ": 3, "DÖRT": 4, "BEŞ": 5, "ALTI": 6,
                "YEDİ": 7, "SEKİZ": 8, "DOKUZ": 9, "ON": 10, "YİRMİ": 20, "OTUZ": 30,
                "KIRK": 40, "ELLİ": 50, "ALTMIŞ": 60, "YETMİŞ": 70, "SEKSEN": 80, "DOKSAN": 90,
                "YÜZ": 100, "BİN": 10 ** 3, "MİLYON": 10 ** 6, "MİLYAR": 10 ** 9,
                "TRİLYON": 10 ** 12}


def read_turkish(words: str) -> int:
    """The number one word of Turkish number words says (an independent reading: the longest
    known word at each place, units and tens added, YÜZ multiplying its group, a scale closing
    it)."""
    total = group = 0
    rest = words
    while rest:
        word = max((w for w in _WORD_VALUES if rest.startswith(w)), key=len)
        rest = rest[len(word):]
        value = _WORD_VALUES[word]
        if value == 100:
            group = (group or 1) * 100
        elif value >= 1000:
            total += (group or 1) * value
            group = 0
        else:
            group += value
    return total + group


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.integers(0, 10 ** 15 - 1), st.integers(0, 2 * 10 ** 6),
                 st.sampled_from([1000, 1001, 101_001, 441_001, 1_001_000, 1_005_000_001,
                                  10 ** 12 + 9 * 10 ** 6 + 1, 10 ** 15 - 1])))
def test_a_number_in_words_reads_back_as_the_number(number: int) -> None:
    """Every amount a document may carry (15 digits) is spelled so that it reads back as
    itself, in the one form Turkish writes: a group's words as num2words spells 0-999, a lone
    thousand as BİN."""
    from num2words import num2words

    from gapless.documents.words import spelled, upper_tr

    words = spelled(number)
    assert read_turkish(words) == number
    assert not words.startswith("BİRBİN")
    assert "BİRYÜZ" not in words
    if number < 1000:
        assert words == upper_tr(num2words(number, lang="tr"))
