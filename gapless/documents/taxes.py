"""Taxes and totals of a UBL-TR document: VAT (cac:TaxTotal) with the exemption reason a zero VAT
needs, withholding (cac:WithholdingTaxTotal), and the monetary totals — each rendered from
:func:`gapless.documents.amounts.totals`, never computed here."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import Decimal

from gapless.documents.amounts import TaxGroup, Totals, Withheld, amount_text, number_text
from gapless.documents.codes import EXEMPTION_CODES, VAT_CODE, VAT_NAME, WITHHOLDING_CODES
from gapless.documents.xml import Element, cac, cbc, written


def _tax_scheme(category: Element, name: str, code: str) -> None:
    category.append(_written_scheme(name, code))


@functools.cache  # bounded: the names and codes of GİB's tables (VAT, the withholding codes)
def _written_scheme(name: str, code: str) -> str:
    """A TaxScheme as written: the same in every tax category of its tax."""

    def make(holder: Element) -> None:
        scheme = cac(holder, "TaxScheme")
        cbc(scheme, "Name", name)
        cbc(scheme, "TaxTypeCode", code)
    return written(make)[0]


def vat_total(parent: Element, currency: str, groups: Iterable[TaxGroup],
              reasons: Mapping[str, str]) -> None:
    """A TaxTotal of KDV subtotals. A zero VAT carries its exemption code and reason (the
    message's text for the code, else GİB's name of it)."""
    groups = list(groups)
    total = cac(parent, "TaxTotal")
    cbc(total, "TaxAmount", amount_text(sum((g.tax for g in groups), Decimal(0))),
        currencyID=currency)
    for group in groups:
        subtotal = cac(total, "TaxSubtotal")
        cbc(subtotal, "TaxableAmount", amount_text(group.taxable), currencyID=currency)
        cbc(subtotal, "TaxAmount", amount_text(group.tax), currencyID=currency)
        cbc(subtotal, "Percent", number_text(group.rate))
        category = cac(subtotal, "TaxCategory")
        if group.exemption is not None:
            cbc(category, "TaxExemptionReasonCode", group.exemption)
            cbc(category, "TaxExemptionReason",
                reasons.get(group.exemption) or EXEMPTION_CODES[group.exemption].name)
        _tax_scheme(category, VAT_NAME, VAT_CODE)


def withholding_total(parent: Element, currency: str, withheld: Iterable[Withheld]) -> None:
    """A WithholdingTaxTotal: per code, the VAT it applies to, the amount withheld and the
    code's percent."""
    withheld = list(withheld)
    total = cac(parent, "WithholdingTaxTotal")
    cbc(total, "TaxAmount", amount_text(sum((w.amount for w in withheld), Decimal(0))),
        currencyID=currency)
    for item in withheld:
        subtotal = cac(total, "TaxSubtotal")
        cbc(subtotal, "TaxableAmount", amount_text(item.base), currencyID=currency)
        cbc(subtotal, "TaxAmount", amount_text(item.amount), currencyID=currency)
        cbc(subtotal, "Percent", number_text(item.percent))
        _tax_scheme(cac(subtotal, "TaxCategory"), WITHHOLDING_CODES[item.code].name, item.code)


def monetary_total(root: Element, currency: str, amounts: Totals) -> None:
    """LegalMonetaryTotal, as Turkish invoices show it: goods and services before discounts
    (LineExtensionAmount), the discounts (AllowanceTotalAmount), the VAT base, with VAT, and the
    amount payable after withholding."""
    total = cac(root, "LegalMonetaryTotal")
    for name, value in (("LineExtensionAmount", amounts.line_extension),
                        ("TaxExclusiveAmount", amounts.tax_exclusive),
                        ("TaxInclusiveAmount", amounts.tax_inclusive),
                        ("AllowanceTotalAmount", amounts.allowance),
                        ("PayableAmount", amounts.payable)):
        cbc(total, name, amount_text(value), currencyID=currency)
