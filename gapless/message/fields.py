"""The message's field rules: each contract field's shape as a pydantic ``Annotated`` type, and
the one exception a refused message raises (:class:`InvalidMessage`).

A rule checks a value's *shape* (a decimal string within bounds, a 3-digit code, a date); what
GİB's rules make of a value (is code 301 allowed in a SATIS?) is decided later, against the
tenant's issuer profile, by :mod:`gapless.documents`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from gapless.constants import PRIORITIES
from gapless.errors import GaplessError
from gapless.numbers import CODE_RE, TENANT_RE

MAX_BODY_BYTES = 256 * 1024
MAX_LINES = 1000
MAX_INVOICE_ID = 128
MAX_NAME = 256
MAX_DESCRIPTION = 1000
#: Extra (unknown) top-level fields kept in the payload, and how deep any value may nest.
MAX_EXTRA_FIELDS = 64
MAX_EXTRA_KEY = 64
MAX_DEPTH = 16
#: A reason is one line of at most this many characters.
MAX_REASON = 300

_DECIMAL_RE = re.compile(r"-?([0-9]+)(?:\.([0-9]+))?")
_TAX_ID_RE = re.compile(r"[0-9]{10,11}")
_CURRENCY_RE = re.compile(r"[A-Z]{3}")
_ISO_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_UNIT_CODE_RE = re.compile(r"[A-Z0-9]{1,4}")
#: Document profiles (GİB scenario) a message may ask for; the UBL-TR document's default is the
#: first. What each allows is data: ``gapless/documents/kinds.toml``.
PROFILES = ("TEMELFATURA", "TICARIFATURA", "EARSIVFATURA", "IHRACAT", "KAMU")
#: The documents a message may be (``document``); the default is the first.
DOCUMENTS = ("invoice", "despatch")
#: Invoice type codes gapless renders; the default is the first.
INVOICE_TYPES = ("SATIS", "IADE", "TEVKIFAT", "TEVKIFATIADE", "ISTISNA", "IHRACKAYITLI",
                 "OZELMATRAH")
#: e-Arşiv delivery of the document (the SEND_TYPE reference), and an internet sale's payment
#: methods (GİB's e-Arşiv list).
SEND_TYPES = ("ELEKTRONIK", "KAGIT")
PAYMENT_METHODS = ("KREDIKARTI/BANKAKARTI", "EFT/HAVALE", "KAPIDAODEME", "ODEMEARACISI", "DIGER")
MAX_REFERENCES = 100
_CODE3_RE = re.compile(r"[0-9]{3}")
_GTIP_RE = re.compile(r"[0-9]{12}")
_DIB_RE = re.compile(r"[A-Z0-9]{11}")
_INCOTERMS_RE = re.compile(r"[A-Z]{3}")
_TRANSPORT_MODE_RE = re.compile(r"[0-9]")
_DOCUMENT_NUMBER_RE = re.compile(r"[A-Za-z0-9_/.-]{1,64}")
#: GİB's number of an e-document (an invoice, a dispatch note): 3 characters, the year (20yy),
#: 9 digits, 16 in all (schematron InvoiceIDCheck, DespatchAdviceIDCheck).
GIB_NUMBER_RE = re.compile(r"[A-Z0-9]{3}20[0-9]{2}[0-9]{9}")
_IBAN_RE = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")
#: Field names shown in a reason; anything else (digits that might be a tax id, odd text) is masked.
_SAFE_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,39}")


class InvalidMessage(GaplessError):
    """A message breaks the contract; it goes to ``<prefix>.dead`` with :attr:`reason`.

    ``reason`` is one line (no tax ids, no payload), e.g.
    ``lines.0.quantity: must be a decimal string greater than 0``.
    """

    def __init__(self, reason: str) -> None:
        reason = one_line(reason)
        super().__init__(reason)
        self.reason = reason


def one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 1] + "…"
    return text


def rule_error(message: str) -> PydanticCustomError:
    # The message is used verbatim (no context), so braces in it are never interpreted.
    return PydanticCustomError("gapless", message.replace("{", "(").replace("}", ")"))


# --- field rules ----------------------------------------------------------------------------------


#: Characters XML 1.0 cannot carry (its ``Char`` production): C0 controls but tab, line feed and
#: carriage return; surrogates (a lone one is not even UTF-8); U+FFFE and U+FFFF. NUL is among
#: them, which PostgreSQL's jsonb cannot store either.
_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


#: The first character of a text that XML 1.0 cannot carry, or None (a regex search: for a
#: caller that checks many texts and words the problem only when there is one).
find_not_xml = _NOT_XML_RE.search


def not_xml_problem(text: str) -> str | None:
    """Why ``text`` cannot go into an XML document (None: it can): the first character XML 1.0
    cannot carry, named by its code point (never the text itself)."""
    found = _NOT_XML_RE.search(text)
    if found is None:
        return None
    return f"holds a character XML cannot carry (U+{ord(found.group()):04X})"


def _str(value: Any) -> str:
    """A string, for a rule that refuses what XML cannot carry on its own: a pattern of a few
    characters, a choice among fixed words, printable text only. (A message's walk has checked
    every text already; these rules also hold where a type is used alone.)"""
    if not isinstance(value, str):
        raise rule_error(f"must be a string, not {json_type(value)}")
    return value


def _string(value: Any) -> str:
    """A string XML can carry, for free text (``note``)."""
    text = _str(value)
    problem = not_xml_problem(text)
    if problem is not None:
        raise rule_error(problem)
    return text


def _check_invoice_id(value: Any) -> str:
    text = _str(value)
    if not 1 <= len(text) <= MAX_INVOICE_ID:
        raise rule_error(f"must be 1 to {MAX_INVOICE_ID} characters")
    if not text.isprintable() or any(char.isspace() for char in text):
        raise rule_error("must be printable characters without spaces or control characters")
    return text


def _check_priority(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in PRIORITIES:
        raise rule_error("must be \"user\" or \"batch\" (or absent)")
    return value


def _check_issue_date(value: Any) -> date:
    text = _str(value)
    if not _ISO_DATE_RE.fullmatch(text):
        raise rule_error("must be a date string YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise rule_error("is not a real calendar date") from None


def _check_flag(value: Any) -> bool:
    """A JSON boolean: ``"true"``, ``1`` and the like are refused (a flag is never guessed)."""
    if not isinstance(value, bool):
        raise rule_error(f"must be true or false, not {json_type(value)}")
    return value


def _matching(pattern: re.Pattern[str], rule: str) -> Callable[[Any], str]:
    """A string that ``pattern`` matches in full; ``rule`` says what is wanted when it doesn't."""

    def check(value: Any) -> str:
        text = _str(value)
        if not pattern.fullmatch(text):
            raise rule_error(rule)
        return text

    return check


_check_tenant = _matching(
    TENANT_RE, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
_check_series = _matching(
    CODE_RE, "must be 1-32 letters, digits, '_' or '-', starting with a letter or digit")
_check_currency = _matching(_CURRENCY_RE, "must be a 3-letter upper-case ISO 4217 code, e.g. TRY")
_check_tax_id = _matching(_TAX_ID_RE, "must be a string of 10 or 11 digits")
_check_unit_code = _matching(
    _UNIT_CODE_RE,
    "must be a UN/ECE Rec. 20 unit code: 1 to 4 upper-case letters or digits, e.g. C62")


def _choice(allowed: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = _str(value)
        if text not in allowed:
            raise rule_error(f"must be one of {', '.join(allowed)}")
        return text

    return check


def _text_rule(limit: int, *, multiline: bool) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = _str(value)
        if not text.strip():
            raise rule_error(f"must be 1 to {limit} characters, not blank")
        if len(text) > limit:
            raise rule_error(f"must be at most {limit} characters")
        allowed = "\n\t" if multiline else ""
        if not text.isprintable() and any(
                not char.isprintable() and char not in allowed for char in text):
            raise rule_error("must not contain control characters")
        return text

    return check


def _decimal_rule(*, minimum: Decimal, inclusive: bool, maximum: Decimal | None,
                  int_digits: int, frac_digits: int) -> Callable[[Any], str]:
    """A plain decimal string within bounds; returned as given (the producer's digits)."""
    bound = f"greater than or equal to {minimum}" if inclusive else f"greater than {minimum}"
    if maximum is not None:
        bound = f"between {minimum} and {maximum}"

    def check(value: Any) -> str:
        if not isinstance(value, str):
            if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
                raise rule_error("must be a decimal string such as \"10.00\", not a JSON number "
                             "(money and quantities travel as strings)")
            raise rule_error(f"must be a decimal string, not {json_type(value)}")
        match = _DECIMAL_RE.fullmatch(value) if len(value) <= 64 else None
        if match is None:
            raise rule_error(f"must be a decimal string {bound} (digits with an optional '.' "
                         "fraction; no exponent, sign '+', spaces, NaN or Infinity)")
        whole, fraction = match.group(1), match.group(2) or ""
        if len(whole.lstrip("0")) > int_digits or len(fraction) > frac_digits:
            raise rule_error(f"must have at most {int_digits} digits before the point and "
                         f"{frac_digits} after it")
        number = Decimal(value)
        too_low = number < minimum if inclusive else number <= minimum
        if too_low or (maximum is not None and number > maximum) or value.startswith("-"):
            # "-0" too: a sign on a zero amount means the producer computed something odd.
            raise rule_error(f"must be a decimal string {bound}")
        return value

    return check


def _check_iban(value: Any) -> str:
    """An IBAN (ISO 13616) whose check digits are right: upper case, no spaces."""
    text = _str(value)
    if not _IBAN_RE.fullmatch(text):
        raise rule_error("must be an IBAN: country code, 2 check digits and 11-30 upper-case "
                     "letters or digits, no spaces")
    rearranged = text[4:] + text[:4]
    if int("".join(str(int(char, 36)) for char in rearranged)) % 97 != 1:
        raise rule_error("is not a valid IBAN (its check digits do not match)")
    return text


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


InvoiceId = Annotated[str, BeforeValidator(_check_invoice_id)]
#: ``document`` of a dispatch note's message (the parser chose the model by it).
DespatchDocument = Annotated[str, BeforeValidator(_choice(DOCUMENTS[1:]))]
Tenant = Annotated[str, BeforeValidator(_check_tenant)]
SeriesCode = Annotated[str, BeforeValidator(_check_series)]
#: A series that may be omitted (routing, or the tenant's default, chooses it) but, when given,
#: is a code: an explicit null is refused like any other non-string.
OptionalSeriesCode = Annotated[str | None, BeforeValidator(_check_series)]
Priority = Annotated[Literal["user", "batch"] | None, BeforeValidator(_check_priority)]
IssueDate = Annotated[date, BeforeValidator(_check_issue_date)]
Currency = Annotated[str, BeforeValidator(_check_currency)]
TaxId = Annotated[str, BeforeValidator(_check_tax_id)]
Name = Annotated[str, BeforeValidator(_text_rule(MAX_NAME, multiline=False))]
Description = Annotated[str, BeforeValidator(_text_rule(MAX_DESCRIPTION, multiline=True))]
Quantity = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=False, maximum=None, int_digits=12, frac_digits=6))]
UnitPrice = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=True, maximum=None, int_digits=15, frac_digits=8))]
VatRate = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=True, maximum=Decimal(100), int_digits=3, frac_digits=2))]
ExchangeRate = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=False, maximum=None, int_digits=15, frac_digits=6))]
UnitCode = Annotated[str, BeforeValidator(_check_unit_code)]
Profile = Annotated[str, BeforeValidator(_choice(PROFILES))]
InvoiceType = Annotated[str, BeforeValidator(_choice(INVOICE_TYPES))]
SendType = Annotated[str, BeforeValidator(_choice(SEND_TYPES))]
PaymentMethod = Annotated[str, BeforeValidator(_choice(PAYMENT_METHODS))]
#: GİB's 3-digit codes (VAT exemption, withholding); whether GİB knows one is the document's check.
Code3 = Annotated[str, BeforeValidator(_matching(
    _CODE3_RE, "must be a 3-digit code, e.g. \"301\""))]
#: A discount on a line: an amount of money, at most 2 decimals.
Discount = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=True, maximum=None, int_digits=15, frac_digits=2))]
WithholdingRate = Annotated[str, BeforeValidator(_decimal_rule(
    minimum=Decimal(0), inclusive=False, maximum=Decimal(100), int_digits=3, frac_digits=2))]
Gtip = Annotated[str, BeforeValidator(_matching(
    _GTIP_RE, "must be the 12-digit customs tariff number (GTİP)"))]
DibLineCode = Annotated[str, BeforeValidator(_matching(
    _DIB_RE, "must be the 11-character DİB line code (upper-case letters and digits)"))]
Incoterms = Annotated[str, BeforeValidator(_matching(
    _INCOTERMS_RE, "must be a 3-letter INCOTERMS code, e.g. FOB"))]
TransportMode = Annotated[str, BeforeValidator(_matching(
    _TRANSPORT_MODE_RE, "must be a 1-digit transport mode code (UN/ECE Rec. 19), e.g. \"1\""))]
DocumentNumber = Annotated[str, BeforeValidator(_matching(
    _DOCUMENT_NUMBER_RE, "must be 1-64 letters, digits, '_', '/', '.' or '-'"))]
#: A GİB e-document's number, e.g. ``IRS2026000000004`` (a dispatch note an invoice bills).
GibNumber = Annotated[str, BeforeValidator(_matching(
    GIB_NUMBER_RE, "must be a GİB number: 3 upper-case letters or digits, the year and 9 "
                   "digits (e.g. IRS2026000000004)"))]
Iban = Annotated[str, BeforeValidator(_check_iban)]
#: A yes-or-no fact, a JSON boolean.
Flag = Annotated[bool, BeforeValidator(_check_flag)]
#: Free text for the document (cbc:Note); as long as the body allows, blank allowed (not shown).
Note = Annotated[str, BeforeValidator(_string)]


def _path(prefix: str, key: str | int) -> str:
    part = str(key) if isinstance(key, int) or _SAFE_KEY_RE.fullmatch(key) else "<field>"
    return f"{prefix}.{part}" if prefix else part


def format_path(parts: tuple[str | int, ...]) -> str:
    """A field path for a reason (``lines.0.quantity``); unsafe keys are masked."""
    path = ""
    for part in parts:
        path = _path(path, part)
    return path


def located(parts: tuple[str | int, ...], problem: str) -> PydanticCustomError:
    path = format_path(parts)
    return rule_error(f"{path}: {problem}" if path else problem)
