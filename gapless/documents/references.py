"""References and payment of a UBL-TR document: the invoices a return returns, the dispatch
notes an invoice bills, the e-Arşiv facts (how the document is delivered; whether it travels
with the goods instead of a dispatch note; an internet sale's web site, payment and shipment),
and where the buyer pays."""

from __future__ import annotations

from datetime import date

from gapless.documents.parties import Issuer, party
from gapless.documents.xml import cac, cbc
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


def billing_references(message: InvoiceMessage) -> str:
    """One BillingReference per returned invoice: its number and date exactly as given."""
    return "".join([cac("BillingReference", cac("InvoiceDocumentReference",
                                                cbc("ID", reference.number),
                                                cbc("IssueDate", reference.issue_date.isoformat()),
                                                cbc("DocumentTypeCode", RETURNED)))
                    for reference in message.billing_reference or ()])


def despatch_references(message: InvoiceMessage) -> str:
    """One DespatchDocumentReference per dispatch note the invoice bills, in the message's
    order: its number and date exactly as given."""
    return "".join([cac("DespatchDocumentReference",
                        cbc("ID", reference.number),
                        cbc("IssueDate", reference.issue_date.isoformat()))
                    for reference in message.despatch_references or ()])


def _additional(value: str, kind: str, issued: date) -> str:
    return cac("AdditionalDocumentReference",
               cbc("ID", value),
               cbc("IssueDate", issued.isoformat()),
               cbc("DocumentTypeCode", kind))


def earsiv_references(earsiv: EArsiv | None, issued: date) -> str:
    """The e-Arşiv references: SEND_TYPE (ELEKTRONIK unless the message says KAGIT),
    IS_DESPATCH when the invoice travels with the goods instead of a dispatch note and, for an
    internet sale, the web site, payment method and payment date."""
    send_type = (earsiv.send_type if earsiv is not None else None) or DEFAULT_SEND_TYPE
    parts = [_additional(send_type, "SEND_TYPE", issued)]
    if earsiv is not None and earsiv.is_despatch:
        parts.append(_additional(IS_DESPATCH_ID, "IS_DESPATCH", issued))
    sale = earsiv.internet_sale if earsiv is not None else None
    if sale is not None:
        parts += (_additional("true", "IS_INTERNET", issued),
                  _additional(sale.website, "INT_WEBSITE", issued),
                  _additional(sale.payment_method, "INT_PAYMENT_METHOD", issued),
                  _additional(sale.payment_date.isoformat(), "INT_PAYMENTDATE", issued))
    return "".join(parts)


def shipment(earsiv: EArsiv | None, issuer: Issuer) -> str:
    """An internet sale's delivery: the carrier and the shipment date."""
    sale = earsiv.internet_sale if earsiv is not None else None
    if sale is None or (sale.carrier is None and sale.shipment_date is None):
        return ""
    carrier = sale.carrier
    return cac("Delivery",
               "" if carrier is None else party("CarrierParty", tax_id=carrier.tax_id,
                                                name=carrier.name, postal=carrier.address,
                                                fallback=issuer),
               "" if sale.shipment_date is None else cac(
                   "Despatch", cbc("ActualDespatchDate", sale.shipment_date.isoformat())))


def payment_means(payment: Payment | None, currency: str) -> str:
    """Payment to the supplier's bank account (the IBAN a KAMU invoice must carry)."""
    if payment is None:
        return ""
    return cac("PaymentMeans",
               cbc("PaymentMeansCode", BANK_TRANSFER),
               cac("PayeeFinancialAccount",
                   cbc("ID", payment.iban),
                   cbc("CurrencyCode", currency)))
