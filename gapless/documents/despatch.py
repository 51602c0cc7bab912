"""UBL-TR 2.1 dispatch notes (e-İrsaliye, ``DespatchAdvice``), rendered with the invoice's
writer and parts — pure functions, no I/O.

:func:`check_despatch_inputs` runs before the seal (what needs the tenant's issuer profile: the
customer's tax office or person, unit codes and currencies GİB knows; GİB's rules of the note
itself are the message's, :mod:`gapless.message.despatch`). :func:`render_despatch` renders the
note once the number, the UUID and the seal moment are known: deterministic, like an invoice.

The parties are the invoice's (:mod:`~gapless.documents.parties`): the issuer as
``DespatchSupplierParty``, the customer as ``DeliveryCustomerParty``, a carrier company as the
invoice's carrier party. Each other part renders in a small function of its own, called in the
schema's order by :func:`render_despatch`: the header, the order and the paper note's
references, the shipment (its stage — the vehicle's plate and its drivers —, its delivery — the
address, the carrier, when the goods leave —, its trailers) and the lines (quantity, the
identifiers a profile needs, and a price when the line has one). Unsigned, like an invoice
(:mod:`~gapless.documents.ubl_tr`).
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from gapless.documents import parties, xml
from gapless.documents.amounts import amount_text, money, number_text
from gapless.documents.checks import MAX_AMOUNT, check_customer
from gapless.documents.codes import CURRENCY_CODES, UNIT_CODES
from gapless.documents.lines import DEFAULT_UNIT
from gapless.documents.parties import Issuer
from gapless.documents.ubl_tr import unsigned
from gapless.documents.xml import CAC, CBC, EXT, Element, cac, cbc
from gapless.message import (
    IDENTIFIERS,
    Despatch,
    DespatchLine,
    DespatchMessage,
    InvalidMessage,
    Printed,
)

#: The rendering's version: bumped whenever the bytes for the same inputs change.
DESPATCH_FORMAT = "ubl-tr-2.1-despatch/1"
DESPATCH = "urn:oasis:names:specification:ubl:schema:xsd:DespatchAdvice-2"
NSMAP: dict[str | None, str] = {None: DESPATCH, "cac": CAC, "cbc": CBC, "ext": EXT}
#: The document type of the paper note a MATBUDAN note registers (as integrators write it).
PRINTED_TYPE = "MATBU"
DEFAULT_CURRENCY = "TRY"
#: The one shipment of a note.
SHIPMENT_ID = "1"


# ------------------------------------------------------------------------------------- checks


def check_despatch_inputs(message: DespatchMessage, issuer: Issuer) -> None:
    """Raise InvalidMessage (a one-line reason naming the field, never a tax id) when the message
    cannot make a dispatch note GİB accepts for this issuer; return None when it can.

    Run before a number is sealed, like :func:`~gapless.documents.check_ubl_inputs`; the
    message's own rules (drivers or a carrier, plates, postal zone, a type's and a profile's
    needs) were checked when it was parsed.
    """
    check_customer(message.customer)
    currency = message.currency or DEFAULT_CURRENCY
    if currency not in CURRENCY_CODES:
        raise InvalidMessage("currency: not a currency GİB accepts (ISO 4217)")
    total = Decimal(0)
    for index, line in enumerate(message.lines):
        if line.unit_code is not None and line.unit_code not in UNIT_CODES:
            raise InvalidMessage(f"lines.{index}.unit_code: not a unit code GİB accepts "
                                 "(UN/ECE Rec. 20)")
        amount = _amount(line)
        if amount is not None:
            total += amount
            if amount >= MAX_AMOUNT:
                raise InvalidMessage(f"lines.{index}: the line amount has more than 15 digits "
                                     "before the point")
    if total >= MAX_AMOUNT:
        raise InvalidMessage("lines: the goods' value has more than 15 digits before the point")
    if message.despatch.carrier is not None:
        _check_carrier_address(message.despatch)


def _check_carrier_address(despatch: Despatch) -> None:
    postal = despatch.carrier.address if despatch.carrier is not None else None
    if postal is not None and (postal.district is None or postal.city is None):
        field = "district" if postal.district is None else "city"
        raise InvalidMessage(f"despatch.carrier.address.{field}: required for a UBL-TR "
                             "document (or leave the carrier's address out)")


def _amount(line: DespatchLine) -> Decimal | None:
    if line.unit_price is None:
        return None
    return money(Decimal(line.quantity) * Decimal(line.unit_price))


# ------------------------------------------------------------------------------------ parts


def header(root: Element, message: DespatchMessage, *, number: str, uuid: uuid_module.UUID,
           local: datetime) -> None:
    """Identity, dates, type, note and line count, in the order of the schema."""
    unsigned(root)
    cbc(root, "UBLVersionID", "2.1")
    cbc(root, "CustomizationID", "TR1.2")
    cbc(root, "ProfileID", message.despatch.profile_code)
    cbc(root, "ID", number)
    cbc(root, "CopyIndicator", "false")
    cbc(root, "UUID", str(uuid))
    cbc(root, "IssueDate", local.strftime("%Y-%m-%d"))
    cbc(root, "IssueTime", local.strftime("%H:%M:%S"))
    cbc(root, "DespatchAdviceTypeCode", message.despatch.type_code)
    if message.note and message.note.strip():
        cbc(root, "Note", message.note)
    cbc(root, "LineCountNumeric", str(len(message.lines)))


def references(root: Element, despatch: Despatch) -> None:
    """The buyer's order, and the paper note a MATBUDAN note registers."""
    if despatch.order is not None:
        order = cac(root, "OrderReference")
        cbc(order, "ID", despatch.order.number)
        cbc(order, "IssueDate", despatch.order.issue_date.isoformat())
    if despatch.printed is not None:
        printed_reference(root, despatch.printed)


def printed_reference(root: Element, printed: Printed) -> None:
    reference = cac(root, "AdditionalDocumentReference")
    cbc(reference, "ID", printed.number)
    cbc(reference, "IssueDate", printed.issue_date.isoformat())
    cbc(reference, "DocumentTypeCode", PRINTED_TYPE)


def supplier_parts(root: Element, message: DespatchMessage, issuer: Issuer) -> None:
    """Who signs, and the issuer as the despatch supplier (with an IDIS note's shipment
    number)."""
    sevkiyat = message.despatch.sevkiyat_no
    if sevkiyat is None:
        for part in parties.issuer_parts(issuer, "DespatchSupplierParty"):
            root.append(part)
        return
    parties.signature(root, issuer)
    scheme = IDENTIFIERS["sevkiyat_no"].scheme
    assert scheme is not None
    parties.supplier(root, issuer, tag="DespatchSupplierParty",
                     identifications=((scheme, sevkiyat),))


def shipment(root: Element, message: DespatchMessage, issuer: Issuer,
             prices: list[Decimal | None]) -> None:
    """The shipment: the goods' value (when the lines have prices), the stage, the delivery, the
    trailers."""
    despatch = message.despatch
    element = cac(root, "Shipment")
    cbc(element, "ID", SHIPMENT_ID)
    priced = [amount for amount in prices if amount is not None]
    if priced:
        cbc(cac(element, "GoodsItem"), "ValueAmount", amount_text(sum(priced, Decimal(0))),
            currencyID=message.currency or DEFAULT_CURRENCY)
    stage(element, despatch)
    delivery(element, despatch, issuer)
    trailers(element, despatch)


def stage(element: Element, despatch: Despatch) -> None:
    """The vehicle (its plate, in its scheme) and its drivers."""
    if despatch.license_plate is None and not despatch.drivers:
        return
    part = cac(element, "ShipmentStage")
    if despatch.license_plate is not None:
        road = cac(cac(part, "TransportMeans"), "RoadTransport")
        cbc(road, "LicensePlateID", despatch.license_plate, schemeID=despatch.scheme.name)
    for driver in despatch.drivers or ():
        parties.driver(part, driver.first_name, driver.family_name, driver.tckn)


def delivery(element: Element, despatch: Despatch, issuer: Issuer) -> None:
    """Where the goods go, who carries them (a carrier company) and when they leave."""
    part = cac(element, "Delivery")
    parties.message_address(part, despatch.delivery_address, tag="DeliveryAddress")
    carrier = despatch.carrier
    if carrier is not None:
        parties.party(part, "CarrierParty", tax_id=carrier.tax_id, name=carrier.name,
                      postal=carrier.address, fallback=issuer)
    leaves = cac(part, "Despatch")
    cbc(leaves, "ActualDespatchDate", despatch.despatch_date.isoformat())
    cbc(leaves, "ActualDespatchTime", despatch.despatch_time.strftime("%H:%M:%S"))


def trailers(element: Element, despatch: Despatch) -> None:
    if not despatch.trailer_plates:
        return
    unit = cac(element, "TransportHandlingUnit")
    for plate in despatch.trailer_plates:
        cbc(cac(unit, "TransportEquipment"), "ID", plate, schemeID=despatch.scheme.trailer)


def despatch_line(root: Element, number: int, line: DespatchLine, amount: Decimal | None,
                  currency: str) -> None:
    """One line: the quantity delivered, the goods and their identifiers, and — when the line
    has a price — its value as the invoice line it will be billed as."""
    element = cac(root, "DespatchLine")
    cbc(element, "ID", str(number))
    unit = line.unit_code or DEFAULT_UNIT
    quantity = number_text(Decimal(line.quantity))
    cbc(element, "DeliveredQuantity", quantity, unitCode=unit)
    cbc(cac(element, "OrderLineReference"), "LineID", str(number))
    item(element, line)
    if amount is None or line.unit_price is None:
        return
    line_shipment = cac(element, "Shipment")
    cbc(line_shipment, "ID", str(number))
    goods = cac(line_shipment, "GoodsItem")
    invoice_line = cac(goods, "InvoiceLine")
    cbc(invoice_line, "ID", str(number))
    cbc(invoice_line, "InvoicedQuantity", quantity, unitCode=unit)
    cbc(invoice_line, "LineExtensionAmount", amount_text(amount), currencyID=currency)
    cbc(cac(invoice_line, "Item"), "Name", line.description)
    cbc(cac(invoice_line, "Price"), "PriceAmount", number_text(Decimal(line.unit_price)),
        currencyID=currency)


def item(element: Element, line: DespatchLine) -> None:
    """The goods: their name, and the HKS künye or IDIS label number a profile needs."""
    goods = cac(element, "Item")
    cbc(goods, "Name", line.description)
    for field in ("kunye_no", "etiket_no"):
        value = getattr(line, field)
        scheme = IDENTIFIERS[field].scheme
        if value is not None and scheme is not None:
            cbc(cac(goods, "AdditionalItemIdentification"), "ID", value, schemeID=scheme)


# ------------------------------------------------------------------------------------ render


def render_despatch(message: DespatchMessage, *, number: str, uuid: uuid_module.UUID,
                    sealed_at: datetime, tz: str, issuer: Issuer) -> bytes:
    """The UBL-TR 2.1 DespatchAdvice of ``message`` under its sealed ``number`` and ``uuid``,
    dated ``sealed_at`` (timezone-aware) in the series' time zone ``tz``: UTF-8 XML with a
    declaration.

    The message must have passed :func:`check_despatch_inputs` for ``issuer``.
    """
    if sealed_at.tzinfo is None:
        raise ValueError("sealed_at must be timezone-aware")
    local = sealed_at.astimezone(ZoneInfo(tz))
    currency = message.currency or DEFAULT_CURRENCY
    amounts = [_amount(line) for line in message.lines]
    root = xml.root("DespatchAdvice", NSMAP)
    header(root, message, number=number, uuid=uuid, local=local)
    references(root, message.despatch)
    supplier_parts(root, message, issuer)
    parties.customer(root, message.customer, tag="DeliveryCustomerParty")
    shipment(root, message, issuer, amounts)
    for number_of_line, (line, amount) in enumerate(zip(message.lines, amounts, strict=True), 1):
        despatch_line(root, number_of_line, line, amount, currency)
    return xml.tostring(root)
