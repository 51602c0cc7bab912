"""Invoice lines of a UBL-TR document: quantity, net amount, the discount
(cac:AllowanceCharge), VAT and withholding of the line, and — for exports and export-registered
sales — the line's delivery (customs tariff number, DİB line code, INCOTERMS, transport mode)."""

from __future__ import annotations

from collections.abc import Mapping

from gapless.documents.amounts import LineAmounts, Totals, amount_text, number_text
from gapless.documents.parties import message_address
from gapless.documents.taxes import line_vat_total, withholding_total
from gapless.documents.xml import amount, attribute, cac, cbc, escape
from gapless.message import Export, InvoiceMessage, Line

DEFAULT_UNIT = "C62"  # "one" (a piece)
DISCOUNT_REASON = "İskonto"


def _discount(currency: str, amounts: LineAmounts) -> str:
    return cac("AllowanceCharge",
               cbc("ChargeIndicator", "false"),
               cbc("AllowanceChargeReason", DISCOUNT_REASON),
               amount("Amount", amount_text(amounts.discount), currency),
               amount("BaseAmount", amount_text(amounts.gross), currency))


def _delivery(number: int, line: Line, message: InvoiceMessage, export: Export | None) -> str:
    """The line's delivery: an export's terms and customs facts, or an export-registered sale's
    GTİP and DİB line code (GİB reads them per line)."""
    if export is None and line.gtip is None and line.dib_line_code is None:
        return ""
    if line.dib_line_code is None:
        declaration = ""
    else:
        declaration = cac("TransportHandlingUnit", cac(
            "CustomsDeclaration",
            cbc("ID", str(number)),
            cac("IssuerParty",
                cac("PartyIdentification",
                    cbc("ID", line.dib_line_code, schemeID="ALICIDIBSATIRKOD")),
                message_address(message.customer.address))))
    shipment = cac("Shipment",
                   cbc("ID", str(number)),
                   "" if line.gtip is None else cac("GoodsItem",
                                                    cbc("RequiredCustomsID", line.gtip)),
                   "" if export is None else cac(
                       "ShipmentStage", cbc("TransportModeCode", export.transport_mode)),
                   declaration)
    if export is None:
        return cac("Delivery", shipment)
    return cac("Delivery",
               message_address(export.delivery_address, tag="DeliveryAddress"),
               cac("DeliveryTerms", cbc("ID", export.incoterms, schemeID="INCOTERMS")),
               shipment)


def invoice_lines(message: InvoiceMessage, amounts: Totals, reasons: Mapping[str, str],
                  export: Export | None) -> str:
    currency = message.currency
    return "".join([
        _invoice_line(number, line, line_amounts, message, reasons, export, currency)
        for number, (line, line_amounts) in enumerate(zip(message.lines, amounts.lines,
                                                          strict=True), 1)])


def _invoice_line(number: int, line: Line, line_amounts: LineAmounts, message: InvoiceMessage,
                  reasons: Mapping[str, str], export: Export | None, currency: str) -> str:
    """One InvoiceLine: a template (every line has this shape), its optional parts made only
    when the line has them."""
    in_currency = attribute("currencyID", currency)
    net = amount_text(line_amounts.net)
    delivery = _delivery(number, line, message, export)
    discount = _discount(currency, line_amounts) if line_amounts.discount else ""
    withholding = "" if line_amounts.withheld is None else withholding_total(
        currency, [line_amounts.withheld])
    return (f"<cac:InvoiceLine><cbc:ID>{number}</cbc:ID>"
            f"<cbc:InvoicedQuantity{attribute('unitCode', line.unit_code or DEFAULT_UNIT)}>"
            f"{number_text(line_amounts.quantity)}</cbc:InvoicedQuantity>"
            f"<cbc:LineExtensionAmount{in_currency}>{net}</cbc:LineExtensionAmount>"
            f"{delivery}{discount}"
            f"{line_vat_total(in_currency, net, line_amounts, reasons)}{withholding}"
            f"<cac:Item><cbc:Name>{escape(line.description)}</cbc:Name></cac:Item>"
            f"<cac:Price><cbc:PriceAmount{in_currency}>{number_text(line_amounts.unit_price)}"
            "</cbc:PriceAmount></cac:Price></cac:InvoiceLine>")
