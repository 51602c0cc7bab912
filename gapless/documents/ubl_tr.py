"""UBL-TR 2.1 invoices (e-Fatura / e-Arşiv), rendered with a small XML writer
(:mod:`gapless.documents.xml`) — pure functions, no I/O.

:func:`render_ubl_tr` renders a message (checked before the seal by
:func:`~gapless.documents.checks.check_ubl_inputs`) once the number, the UUID and the seal moment
are known. Rendering is deterministic: the same inputs give the same bytes in any process, which
is what lets recovery resend byte for byte what a crashed worker sent. Each part of the document
renders in a module of its own: parties (:mod:`~gapless.documents.parties`), taxes and totals
(:mod:`~gapless.documents.taxes`), lines (:mod:`~gapless.documents.lines`), references and
payment (:mod:`~gapless.documents.references`); this module puts them in the schema's order.

The document is **unsigned**: GİB requires a XAdES signature in
``ext:UBLExtensions/ext:UBLExtension/ext:ExtensionContent``, which the schema wants to be exactly
one element. gapless puts a placeholder there, ``<gapless:Unsigned/>`` in the namespace
:data:`PLACEHOLDER_NS`; whoever signs (the integrator, or an adapter holding the tenant's mali
mühür) replaces that element with the ``ds:Signature``. ``cac:Signature`` (who signs, and the
``#Signature`` reference) is filled in already.
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from lxml import etree

from gapless.documents import parties, references, xml
from gapless.documents.amounts import Totals, number_text, totals
from gapless.documents.codes import PROFILE_RULES
from gapless.documents.lines import invoice_lines
from gapless.documents.parties import Issuer
from gapless.documents.taxes import monetary_total, vat_total, withholding_total
from gapless.documents.words import amount_in_words
from gapless.documents.xml import CAC, CBC, INV, NS, NSMAP, cac, cbc, escape
from gapless.message import PROFILES, InvoiceMessage

#: The rendering's version: bumped whenever the bytes for the same inputs change (2: the
#: document kinds, discounts, withholding, exemption reasons and the amount in words; 3: the
#: dispatch notes an invoice bills and IS_DESPATCH, top-level fields a stored payload may hold
#: from before, when they were unknown ones; 4: the amount in words of amounts num2words spelled
#: wrong, e.g. 101 001 — :mod:`gapless.documents.words`).
FORMAT = "ubl-tr-2.1/4"
#: The namespace of the unsigned placeholder (see the module docstring).
PLACEHOLDER_NS = "urn:gapless:ubl-tr:unsigned"

__all__ = ["CAC", "CBC", "FORMAT", "INV", "PLACEHOLDER_NS", "render_ubl_tr", "summarize"]


#: The extension where the XAdES signature goes, holding the unsigned placeholder (module
#: docstring).
UNSIGNED = xml.element("ext:UBLExtensions", xml.element("ext:UBLExtension", xml.element(
    "ext:ExtensionContent", xml.element("gapless:Unsigned", **{"xmlns:gapless": PLACEHOLDER_NS}))))
#: What every document starts with: the extension, the UBL version and the customization.
OPENING = UNSIGNED + cbc("UBLVersionID", "2.1") + cbc("CustomizationID", "TR1.2")


def identity(number: str, uuid: uuid_module.UUID, local: datetime) -> str:
    """The document's number, copy indicator, UUID (ETTN) and the seal's date and time in the
    series' time zone: the same in an invoice and a dispatch note."""
    return (f"<cbc:ID>{escape(number)}</cbc:ID><cbc:CopyIndicator>false</cbc:CopyIndicator>"
            f"<cbc:UUID>{uuid}</cbc:UUID>"  # RFC 4122: output in lower case
            f"<cbc:IssueDate>{local.date().isoformat()}</cbc:IssueDate>"
            f"<cbc:IssueTime>{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
            "</cbc:IssueTime>")


def free_note(text: str | None) -> str:
    """The producer's note (``cbc:Note``), when it says anything."""
    return cbc("Note", text) if text and text.strip() else ""


def _header(message: InvoiceMessage, amounts: Totals, *, number: str, uuid: uuid_module.UUID,
            local: datetime) -> str:
    """Identity, dates, type, notes and currency, in the order of the UBL-TR schema: a
    template, the same shape in every invoice."""
    return (f"{OPENING}<cbc:ProfileID>{escape(message.profile or PROFILES[0])}</cbc:ProfileID>"
            f"{identity(number, uuid, local)}"
            f"<cbc:InvoiceTypeCode>{escape(message.invoice_type)}</cbc:InvoiceTypeCode>"
            f"{free_note(message.note)}"
            f"<cbc:Note>{escape(amount_in_words(amounts.payable, message.currency))}</cbc:Note>"
            f"<cbc:DocumentCurrencyCode>{escape(message.currency)}</cbc:DocumentCurrencyCode>"
            f"<cbc:LineCountNumeric>{len(message.lines)}</cbc:LineCountNumeric>")


def _exchange_rate(message: InvoiceMessage) -> str:
    if message.currency == "TRY":
        return ""
    assert message.exchange_rate is not None  # check_ubl_inputs
    return cac("PricingExchangeRate",
               cbc("SourceCurrencyCode", message.currency),
               cbc("TargetCurrencyCode", "TRY"),
               cbc("CalculationRate", number_text(Decimal(message.exchange_rate))))


def render_ubl_tr(message: InvoiceMessage, *, number: str, uuid: uuid_module.UUID,
                  sealed_at: datetime, tz: str, issuer: Issuer) -> bytes:
    """The UBL-TR 2.1 Invoice of ``message`` under its sealed ``number`` and ``uuid``, dated
    ``sealed_at`` (timezone-aware) in the series' time zone ``tz``: UTF-8 XML with a declaration.

    The message must have passed :func:`~gapless.documents.check_ubl_inputs` for ``issuer``.
    """
    if sealed_at.tzinfo is None:
        raise ValueError("sealed_at must be timezone-aware")
    local = sealed_at.astimezone(ZoneInfo(tz))
    amounts = totals(message)
    currency = message.currency
    profile = PROFILE_RULES[message.profile or PROFILES[0]]
    export = message.export if "export" in profile.needs else None
    reasons = {line.vat_exemption_code: line.vat_exemption_reason for line in reversed(
        message.lines) if line.vat_exemption_code and line.vat_exemption_reason}
    return xml.document("Invoice", NSMAP, (
        _header(message, amounts, number=number, uuid=uuid, local=local),
        references.billing_references(message),
        references.despatch_references(message),
        references.earsiv_references(message.earsiv, local.date()) if profile.earsiv else "",
        parties.issuer_parts(issuer),
        parties.customer(message.customer) if export is None
        else parties.export_parties(message.customer),
        references.shipment(message.earsiv, issuer),
        references.payment_means(message.payment, currency),
        _exchange_rate(message),
        vat_total(currency, amounts.taxes, reasons),
        withholding_total(currency, amounts.withholdings) if amounts.withholdings else "",
        monetary_total(currency, amounts),
        invoice_lines(message, amounts, reasons, export)))


# ----------------------------------------------------------------------------------- summary

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)


def summarize(body: bytes) -> dict[str, Any]:
    """A few facts of a rendered document (an invoice or a dispatch note), for people (the
    demo, ``gapless invoice show``)."""
    root = etree.fromstring(body, _PARSER)

    def text(path: str) -> str | None:
        return root.findtext(path, namespaces=NS)

    def party_name(path: str) -> str | None:
        name = text(f"{path}/cac:Party/cac:PartyName/cbc:Name")
        if name is None:
            first = text(f"{path}/cac:Party/cac:Person/cbc:FirstName")
            family = text(f"{path}/cac:Party/cac:Person/cbc:FamilyName")
            name = " ".join(part for part in (first, family) if part) or None
        return name

    if etree.QName(root).localname == "DespatchAdvice":
        despatch = "cac:Shipment/cac:Delivery/cac:Despatch/cbc:ActualDespatch"
        drivers = root.findall("cac:Shipment/cac:ShipmentStage/cac:DriverPerson", NS)
        return {"number": text("cbc:ID"), "uuid": text("cbc:UUID"),
                "issued": f"{text('cbc:IssueDate')} {text('cbc:IssueTime')}",
                "profile": text("cbc:ProfileID"), "type": text("cbc:DespatchAdviceTypeCode"),
                "supplier": party_name("cac:DespatchSupplierParty"),
                "customer": party_name("cac:DeliveryCustomerParty"),
                "despatched": f"{text(despatch + 'Date')} {text(despatch + 'Time')}",
                "plate": text("cac:Shipment/cac:ShipmentStage/cac:TransportMeans/"
                              "cac:RoadTransport/cbc:LicensePlateID"),
                "drivers": str(len(drivers)) if drivers else None,
                "carrier": text("cac:Shipment/cac:Delivery/cac:CarrierParty/cac:PartyName/"
                                "cbc:Name"),
                "lines": text("cbc:LineCountNumeric")}
    currency = text("cbc:DocumentCurrencyCode")

    def money(path: str) -> str | None:
        value = text(path)
        return None if value is None else f"{value} {currency}"
    return {"number": text("cbc:ID"), "uuid": text("cbc:UUID"),
            "issued": f"{text('cbc:IssueDate')} {text('cbc:IssueTime')}",
            "profile": text("cbc:ProfileID"), "type": text("cbc:InvoiceTypeCode"),
            "supplier": party_name("cac:AccountingSupplierParty"),
            "customer": party_name("cac:BuyerCustomerParty")
            or party_name("cac:AccountingCustomerParty"),
            "returns": ", ".join(
                f"{ref.findtext('cbc:ID', namespaces=NS)} of "
                f"{ref.findtext('cbc:IssueDate', namespaces=NS)}"
                for ref in root.iterfind("cac:BillingReference/cac:InvoiceDocumentReference",
                                         NS)) or None,
            "bills": ", ".join(
                f"{ref.findtext('cbc:ID', namespaces=NS)} of "
                f"{ref.findtext('cbc:IssueDate', namespaces=NS)}"
                for ref in root.iterfind("cac:DespatchDocumentReference", NS)) or None,
            "lines": text("cbc:LineCountNumeric"),
            "discounts": money("cac:LegalMonetaryTotal/cbc:AllowanceTotalAmount"),
            "tax": money("cac:TaxTotal/cbc:TaxAmount"),
            "withheld": money("cac:WithholdingTaxTotal/cbc:TaxAmount"),
            "payable": money("cac:LegalMonetaryTotal/cbc:PayableAmount")}
