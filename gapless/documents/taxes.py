"""Taxes and totals of a UBL-TR document: VAT (cac:TaxTotal) with the exemption reason a zero VAT
needs, withholding (cac:WithholdingTaxTotal), and the monetary totals — each rendered from
:func:`gapless.documents.amounts.totals`, never computed here."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import Decimal

from gapless.documents.amounts import (
    LineAmounts,
    TaxGroup,
    Totals,
    Withheld,
    amount_text,
    number_text,
)
from gapless.documents.codes import EXEMPTION_CODES, VAT_CODE, VAT_NAME, WITHHOLDING_CODES
from gapless.documents.xml import amount, attribute, cac, cbc


@functools.cache  # bounded: the names and codes of GİB's tables (VAT, the withholding codes)
def _tax_scheme(name: str, code: str) -> str:
    """A TaxScheme as written: the same in every tax category of its tax."""
    return cac("TaxScheme", cbc("Name", name), cbc("TaxTypeCode", code))


def vat_total(currency: str, groups: Iterable[TaxGroup], reasons: Mapping[str, str]) -> str:
    """A TaxTotal of KDV subtotals. A zero VAT carries its exemption code and reason (the
    message's text for the code, else GİB's name of it)."""
    groups = list(groups)
    in_currency = attribute("currencyID", currency)
    tax = amount_text(sum((g.tax for g in groups), Decimal(0)))
    subtotals = "".join([_vat_subtotal(in_currency, amount_text(group.taxable),
                                       amount_text(group.tax), group.rate, group.exemption,
                                       reasons) for group in groups])
    return (f"<cac:TaxTotal><cbc:TaxAmount{in_currency}>{tax}</cbc:TaxAmount>{subtotals}"
            "</cac:TaxTotal>")


def line_vat_total(in_currency: str, net_text: str, amounts: LineAmounts,
                   reasons: Mapping[str, str]) -> str:
    """A line's TaxTotal: :func:`vat_total` of the line's one group (its net, as written for its
    LineExtensionAmount, and its VAT), each amount written once. ``in_currency``: the
    ``currencyID`` attribute as written (:func:`gapless.documents.xml.attribute`)."""
    tax_text = amount_text(amounts.tax)
    subtotal = _vat_subtotal(in_currency, net_text, tax_text, amounts.rate, amounts.exemption,
                             reasons)
    return (f"<cac:TaxTotal><cbc:TaxAmount{in_currency}>{tax_text}</cbc:TaxAmount>{subtotal}"
            "</cac:TaxTotal>")


def _vat_subtotal(in_currency: str, taxable_text: str, tax_text: str, rate: Decimal,
                  exemption: str | None, reasons: Mapping[str, str]) -> str:
    if exemption is None:
        category = _vat_category()
    else:
        category = cac("TaxCategory",
                       cbc("TaxExemptionReasonCode", exemption),
                       cbc("TaxExemptionReason",
                           reasons.get(exemption) or EXEMPTION_CODES[exemption].name),
                       _tax_scheme(VAT_NAME, VAT_CODE))
    return (f"<cac:TaxSubtotal><cbc:TaxableAmount{in_currency}>{taxable_text}</cbc:TaxableAmount>"
            f"<cbc:TaxAmount{in_currency}>{tax_text}</cbc:TaxAmount>"
            f"<cbc:Percent>{number_text(rate)}</cbc:Percent>{category}</cac:TaxSubtotal>")


@functools.cache
def _vat_category() -> str:
    """The TaxCategory of a VAT that is not zero: the same in every subtotal."""
    return cac("TaxCategory", _tax_scheme(VAT_NAME, VAT_CODE))


def withholding_total(currency: str, withheld: Iterable[Withheld]) -> str:
    """A WithholdingTaxTotal: per code, the VAT it applies to, the amount withheld and the
    code's percent."""
    withheld = list(withheld)
    return cac("WithholdingTaxTotal",
               amount("TaxAmount", amount_text(sum((w.amount for w in withheld), Decimal(0))),
                      currency),
               *[cac("TaxSubtotal",
                     amount("TaxableAmount", amount_text(item.base), currency),
                     amount("TaxAmount", amount_text(item.amount), currency),
                     cbc("Percent", number_text(item.percent)),
                     cac("TaxCategory",
                         _tax_scheme(WITHHOLDING_CODES[item.code].name, item.code)))
                 for item in withheld])


def monetary_total(currency: str, amounts: Totals) -> str:
    """LegalMonetaryTotal, as Turkish invoices show it: goods and services before discounts
    (LineExtensionAmount), the discounts (AllowanceTotalAmount), the VAT base, with VAT, and the
    amount payable after withholding."""
    in_currency = attribute("currencyID", currency)
    return (f"<cac:LegalMonetaryTotal>"
            f"<cbc:LineExtensionAmount{in_currency}>{amount_text(amounts.line_extension)}"
            "</cbc:LineExtensionAmount>"
            f"<cbc:TaxExclusiveAmount{in_currency}>{amount_text(amounts.tax_exclusive)}"
            "</cbc:TaxExclusiveAmount>"
            f"<cbc:TaxInclusiveAmount{in_currency}>{amount_text(amounts.tax_inclusive)}"
            "</cbc:TaxInclusiveAmount>"
            f"<cbc:AllowanceTotalAmount{in_currency}>{amount_text(amounts.allowance)}"
            "</cbc:AllowanceTotalAmount>"
            f"<cbc:PayableAmount{in_currency}>{amount_text(amounts.payable)}</cbc:PayableAmount>"
            "</cac:LegalMonetaryTotal>")
