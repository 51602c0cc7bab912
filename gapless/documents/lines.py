"""Invoice lines of a UBL-TR document: quantity, net amount, the discount
(cac:AllowanceCharge), VAT and withholding of the line, and — for exports and export-registered
sales — the line's delivery (customs tariff number, DİB line code, INCOTERMS, transport mode)."""

from __future__ import annotations

from collections.abc import Mapping

from gapless.documents.amounts import LineAmounts, TaxGroup, Totals, amount_text, number_text
from gapless.documents.parties import message_address
from gapless.documents.taxes import vat_total, withholding_total
from gapless.documents.xml import Element, cac, cbc
from gapless.message import Export, InvoiceMessage, Line

DEFAULT_UNIT = "C62"  # "one" (a piece)
DISCOUNT_REASON = "İskonto"


def _discount(element: Element, currency: str, amounts: LineAmounts) -> None:
    charge = cac(element, "AllowanceCharge")
    cbc(charge, "ChargeIndicator", "false")
    cbc(charge, "AllowanceChargeReason", DISCOUNT_REASON)
    cbc(charge, "Amount", amount_text(amounts.discount), currencyID=currency)
    cbc(charge, "BaseAmount", amount_text(amounts.gross), currencyID=currency)


def _delivery(element: Element, number: int, line: Line, message: InvoiceMessage,
              export: Export | None) -> None:
    """The line's delivery: an export's terms and customs facts, or an export-registered sale's
    GTİP and DİB line code (GİB reads them per line)."""
    if export is None and line.gtip is None and line.dib_line_code is None:
        return
    delivery = cac(element, "Delivery")
    if export is not None:
        message_address(delivery, export.delivery_address, tag="DeliveryAddress")
        cbc(cac(delivery, "DeliveryTerms"), "ID", export.incoterms, schemeID="INCOTERMS")
    shipment = cac(delivery, "Shipment")
    cbc(shipment, "ID", str(number))
    if line.gtip is not None:
        cbc(cac(shipment, "GoodsItem"), "RequiredCustomsID", line.gtip)
    if export is not None:
        cbc(cac(shipment, "ShipmentStage"), "TransportModeCode", export.transport_mode)
    if line.dib_line_code is not None:
        declaration = cac(cac(shipment, "TransportHandlingUnit"), "CustomsDeclaration")
        cbc(declaration, "ID", str(number))
        issuer = cac(declaration, "IssuerParty")
        cbc(cac(issuer, "PartyIdentification"), "ID", line.dib_line_code,
            schemeID="ALICIDIBSATIRKOD")
        message_address(issuer, message.customer.address)


def invoice_lines(root: Element, message: InvoiceMessage, amounts: Totals,
                  reasons: Mapping[str, str], export: Export | None) -> None:
    currency = message.currency
    for number, (line, line_amounts) in enumerate(zip(message.lines, amounts.lines,
                                                      strict=True), 1):
        element = cac(root, "InvoiceLine")
        cbc(element, "ID", str(number))
        cbc(element, "InvoicedQuantity", number_text(line_amounts.quantity),
            unitCode=line.unit_code or DEFAULT_UNIT)
        cbc(element, "LineExtensionAmount", amount_text(line_amounts.net), currencyID=currency)
        _delivery(element, number, line, message, export)
        if line_amounts.discount:
            _discount(element, currency, line_amounts)
        vat_total(element, currency, [TaxGroup(line_amounts.rate, line_amounts.exemption,
                                               line_amounts.net, line_amounts.tax)], reasons)
        if line_amounts.withheld is not None:
            withholding_total(element, currency, [line_amounts.withheld])
        cbc(cac(element, "Item"), "Name", line.description)
        cbc(cac(element, "Price"), "PriceAmount", number_text(line_amounts.unit_price),
            currencyID=currency)
