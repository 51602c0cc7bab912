"""References and payment of a UBL-TR document: the invoices a return returns, the dispatch
notes an invoice bills, the e-Arşiv facts (how the document is delivered; whether it travels
with the goods instead of a dispatch note; an internet sale's web site, payment and shipment),
and where the buyer pays."""

from __future__ import annotations

from datetime import date

from gapless.documents.parties import Issuer, party
from gapless.documents.xml import Element, cac, cbc
from gapless.message import EArsiv, InvoiceMessage, Payment

#: The document type code of a returned invoice's reference (schematron IADEInvioceCheck-1).
RETURNED = "IADE"
DEFAULT_SEND_TYPE = "ELEKTRONIK"
#: The ID of the IS_DESPATCH reference, which says an e-Arşiv invoice travels with the goods
#: instead of a dispatch note: the reference's presence is the fact, its ID a placeholder (as
#: integrators take it; GİB's schematron has no rule on it).
IS_DESPATCH_ID = "."
#: UN/ECE 4461 "42": payment to a bank account.
BANK_TRANSFER = "42"


def billing_references(root: Element, message: InvoiceMessage) -> None:
    """One BillingReference per returned invoice: its number and date exactly as given."""
    for reference in message.billing_reference or ():
        document = cac(cac(root, "BillingReference"), "InvoiceDocumentReference")
        cbc(document, "ID", reference.number)
        cbc(document, "IssueDate", reference.issue_date.isoformat())
        cbc(document, "DocumentTypeCode", RETURNED)


def despatch_references(root: Element, message: InvoiceMessage) -> None:
    """One DespatchDocumentReference per dispatch note the invoice bills, in the message's
    order: its number and date exactly as given."""
    for reference in message.despatch_references or ():
        document = cac(root, "DespatchDocumentReference")
        cbc(document, "ID", reference.number)
        cbc(document, "IssueDate", reference.issue_date.isoformat())


def _additional(root: Element, value: str, kind: str, issued: date) -> None:
    reference = cac(root, "AdditionalDocumentReference")
    cbc(reference, "ID", value)
    cbc(reference, "IssueDate", issued.isoformat())
    cbc(reference, "DocumentTypeCode", kind)


def earsiv_references(root: Element, earsiv: EArsiv | None, issued: date) -> None:
    """The e-Arşiv references: SEND_TYPE (ELEKTRONIK unless the message says KAGIT),
    IS_DESPATCH when the invoice travels with the goods instead of a dispatch note and, for an
    internet sale, the web site, payment method and payment date."""
    send_type = (earsiv.send_type if earsiv is not None else None) or DEFAULT_SEND_TYPE
    _additional(root, send_type, "SEND_TYPE", issued)
    if earsiv is not None and earsiv.is_despatch:
        _additional(root, IS_DESPATCH_ID, "IS_DESPATCH", issued)
    sale = earsiv.internet_sale if earsiv is not None else None
    if sale is None:
        return
    _additional(root, "true", "IS_INTERNET", issued)
    _additional(root, sale.website, "INT_WEBSITE", issued)
    _additional(root, sale.payment_method, "INT_PAYMENT_METHOD", issued)
    _additional(root, sale.payment_date.isoformat(), "INT_PAYMENTDATE", issued)


def shipment(root: Element, earsiv: EArsiv | None, issuer: Issuer) -> None:
    """An internet sale's delivery: the carrier and the shipment date."""
    sale = earsiv.internet_sale if earsiv is not None else None
    if sale is None or (sale.carrier is None and sale.shipment_date is None):
        return
    delivery = cac(root, "Delivery")
    if sale.carrier is not None:
        party(delivery, "CarrierParty", tax_id=sale.carrier.tax_id, name=sale.carrier.name,
              postal=sale.carrier.address, fallback=issuer)
    if sale.shipment_date is not None:
        cbc(cac(delivery, "Despatch"), "ActualDespatchDate", sale.shipment_date.isoformat())


def payment_means(root: Element, payment: Payment | None, currency: str) -> None:
    """Payment to the supplier's bank account (the IBAN a KAMU invoice must carry)."""
    if payment is None:
        return
    means = cac(root, "PaymentMeans")
    cbc(means, "PaymentMeansCode", BANK_TRANSFER)
    account = cac(means, "PayeeFinancialAccount")
    cbc(account, "ID", payment.iban)
    cbc(account, "CurrencyCode", currency)
