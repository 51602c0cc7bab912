"""The amounts of a document, in ``Decimal``, under one rounding rule.

The rule: **every amount is rounded half-up to 2 places once, where it is computed** —

* a line's net amount from its quantity × unit price;
* a line's VAT from its rounded net amount × rate (shown on the line);
* each VAT rate's tax from the sum of the rounded net amounts of its lines (the document's
  TaxSubtotal, the one GİB adds up);
* every total is a plain sum of rounded parts, so the document adds up to the cent: line
  extension = Σ net amounts = tax-exclusive amount; tax = Σ per-rate taxes; tax-inclusive =
  payable = tax-exclusive + tax.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from gapless.message import InvoiceMessage

CENT = Decimal("0.01")
HUNDRED = Decimal(100)


def money(value: Decimal) -> Decimal:
    """The one rounding of gapless documents: half-up to 2 places."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class LineAmounts:
    quantity: Decimal
    unit_price: Decimal
    rate: Decimal
    net: Decimal
    tax: Decimal


@dataclass(frozen=True)
class RateTotal:
    """One VAT rate of the document: the taxable amount of its lines and its tax."""

    rate: Decimal
    taxable: Decimal
    tax: Decimal


@dataclass(frozen=True)
class Totals:
    lines: tuple[LineAmounts, ...]
    rates: tuple[RateTotal, ...]  # ascending rate
    line_extension: Decimal
    tax: Decimal
    tax_inclusive: Decimal
    payable: Decimal


def totals(message: InvoiceMessage) -> Totals:
    """Every amount of the message's document (see the module docstring for the rule)."""
    lines = []
    taxable: dict[Decimal, Decimal] = {}
    for line in message.lines:
        quantity, price, rate = line.quantity_value, line.unit_price_value, line.vat_rate_value
        net = money(quantity * price)
        lines.append(LineAmounts(quantity, price, rate, net, money(net * rate / HUNDRED)))
        taxable[rate] = taxable.get(rate, Decimal(0)) + net
    rates = tuple(RateTotal(rate, base, money(base * rate / HUNDRED))
                  for rate, base in sorted(taxable.items()))
    line_extension = sum((line.net for line in lines), Decimal(0))
    tax = sum((rate.tax for rate in rates), Decimal(0))
    inclusive = line_extension + tax
    return Totals(tuple(lines), rates, line_extension, tax, inclusive, inclusive)


def amount_text(value: Decimal) -> str:
    """A money amount as UBL writes it: plain digits, exactly 2 decimals."""
    return format(money(value), "f")


def number_text(value: Decimal) -> str:
    """A quantity, rate or price as given, in plain notation without trailing zeros (``2.50`` →
    ``2.5``, ``100`` stays ``100``)."""
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
