"""The amounts of a document, in ``Decimal``, under one rounding rule — computed here and nowhere
else (the checks and every renderer read :func:`totals`).

The rule: **every amount is rounded half-up to 2 places once, where it is computed**, and every
total is a plain sum of rounded parts, so the document adds up to the cent:

* a line: gross = quantity × unit price (rounded); its discount is an amount as given (2
  decimals at most); net = gross − discount; VAT = net × rate (rounded);
* each VAT group of the document (one rate, and one exemption code when its VAT is zero): tax =
  Σ net amounts of its lines × rate (rounded once, on the sum — the TaxSubtotal GİB adds up);
* withholding (tevkifat): a line withholds its own VAT × the code's percent (rounded); the
  document withholds, per code, Σ VAT of the code's lines × percent (rounded once);
* the document: line extension = Σ gross; allowances = Σ discounts; tax-exclusive = line
  extension − allowances (= Σ net); tax = Σ group taxes; tax-inclusive = tax-exclusive + tax;
  payable = tax-inclusive − withheld; the VAT the seller owes is tax − withheld.

A worked example (docs/architecture.md, "Money"): 3 × 33.335 with a 5.00 discount at 20 %,
withholding code 624 (2/10): gross 100.01 (100.005 rounds up), net 95.01, VAT 19.00 (19.002),
withheld 3.80, tax-inclusive 114.01, payable 110.21.

The arithmetic is exact and never raises: it runs in its own decimal context (:data:`EXACT`),
wide enough for every amount the message's fields allow (a product of 18 and 23 digits, summed
over 1000 lines), where Python's default context of 28 digits would round a large line's gross
before its cents are taken, or raise ``InvalidOperation`` rounding it to the cent. How large an
amount a document may carry is the checks' to say (15 digits before the point).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import NamedTuple

from gapless.documents.codes import NOT_EXEMPT_CODE, TYPE_RULES, WITHHOLDING_CODES
from gapless.message import InvoiceMessage, Line

CENT = Decimal("0.01")
HUNDRED = Decimal(100)
ZERO = Decimal(0)
#: The context of every amount: room for 100 significant digits (the largest product the
#: message allows has 41, its sum over the lines 44), so no operation here rounds but money().
EXACT = Context(prec=100, rounding=ROUND_HALF_UP, Emax=999, Emin=-999)


def money(value: Decimal) -> Decimal:
    """The one rounding of gapless documents: half-up to 2 places."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP, context=EXACT)


# The amounts are named tuples: immutable like frozen dataclasses, and made in a fifth of the
# time (a UBL-TR invoice makes a handful per line, checked before its seal and rendered after).


class Withheld(NamedTuple):
    """Withholding on a base (a VAT amount): ``amount`` = base × percent, rounded."""

    code: str
    percent: Decimal
    base: Decimal
    amount: Decimal


class LineAmounts(NamedTuple):
    quantity: Decimal
    unit_price: Decimal
    rate: Decimal
    gross: Decimal
    discount: Decimal
    net: Decimal
    tax: Decimal
    #: The exemption code shown with a zero VAT (the line's, else 351); None when VAT > 0.
    exemption: str | None
    withheld: Withheld | None


class TaxGroup(NamedTuple):
    """One VAT TaxSubtotal of the document: a rate and, for a zero VAT, its exemption code."""

    rate: Decimal
    exemption: str | None
    taxable: Decimal
    tax: Decimal


class Totals(NamedTuple):
    lines: tuple[LineAmounts, ...]
    taxes: tuple[TaxGroup, ...]  # by rate, then exemption code
    withholdings: tuple[Withheld, ...]  # document-level, by code (empty: none on the document)
    line_extension: Decimal
    allowance: Decimal
    tax_exclusive: Decimal
    tax: Decimal
    tax_inclusive: Decimal
    withheld: Decimal
    payable: Decimal

    @property
    def vat_due(self) -> Decimal:
        """The VAT the seller collects and owes: the VAT less what the buyer withholds."""
        return self.tax - self.withheld


def _withholding(code: str | None, base: Decimal) -> Withheld | None:
    if code is None:
        return None
    percent = WITHHOLDING_CODES[code].percent
    return Withheld(code, percent, base, money(base * percent / HUNDRED))


def line_amounts(line: Line) -> LineAmounts:
    """A line's amounts (see the module docstring for the rule)."""
    with localcontext(EXACT):
        return _line_amounts(line)


def _line_amounts(line: Line) -> LineAmounts:
    quantity, price, rate = line.quantity_value, line.unit_price_value, line.vat_rate_value
    gross = money(quantity * price)
    discount = line.discount_value
    net = gross - discount
    tax = money(net * rate / HUNDRED)
    exemption = (line.vat_exemption_code or NOT_EXEMPT_CODE) if tax == 0 else None
    return LineAmounts(quantity, price, rate, gross, discount, net, tax, exemption,
                       _withholding(line.withholding_code, tax))


#: The totals of the messages seen last, by identity: a message is checked before its seal and
#: rendered after it, and both need its totals. Messages are frozen, so a message's totals never
#: change; the entry keeps its message, so an id is never mistaken for a later object's.
_RECENT: dict[int, tuple[InvoiceMessage, Totals]] = {}
_RECENT_MAX = 512


def forget_totals() -> None:
    """Empty the cache of totals (benchmarks: a check measured as a worker runs it, cold)."""
    _RECENT.clear()


def totals(message: InvoiceMessage, *,
           lines: tuple[LineAmounts, ...] | None = None) -> Totals:
    """Every amount of the message's document.

    The message's codes must be known (checked before, by
    :func:`gapless.documents.check_ubl_inputs`): an unknown withholding code raises KeyError.
    ``lines``: the lines' amounts when the caller has them already (the check computes them
    line by line), in the message's order.
    """
    seen = _RECENT.get(id(message))
    if seen is not None and seen[0] is message:
        return seen[1]
    with localcontext(EXACT):
        result = _totals(message, lines)
    if len(_RECENT) >= _RECENT_MAX:
        # The oldest entry (dicts keep insertion order); another thread may be at it too.
        with contextlib.suppress(RuntimeError, StopIteration, KeyError):
            del _RECENT[next(iter(_RECENT))]
    _RECENT[id(message)] = (message, result)
    return result


def _totals(message: InvoiceMessage, lines: tuple[LineAmounts, ...] | None) -> Totals:
    if lines is None:
        lines = tuple(_line_amounts(line) for line in message.lines)
    taxable: dict[tuple[Decimal, str | None], Decimal] = defaultdict(Decimal)
    withholding_base: dict[str, Decimal] = defaultdict(Decimal)
    for line, amounts in zip(message.lines, lines, strict=True):
        taxable[(amounts.rate, line.vat_exemption_code)] += amounts.net
        if line.withholding_code is not None:
            withholding_base[line.withholding_code] += amounts.tax
    taxes = []
    for (rate, code), base in sorted(taxable.items(), key=lambda item: (item[0][0],
                                                                         item[0][1] or "")):
        tax = money(base * rate / HUNDRED)
        taxes.append(TaxGroup(rate, (code or NOT_EXEMPT_CODE) if tax == 0 else None, base, tax))
    withholdings: tuple[Withheld, ...] = ()
    if TYPE_RULES[message.invoice_type].document_withholding:
        withholdings = tuple(w for code, base in sorted(withholding_base.items())
                             if (w := _withholding(code, base)) is not None)
    line_extension = sum((line.gross for line in lines), ZERO)
    allowance = sum((line.discount for line in lines), ZERO)
    tax_exclusive = line_extension - allowance
    tax = sum((group.tax for group in taxes), ZERO)
    withheld = sum((w.amount for w in withholdings), ZERO)
    inclusive = tax_exclusive + tax
    return Totals(lines, tuple(taxes), withholdings, line_extension, allowance, tax_exclusive,
                  tax, inclusive, withheld, inclusive - withheld)


def amount_text(value: Decimal) -> str:
    """A money amount as UBL writes it: plain digits, exactly 2 decimals. (Most amounts of a
    document are rounded already, :func:`money`'s or sums of its; their text is written as it
    is, the others rounded first.)"""
    text = format(value, "f")
    if text[-3:-2] == ".":
        return text
    return format(money(value), "f")


def number_text(value: Decimal) -> str:
    """A quantity, rate or price as given, in plain notation without trailing zeros (``2.50`` →
    ``2.5``, ``100`` stays ``100``)."""
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
