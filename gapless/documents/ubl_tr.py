"""UBL-TR 2.1 invoices (e-Fatura / e-Arşiv), rendered with lxml — pure functions, no I/O.

:func:`check_ubl_inputs` says, before a number is sealed, whether a message can make a document
GİB accepts; :func:`render_ubl_tr` renders it once the number, the UUID and the seal moment are
known. Rendering is deterministic: the same inputs give the same bytes in any process, which is
what lets recovery resend byte for byte what a crashed worker sent.

The document is **unsigned**: GİB requires a XAdES signature in
``ext:UBLExtensions/ext:UBLExtension/ext:ExtensionContent``, which the schema wants to be exactly
one element. gapless puts a placeholder there, ``<gapless:Unsigned/>`` in the namespace
:data:`PLACEHOLDER_NS`; whoever signs (the integrator, or an adapter holding the tenant's mali
mühür) replaces that element with the ``ds:Signature``. ``cac:Signature`` (who signs, and the
``#Signature`` reference) is filled in already.
"""

from __future__ import annotations

import re
import uuid as uuid_module
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from lxml import etree

from gapless.documents.amounts import LineAmounts, Totals, amount_text, number_text, totals
from gapless.documents.codes import CURRENCY_CODES, UNIT_CODES
from gapless.documents.parties import VKN_RE, Issuer, split_person_name, valid_tckn
from gapless.message import PROFILES, Customer, InvalidMessage, InvoiceMessage

#: The rendering's version: bumped whenever the bytes for the same inputs change.
FORMAT = "ubl-tr-2.1/1"
#: The namespace of the unsigned placeholder (see the module docstring).
PLACEHOLDER_NS = "urn:gapless:ubl-tr:unsigned"

INV = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
EXT = "urn:oasis:names:specification:ubl:schema:xsd:CommonExtensionComponents-2"
#: The default namespace is the Invoice's (lxml's stubs do not know a None prefix: hence Any).
NSMAP: Any = {None: INV, "cac": CAC, "cbc": CBC, "ext": EXT}

#: VAT (KDV) rates a document may carry: the current ones. A rate of 0 needs a tax-exemption
#: reason code, and 8/18 are gone since July 2023; neither is rendered.
VAT_RATES = frozenset({Decimal(1), Decimal(10), Decimal(20)})
VAT_NAME, VAT_CODE = "KDV", "0015"
DEFAULT_UNIT = "C62"  # "one" (a piece)
DEFAULT_COUNTRY = "Türkiye"
#: GİB's invoice number: 3 characters, the year (20yy), 9 digits (schematron InvoiceIDCheck).
GIB_NUMBER_RE = re.compile(r"[A-Z0-9]{3}20[0-9]{2}[0-9]{9}")
#: Amounts have at most 15 digits before the point in a GİB document.
MAX_AMOUNT = Decimal(10) ** 15


def is_gib_number(number: str) -> bool:
    """Whether ``number`` is a GİB e-invoice number, e.g. ``ABC2026000000001``."""
    return GIB_NUMBER_RE.fullmatch(number) is not None


# ----------------------------------------------------------------------------------- checks


def _refuse(path: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"{path}: {problem}")


def _check_customer(customer: Customer) -> None:
    """The buyer: a company (VKN) with its tax office, or a person (TCKN, check digits right)
    with first and family name; either with an address that has a district and a city."""
    if len(customer.tax_id) == 11:
        if not valid_tckn(customer.tax_id):
            raise _refuse("customer.tax_id", "an 11-digit TCKN whose check digits do not match")
        if customer.person is None:
            raise _refuse("customer.person", "first_name and family_name are required for an "
                                             "11-digit TCKN customer in a UBL-TR document")
    elif not VKN_RE.fullmatch(customer.tax_id):  # pragma: no cover - the message checks digits
        raise _refuse("customer.tax_id", "must be a 10-digit VKN or an 11-digit TCKN")
    elif customer.tax_office is None:
        raise _refuse("customer.tax_office", "required for a company (10-digit VKN) customer "
                                             "in a UBL-TR document")
    if customer.address is None:
        raise _refuse("customer.address", "required for a UBL-TR document (at least district "
                                          "and city)")
    for field in ("district", "city"):
        if getattr(customer.address, field) is None:
            raise _refuse(f"customer.address.{field}", "required for a UBL-TR document")


def _check_money(message: InvoiceMessage, amounts: Totals) -> None:
    """Currency, exchange rate, VAT rates, quantities and the size of every amount."""
    if message.currency not in CURRENCY_CODES:
        raise _refuse("currency", "not a currency GİB accepts (ISO 4217)")
    if message.currency == "TRY" and message.exchange_rate is not None:
        raise _refuse("exchange_rate", "only for a document currency other than TRY")
    if message.currency != "TRY" and message.exchange_rate is None:
        raise _refuse("exchange_rate", f"required for a {message.currency} document (TRY per "
                                       f"1 {message.currency})")
    for index, (line, amounts_of_line) in enumerate(zip(message.lines, amounts.lines,
                                                        strict=True)):
        _check_line(index, line.unit_code, amounts_of_line)
    for rate in amounts.rates:
        if rate.tax == 0:
            raise _refuse("lines", f"the {number_text(rate.rate)} % VAT of a taxable "
                                   f"{amount_text(rate.taxable)} rounds to 0.00; GİB needs a "
                                   "tax-exemption reason for a zero VAT, which gapless does not "
                                   "render")
    if amounts.payable >= MAX_AMOUNT:
        raise _refuse("lines", "the payable amount has more than 15 digits before the point")


def _check_line(index: int, unit_code: str | None, line: LineAmounts) -> None:
    where = f"lines.{index}"
    if unit_code is not None and unit_code not in UNIT_CODES:
        raise _refuse(f"{where}.unit_code", "not a unit code GİB accepts (UN/ECE Rec. 20)")
    if line.rate not in VAT_RATES:
        raise _refuse(f"{where}.vat_rate", "must be 1, 10 or 20 in a UBL-TR document (a rate of "
                                           "0 needs a tax-exemption reason)")
    if line.net >= MAX_AMOUNT:
        raise _refuse(f"{where}", "the line amount has more than 15 digits before the point")


def check_ubl_inputs(message: InvoiceMessage, issuer: Issuer) -> None:
    """Raise InvalidMessage (a one-line reason naming the field, never a tax id) when the message
    cannot make a UBL-TR document GİB accepts for this issuer; return None when it can.

    Run before a number is sealed, so a message that cannot make its document consumes nothing.
    ``issuer`` is the tenant's profile (already valid); it is an argument so that rules that
    depend on the issuer have a place.
    """
    if message.profile is not None and message.profile not in PROFILES:  # pragma: no cover
        raise _refuse("profile", f"must be one of {', '.join(PROFILES)}")
    _check_customer(message.customer)
    _check_money(message, totals(message))


# ----------------------------------------------------------------------------------- render


def _cbc(parent: etree._Element, name: str, text: str, **attrib: str) -> etree._Element:
    element = etree.SubElement(parent, f"{{{CBC}}}{name}", attrib)
    element.text = text
    return element


def _cac(parent: etree._Element, name: str) -> etree._Element:
    return etree.SubElement(parent, f"{{{CAC}}}{name}")


def _address(parent: etree._Element, *, street: str | None, district: str, city: str,
             postal_zone: str | None, country: str | None) -> None:
    address = _cac(parent, "PostalAddress")
    if street:
        _cbc(address, "StreetName", street)
    _cbc(address, "CitySubdivisionName", district)
    _cbc(address, "CityName", city)
    if postal_zone:
        _cbc(address, "PostalZone", postal_zone)
    _cbc(_cac(address, "Country"), "Name", country or DEFAULT_COUNTRY)


def _tax_scheme(parent: etree._Element, tax_office: str | None) -> None:
    if tax_office:
        _cbc(_cac(_cac(parent, "PartyTaxScheme"), "TaxScheme"), "Name", tax_office)


def _person(parent: etree._Element, first: str, family: str) -> None:
    person = _cac(parent, "Person")
    _cbc(person, "FirstName", first)
    _cbc(person, "FamilyName", family)


def _supplier(root: etree._Element, issuer: Issuer) -> None:
    party = _cac(_cac(root, "AccountingSupplierParty"), "Party")
    scheme = "TCKN" if issuer.is_person else "VKN"
    _cbc(_cac(party, "PartyIdentification"), "ID", issuer.tax_id, schemeID=scheme)
    if not issuer.is_person:
        _cbc(_cac(party, "PartyName"), "Name", issuer.name)
    _address(party, street=issuer.street, district=issuer.district, city=issuer.city,
             postal_zone=issuer.postal_zone, country=issuer.country)
    _tax_scheme(party, issuer.tax_office)
    if issuer.email:
        _cbc(_cac(party, "Contact"), "ElectronicMail", issuer.email)
    if issuer.is_person:
        _person(party, *split_person_name(issuer.name))


def _customer(root: etree._Element, customer: Customer) -> None:
    party = _cac(_cac(root, "AccountingCustomerParty"), "Party")
    person = len(customer.tax_id) == 11
    _cbc(_cac(party, "PartyIdentification"), "ID", customer.tax_id,
         schemeID="TCKN" if person else "VKN")
    if not person:
        _cbc(_cac(party, "PartyName"), "Name", customer.name)
    address = customer.address
    assert address is not None  # check_ubl_inputs
    assert address.district is not None
    assert address.city is not None
    _address(party, street=address.street, district=address.district, city=address.city,
             postal_zone=address.postal_zone, country=address.country)
    _tax_scheme(party, customer.tax_office)
    if person:
        assert customer.person is not None  # check_ubl_inputs
        _person(party, customer.person.first_name, customer.person.family_name)


def _signature(root: etree._Element, issuer: Issuer) -> None:
    """Who signs the document (the issuer), and where the XAdES signature will be."""
    signature = _cac(root, "Signature")
    _cbc(signature, "ID", issuer.tax_id, schemeID="VKN_TCKN")
    signatory = _cac(signature, "SignatoryParty")
    _cbc(_cac(signatory, "PartyIdentification"), "ID", issuer.tax_id,
         schemeID="TCKN" if issuer.is_person else "VKN")
    _address(signatory, street=issuer.street, district=issuer.district, city=issuer.city,
             postal_zone=issuer.postal_zone, country=issuer.country)
    reference = _cac(_cac(signature, "DigitalSignatureAttachment"), "ExternalReference")
    _cbc(reference, "URI", "#Signature")


def _tax_total(parent: etree._Element, currency: str,
               subtotals: list[tuple[Decimal, Decimal, Decimal]]) -> None:
    """A TaxTotal of (taxable, tax, rate) subtotals of KDV."""
    total = _cac(parent, "TaxTotal")
    _cbc(total, "TaxAmount", amount_text(sum((tax for _, tax, _ in subtotals), Decimal(0))),
         currencyID=currency)
    for taxable, tax, rate in subtotals:
        subtotal = _cac(total, "TaxSubtotal")
        _cbc(subtotal, "TaxableAmount", amount_text(taxable), currencyID=currency)
        _cbc(subtotal, "TaxAmount", amount_text(tax), currencyID=currency)
        _cbc(subtotal, "Percent", number_text(rate))
        scheme = _cac(_cac(subtotal, "TaxCategory"), "TaxScheme")
        _cbc(scheme, "Name", VAT_NAME)
        _cbc(scheme, "TaxTypeCode", VAT_CODE)


def _monetary_total(root: etree._Element, currency: str, amounts: Totals) -> None:
    total = _cac(root, "LegalMonetaryTotal")
    for name, value in (("LineExtensionAmount", amounts.line_extension),
                        ("TaxExclusiveAmount", amounts.line_extension),
                        ("TaxInclusiveAmount", amounts.tax_inclusive),
                        ("PayableAmount", amounts.payable)):
        _cbc(total, name, amount_text(value), currencyID=currency)


def _lines(root: etree._Element, message: InvoiceMessage, amounts: Totals) -> None:
    currency = message.currency
    for index, (line, amount) in enumerate(zip(message.lines, amounts.lines, strict=True), 1):
        element = _cac(root, "InvoiceLine")
        _cbc(element, "ID", str(index))
        _cbc(element, "InvoicedQuantity", number_text(amount.quantity),
             unitCode=line.unit_code or DEFAULT_UNIT)
        _cbc(element, "LineExtensionAmount", amount_text(amount.net), currencyID=currency)
        _tax_total(element, currency, [(amount.net, amount.tax, amount.rate)])
        _cbc(_cac(element, "Item"), "Name", line.description)
        _cbc(_cac(element, "Price"), "PriceAmount", number_text(amount.unit_price),
             currencyID=currency)


def _header(root: etree._Element, message: InvoiceMessage, *, number: str,
            uuid: uuid_module.UUID, local: datetime) -> None:
    """Identity, dates, type and currency, in the order of the UBL-TR schema."""
    extension = etree.SubElement(etree.SubElement(root, f"{{{EXT}}}UBLExtensions"),
                                 f"{{{EXT}}}UBLExtension")
    content = etree.SubElement(extension, f"{{{EXT}}}ExtensionContent")
    etree.SubElement(content, f"{{{PLACEHOLDER_NS}}}Unsigned", nsmap={"gapless": PLACEHOLDER_NS})
    _cbc(root, "UBLVersionID", "2.1")
    _cbc(root, "CustomizationID", "TR1.2")
    _cbc(root, "ProfileID", message.profile or PROFILES[0])
    _cbc(root, "ID", number)
    _cbc(root, "CopyIndicator", "false")
    _cbc(root, "UUID", str(uuid))  # RFC 4122: output in lower case
    _cbc(root, "IssueDate", local.strftime("%Y-%m-%d"))
    _cbc(root, "IssueTime", local.strftime("%H:%M:%S"))
    _cbc(root, "InvoiceTypeCode", message.type or "SATIS")
    if message.note and message.note.strip():
        _cbc(root, "Note", message.note)
    _cbc(root, "DocumentCurrencyCode", message.currency)
    _cbc(root, "LineCountNumeric", str(len(message.lines)))


def render_ubl_tr(message: InvoiceMessage, *, number: str, uuid: uuid_module.UUID,
                  sealed_at: datetime, tz: str, issuer: Issuer) -> bytes:
    """The UBL-TR 2.1 Invoice of ``message`` under its sealed ``number`` and ``uuid``, dated
    ``sealed_at`` (timezone-aware) in the series' time zone ``tz``: UTF-8 XML with a declaration.

    The message must have passed :func:`check_ubl_inputs` for ``issuer``.
    """
    if sealed_at.tzinfo is None:
        raise ValueError("sealed_at must be timezone-aware")
    local = sealed_at.astimezone(ZoneInfo(tz))
    amounts = totals(message)
    currency = message.currency
    root = etree.Element(f"{{{INV}}}Invoice", nsmap=NSMAP)
    _header(root, message, number=number, uuid=uuid, local=local)
    _signature(root, issuer)
    _supplier(root, issuer)
    _customer(root, message.customer)
    if currency != "TRY":
        rate = _cac(root, "PricingExchangeRate")
        _cbc(rate, "SourceCurrencyCode", currency)
        _cbc(rate, "TargetCurrencyCode", "TRY")
        assert message.exchange_rate is not None  # check_ubl_inputs
        _cbc(rate, "CalculationRate", number_text(Decimal(message.exchange_rate)))
    _tax_total(root, currency, [(r.taxable, r.tax, r.rate) for r in amounts.rates])
    _monetary_total(root, currency, amounts)
    _lines(root, message, amounts)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


# ----------------------------------------------------------------------------------- summary

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
_NS = {"cac": CAC, "cbc": CBC}


def summarize(body: bytes) -> dict[str, Any]:
    """A few facts of a rendered document, for people (the demo, ``gapless invoice show``)."""
    root = etree.fromstring(body, _PARSER)

    def text(path: str) -> str | None:
        return root.findtext(path, namespaces=_NS)

    def party_name(path: str) -> str | None:
        name = text(f"{path}/cac:Party/cac:PartyName/cbc:Name")
        if name is None:
            first = text(f"{path}/cac:Party/cac:Person/cbc:FirstName")
            family = text(f"{path}/cac:Party/cac:Person/cbc:FamilyName")
            name = " ".join(part for part in (first, family) if part) or None
        return name

    currency = text("cbc:DocumentCurrencyCode")

    def money(path: str) -> str | None:
        value = text(path)
        return None if value is None else f"{value} {currency}"
    return {"number": text("cbc:ID"), "uuid": text("cbc:UUID"),
            "issued": f"{text('cbc:IssueDate')} {text('cbc:IssueTime')}",
            "profile": text("cbc:ProfileID"), "type": text("cbc:InvoiceTypeCode"),
            "supplier": party_name("cac:AccountingSupplierParty"),
            "customer": party_name("cac:AccountingCustomerParty"),
            "lines": text("cbc:LineCountNumeric"),
            "tax": money("cac:TaxTotal/cbc:TaxAmount"),
            "payable": money("cac:LegalMonetaryTotal/cbc:PayableAmount")}
