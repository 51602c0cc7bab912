"""Before a number is sealed: can this message make a UBL-TR document GİB accepts?

:func:`check_ubl_inputs` raises :class:`~gapless.message.InvalidMessage` with a one-line reason
naming the field (never a tax id); the worker dead-letters the message and nothing is reserved.
What a type or profile allows is looked up in GİB's code lists and ``kinds.toml``
(:mod:`gapless.documents.codes`), not spelled out here.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from gapless.documents.amounts import (
    LineAmounts,
    Totals,
    amount_text,
    line_amounts,
    number_text,
    totals,
)
from gapless.documents.codes import (
    CURRENCY_CODES,
    EXEMPTION_CODES,
    INCOTERMS,
    PROFILE_RULES,
    TRANSPORT_MODES,
    TYPE_RULES,
    UNIT_CODES,
    WITHHOLDING_CODES,
    ProfileRule,
    TypeRule,
)
from gapless.documents.parties import VKN_RE, Issuer, valid_tckn
from gapless.message import (
    PROFILES,
    Address,
    Customer,
    InvalidMessage,
    InvoiceMessage,
    Line,
    Message,
)
from gapless.message.fields import GIB_NUMBER_RE

#: VAT (KDV) rates a document may carry: the current ones, and 0 with an exemption reason
#: (8 and 18 are gone since July 2023).
VAT_RATES = frozenset({Decimal(0), Decimal(1), Decimal(10), Decimal(20)})
#: Amounts have at most 15 digits before the point in a GİB document.
MAX_AMOUNT = Decimal(10) ** 15
#: The exemption code whose lines need a GTİP and the buyer's DİB line code on every line.
DIIB_CODE = "702"


def is_gib_number(number: str) -> bool:
    """Whether ``number`` is a GİB e-invoice number, e.g. ``ABC2026000000001``."""
    return GIB_NUMBER_RE.fullmatch(number) is not None


def _refuse(path: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"{path}: {problem}")


def _listing(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def _address(path: str, address: Address | None, *, country: bool = False) -> None:
    """An address a UBL-TR party needs: at least a district and a city (and a country)."""
    if address is None:
        raise _refuse(path, "required for a UBL-TR document (at least district and city)")
    needed = ("district", "city", "country") if country else ("district", "city")
    for field in needed:
        if getattr(address, field) is None:
            raise _refuse(f"{path}.{field}", "required for a UBL-TR document")


def check_customer(customer: Customer, *, abroad: bool = False) -> None:
    """The buyer: a company (VKN) with its tax office, or a person (TCKN, check digits right)
    with first and family name; either with an address that has a district and a city. An
    export's buyer is ``abroad``: a name and an address with its country."""
    if abroad:
        _address("customer.address", customer.address, country=True)
        return
    if len(customer.tax_id) == 11:
        if not valid_tckn(customer.tax_id):
            raise _refuse("customer.tax_id", "an 11-digit TCKN whose check digits do not match")
        if customer.person is None:
            raise _refuse("customer.person", "first_name and family_name are required for an "
                                             "11-digit TCKN customer in a UBL-TR document")
    elif not VKN_RE.fullmatch(customer.tax_id):  # pragma: no cover - the message checks digits
        raise _refuse("customer.tax_id", "must be a 10-digit VKN or an 11-digit TCKN")
    elif customer.tax_office is None:
        raise _refuse("customer.tax_office", "required for a company (10-digit VKN) customer "
                                             "in a UBL-TR document")
    _address("customer.address", customer.address)


def _check_kind(message: InvoiceMessage) -> tuple[TypeRule, ProfileRule]:
    """The type/profile combination GİB allows, and the parts the profile needs or refuses."""
    profile_name = message.profile or PROFILES[0]
    kind, profile = TYPE_RULES[message.invoice_type], PROFILE_RULES[profile_name]
    if kind.name not in profile.types:
        allowed = [name for name, rule in PROFILE_RULES.items() if kind.name in rule.types]
        raise _refuse("type", f"a {kind.name} invoice is not allowed under the {profile_name} "
                              f"profile (GİB allows it under {', '.join(allowed)})")
    parts = {"export": message.export, "payment": message.payment}
    for part in sorted(profile.needs):
        if parts[part] is None:
            raise _refuse(part, f"required for a {profile_name} document")
    if message.export is not None and "export" not in profile.needs:
        raise _refuse("export", "only for an IHRACAT (export) document")
    if message.earsiv is not None and not profile.earsiv:
        if message.earsiv.is_despatch:
            # Only an e-Arşiv invoice may stand in for the dispatch note; an e-Fatura's goods
            # travel with an e-İrsaliye, which the invoice names in despatch_references.
            raise _refuse("earsiv.is_despatch", f"only for an invoice that goes e-Arşiv "
                                                f"(EARSIVFATURA), not a {profile_name} one")
        raise _refuse("earsiv", "only for an EARSIVFATURA (e-Arşiv) document")
    return kind, profile


def _check_known_codes(where: str, line: Line) -> None:
    code, withholding = line.vat_exemption_code, line.withholding_code
    if code is not None and code not in EXEMPTION_CODES:
        raise _refuse(f"{where}.vat_exemption_code", f"{code} is not a GİB VAT exemption code")
    if withholding is not None and withholding not in WITHHOLDING_CODES:
        raise _refuse(f"{where}.withholding_code", f"{withholding} is not a GİB withholding code")


def _check_line_codes(where: str, line: Line, kind: TypeRule, tax: Decimal) -> None:
    """A line's exemption and withholding codes (known to GİB): allowed in this type, and on a
    line whose VAT they fit."""
    code = line.vat_exemption_code
    if code is not None:
        if EXEMPTION_CODES[code].group not in kind.exemption_groups:
            raise _refuse(f"{where}.vat_exemption_code",
                          f"code {code} is not allowed in a {kind.name} invoice")
        if tax != 0:
            raise _refuse(f"{where}.vat_exemption_code",
                          f"only for a line whose VAT is zero (this line's VAT is "
                          f"{amount_text(tax)})")
    elif line.vat_exemption_reason is not None:
        raise _refuse(f"{where}.vat_exemption_reason", "only with a vat_exemption_code")
    withholding = line.withholding_code
    if withholding is None:
        if kind.withholding == "required":
            raise _refuse(f"{where}.withholding_code", f"required on every line of a "
                                                       f"{kind.name} invoice")
        if line.withholding_rate is not None:
            raise _refuse(f"{where}.withholding_rate", "only with a withholding_code")
        return
    if kind.withholding == "forbidden":
        allowed = [name for name, rule in TYPE_RULES.items() if rule.withholding != "forbidden"]
        raise _refuse(f"{where}.withholding_code",
                      f"VAT withholding is not allowed in a {kind.name} invoice (only in "
                      f"{', '.join(allowed)})")
    rule = WITHHOLDING_CODES[withholding]
    if line.withholding_rate is not None and Decimal(line.withholding_rate) != rule.percent:
        raise _refuse(f"{where}.withholding_rate",
                      f"{line.withholding_rate} disagrees with code {withholding}, whose rate is "
                      f"{number_text(rule.percent)} % (GİB's list)")
    if tax == 0:
        raise _refuse(f"{where}.withholding_code", "withholding needs VAT on the line (its VAT "
                                                   "is zero)")


def _check_lines(message: InvoiceMessage, kind: TypeRule,
                 profile: ProfileRule) -> tuple[LineAmounts, ...]:
    """Check every line; their amounts (for the document's totals)."""
    diib = any(line.vat_exemption_code == DIIB_CODE for line in message.lines)
    computed: list[LineAmounts] = []
    for index, line in enumerate(message.lines):
        where = f"lines.{index}"
        if line.unit_code is not None and line.unit_code not in UNIT_CODES:
            raise _refuse(f"{where}.unit_code", "not a unit code GİB accepts (UN/ECE Rec. 20)")
        if line.vat_rate_value not in VAT_RATES:
            raise _refuse(f"{where}.vat_rate", "must be 0, 1, 10 or 20 in a UBL-TR document")
        _check_known_codes(where, line)
        amounts = line_amounts(line)
        computed.append(amounts)
        if amounts.discount > amounts.gross:
            raise _refuse(f"{where}.discount", f"{amount_text(amounts.discount)} is more than "
                                               f"the line's {amount_text(amounts.gross)}")
        if amounts.gross >= MAX_AMOUNT:
            raise _refuse(where, "the line amount has more than 15 digits before the point")
        _check_line_codes(where, line, kind, amounts.tax)
        if ("export" in profile.needs or diib) and line.gtip is None:
            reason = "an IHRACAT document" if "export" in profile.needs else \
                f"an IHRACKAYITLI invoice with exemption code {DIIB_CODE}"
            raise _refuse(f"{where}.gtip", f"required on every line of {reason}")
        if diib and line.dib_line_code is None:
            raise _refuse(f"{where}.dib_line_code", f"required on every line of an IHRACKAYITLI "
                                                    f"invoice with exemption code {DIIB_CODE}")
    if kind.requires_group is not None and not any(
            line.vat_exemption_code is not None
            and EXEMPTION_CODES[line.vat_exemption_code].group == kind.requires_group
            for line in message.lines):
        examples = sorted(c.code for c in EXEMPTION_CODES.values()
                          if c.group == kind.requires_group)[:3]
        raise _refuse("lines", f"a {kind.name} invoice needs a zero-VAT line with an exemption "
                               f"code of its kind (e.g. {', '.join(examples)})")
    return tuple(computed)


def _check_returns(message: InvoiceMessage, kind: TypeRule) -> None:
    """A return names the invoices it returns: GİB numbers, dated no later than the return."""
    references = message.billing_reference or []
    if not kind.returns:
        if references:
            returns = [name for name, rule in TYPE_RULES.items() if rule.returns]
            raise _refuse("billing_reference", f"only for a return ({', '.join(returns)})")
        return
    if not references:
        raise _refuse("billing_reference", f"a {kind.name} invoice must name the invoices it "
                                           "returns (number and issue_date)")
    seen: set[str] = set()
    for index, reference in enumerate(references):
        where = f"billing_reference.{index}"
        if not is_gib_number(reference.number):
            raise _refuse(f"{where}.number", "not a GİB invoice number (3 characters, the year, "
                                             "9 digits, e.g. ABC2026000000001)")
        if reference.number in seen:
            raise _refuse(f"{where}.number", "names the same invoice twice")
        seen.add(reference.number)
        if reference.issue_date > message.issue_date:
            raise _refuse(f"{where}.issue_date", f"{reference.issue_date} is after the return's "
                                                 f"issue_date {message.issue_date}")


def references_date_problem(message: Message, today: date, tz: str) -> str | None:
    """Why a dispatch note the invoice bills cannot be billed today (None: every one can): one
    dated after ``today``, the day of the check in the series' time zone ``tz``. The invoice is
    dated the day of its seal, and a dispatch note is issued before the invoice that bills it.

    Depends on the day, so it is a check before the seal (the worker's and the API's:
    :func:`gapless.issuing.admission.numbering_problem`), not a rule of the stored message that
    a later rendering would check again.
    """
    if not isinstance(message, InvoiceMessage):
        return None
    for index, reference in enumerate(message.despatch_references or ()):
        if reference.issue_date > today:
            return (f"despatch_references.{index}.issue_date: {reference.issue_date} is after "
                    f"today ({today} in {tz}); a dispatch note is issued before the invoice "
                    "that bills it")
    return None


def _check_parts(message: InvoiceMessage) -> None:
    """The shapes of the export and e-Arşiv parts that GİB's code lists decide."""
    if message.export is not None:
        if message.export.incoterms not in INCOTERMS:
            raise _refuse("export.incoterms", f"must be one of {_listing(INCOTERMS)}")
        if message.export.transport_mode not in TRANSPORT_MODES:  # pragma: no cover - 1 digit
            raise _refuse("export.transport_mode", "not a transport mode GİB accepts")
        _address("export.delivery_address", message.export.delivery_address, country=True)
    if message.payment is not None and not message.payment.iban.startswith("TR"):
        raise _refuse("payment.iban", "must be a Turkish IBAN (TR…)")
    sale = message.earsiv.internet_sale if message.earsiv is not None else None
    if sale is not None and sale.carrier is not None:
        carrier = sale.carrier.tax_id
        if len(carrier) == 11 and not valid_tckn(carrier):
            raise _refuse("earsiv.internet_sale.carrier.tax_id", "an 11-digit TCKN whose check "
                                                                 "digits do not match")


def _check_money(message: InvoiceMessage, amounts: Totals) -> None:
    if message.currency not in CURRENCY_CODES:
        raise _refuse("currency", "not a currency GİB accepts (ISO 4217)")
    if message.currency == "TRY" and message.exchange_rate is not None:
        raise _refuse("exchange_rate", "only for a document currency other than TRY")
    if message.currency != "TRY" and message.exchange_rate is None:
        raise _refuse("exchange_rate", f"required for a {message.currency} document (TRY per "
                                       f"1 {message.currency})")
    if amounts.tax_inclusive >= MAX_AMOUNT:
        raise _refuse("lines", "the payable amount has more than 15 digits before the point")


def check_ubl_inputs(message: InvoiceMessage, issuer: Issuer) -> None:
    """Raise InvalidMessage (a one-line reason naming the field, never a tax id) when the message
    cannot make a UBL-TR document GİB accepts for this issuer; return None when it can.

    Run before a number is sealed, so a message that cannot make its document consumes nothing.
    ``issuer`` is the tenant's profile (already valid); it is an argument so that rules that
    depend on the issuer have a place. A dispatch note is refused here (its checks are
    :func:`~gapless.documents.check_despatch_inputs`; :func:`~gapless.documents.check_inputs`
    picks either): a caller that takes every message for an invoice dead-letters it, naming the
    field, instead of failing on a field an invoice has and a note has not.
    """
    if not isinstance(message, InvoiceMessage):
        raise _refuse("document", "a dispatch note is not an invoice: it is checked and "
                                  "rendered as its own document")
    kind, profile = _check_kind(message)
    check_customer(message.customer, abroad="export" in profile.needs)
    lines = _check_lines(message, kind, profile)
    _check_returns(message, kind)
    _check_parts(message)
    _check_money(message, totals(message, lines=lines))
