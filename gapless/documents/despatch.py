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
from gapless.documents.ubl_tr import OPENING, free_note, identity
from gapless.documents.xml import CAC, CBC, EXT, attribute, cac, cbc, escape
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


def header(message: DespatchMessage, *, number: str, uuid: uuid_module.UUID,
           local: datetime) -> str:
    """Identity, dates, type, note and line count, in the order of the schema: a template, the
    same shape in every note."""
    return (f"{OPENING}<cbc:ProfileID>{escape(message.despatch.profile_code)}</cbc:ProfileID>"
            f"{identity(number, uuid, local)}"
            f"<cbc:DespatchAdviceTypeCode>{escape(message.despatch.type_code)}"
            f"</cbc:DespatchAdviceTypeCode>{free_note(message.note)}"
            f"<cbc:LineCountNumeric>{len(message.lines)}</cbc:LineCountNumeric>")


def references(despatch: Despatch) -> str:
    """The buyer's order, and the paper note a MATBUDAN note registers."""
    order = despatch.order
    return "".join((
        "" if order is None else cac("OrderReference",
                                     cbc("ID", order.number),
                                     cbc("IssueDate", order.issue_date.isoformat())),
        "" if despatch.printed is None else printed_reference(despatch.printed)))


def printed_reference(printed: Printed) -> str:
    return cac("AdditionalDocumentReference",
               cbc("ID", printed.number),
               cbc("IssueDate", printed.issue_date.isoformat()),
               cbc("DocumentTypeCode", PRINTED_TYPE))


def supplier_parts(message: DespatchMessage, issuer: Issuer) -> str:
    """Who signs, and the issuer as the despatch supplier (with an IDIS note's shipment
    number)."""
    sevkiyat = message.despatch.sevkiyat_no
    if sevkiyat is None:
        return parties.issuer_parts(issuer, "DespatchSupplierParty")
    scheme = IDENTIFIERS["sevkiyat_no"].scheme
    assert scheme is not None
    return parties.signature(issuer) + parties.supplier(
        issuer, tag="DespatchSupplierParty", identifications=((scheme, sevkiyat),))


def shipment(message: DespatchMessage, issuer: Issuer, prices: list[Decimal | None]) -> str:
    """The shipment: the goods' value (when the lines have prices), the stage, the delivery, the
    trailers."""
    despatch = message.despatch
    priced = [amount for amount in prices if amount is not None]
    return cac("Shipment",
               cbc("ID", SHIPMENT_ID),
               cac("GoodsItem", xml.amount("ValueAmount", amount_text(sum(priced, Decimal(0))),
                                       message.currency or DEFAULT_CURRENCY))
               if priced else "",
               stage(despatch),
               delivery(despatch, issuer),
               trailers(despatch))


def stage(despatch: Despatch) -> str:
    """The vehicle (its plate, in its scheme) and its drivers."""
    if despatch.license_plate is None and not despatch.drivers:
        return ""
    return cac("ShipmentStage",
               "" if despatch.license_plate is None else cac("TransportMeans", cac(
                   "RoadTransport",
                   cbc("LicensePlateID", despatch.license_plate,
                       schemeID=despatch.scheme.name))),
               *[parties.driver(driver.first_name, driver.family_name, driver.tckn)
                 for driver in despatch.drivers or ()])


def delivery(despatch: Despatch, issuer: Issuer) -> str:
    """Where the goods go, who carries them (a carrier company) and when they leave."""
    carrier = despatch.carrier
    return cac("Delivery",
               parties.message_address(despatch.delivery_address, tag="DeliveryAddress"),
               "" if carrier is None else parties.party(
                   "CarrierParty", tax_id=carrier.tax_id, name=carrier.name,
                   postal=carrier.address, fallback=issuer),
               cac("Despatch",
                   cbc("ActualDespatchDate", despatch.despatch_date.isoformat()),
                   cbc("ActualDespatchTime", despatch.despatch_time.strftime("%H:%M:%S"))))


def trailers(despatch: Despatch) -> str:
    if not despatch.trailer_plates:
        return ""
    return cac("TransportHandlingUnit",
               *[cac("TransportEquipment", cbc("ID", plate, schemeID=despatch.scheme.trailer))
                 for plate in despatch.trailer_plates])


def despatch_line(number: int, line: DespatchLine, amount: Decimal | None,
                  currency: str) -> str:
    """One line: the quantity delivered, the goods and their identifiers, and — when the line
    has a price — its value as the invoice line it will be billed as. A template (every line
    has this shape), like an invoice's line."""
    unit = attribute("unitCode", line.unit_code or DEFAULT_UNIT)
    quantity = number_text(Decimal(line.quantity))
    name = escape(line.description)
    priced = ""
    if amount is not None and line.unit_price is not None:
        in_currency = attribute("currencyID", currency)
        priced = (f"<cac:Shipment><cbc:ID>{number}</cbc:ID><cac:GoodsItem><cac:InvoiceLine>"
                  f"<cbc:ID>{number}</cbc:ID>"
                  f"<cbc:InvoicedQuantity{unit}>{quantity}</cbc:InvoicedQuantity>"
                  f"<cbc:LineExtensionAmount{in_currency}>{amount_text(amount)}"
                  "</cbc:LineExtensionAmount>"
                  f"<cac:Item><cbc:Name>{name}</cbc:Name></cac:Item>"
                  f"<cac:Price><cbc:PriceAmount{in_currency}>"
                  f"{number_text(Decimal(line.unit_price))}</cbc:PriceAmount></cac:Price>"
                  "</cac:InvoiceLine></cac:GoodsItem></cac:Shipment>")
    return (f"<cac:DespatchLine><cbc:ID>{number}</cbc:ID>"
            f"<cbc:DeliveredQuantity{unit}>{quantity}</cbc:DeliveredQuantity>"
            f"<cac:OrderLineReference><cbc:LineID>{number}</cbc:LineID></cac:OrderLineReference>"
            f"<cac:Item><cbc:Name>{name}</cbc:Name>{identifications(line)}</cac:Item>"
            f"{priced}</cac:DespatchLine>")


def identifications(line: DespatchLine) -> str:
    """The goods' HKS künye or IDIS label number, when a profile needs one (the line's Item
    holds them after its name)."""
    found = ""
    for field in ("kunye_no", "etiket_no"):
        value = getattr(line, field)
        scheme = IDENTIFIERS[field].scheme
        if value is not None and scheme is not None:
            found += cac("AdditionalItemIdentification", cbc("ID", value, schemeID=scheme))
    return found


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
    return xml.document("DespatchAdvice", NSMAP, (
        header(message, number=number, uuid=uuid, local=local),
        references(message.despatch),
        supplier_parts(message, issuer),
        parties.customer(message.customer, tag="DeliveryCustomerParty"),
        shipment(message, issuer, amounts),
        *[despatch_line(number_of_line, line, amount, currency)
          for number_of_line, (line, amount) in enumerate(zip(message.lines, amounts,
                                                              strict=True), 1)]))
