"""The message's field rules: each contract field's shape as a pydantic ``Annotated`` type, and
the one exception a refused message raises (:class:`InvalidMessage`).

A rule checks a value's *shape* (a decimal string within bounds, a 3-digit code, a date); what
GİB's rules make of a value (is code 301 allowed in a SATIS?) is decided later, against the
tenant's issuer profile, by :mod:`gapless.documents`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

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
#: The longest decimal string a rule reads (a longer one is refused).
MAX_DECIMAL_TEXT = 64

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


# --- how a rule runs --------------------------------------------------------------------------

#: The labels of a rule's two ways in pydantic's error locations (see :class:`Rule`). A NUL is in
#: no field name a message can have (the message's walk refuses it first).
FAST = "\x00fast"
RULE = "\x00rule"


@dataclass(frozen=True)
class Fast:
    """What a rule accepts that pydantic-core can check alone, without calling Python: a string
    that ``pattern`` (Rust regex syntax; matched in full) matches, of at most ``max_length``
    characters, or None when ``nullable``; or a boolean (``boolean``). Always a part of what
    its rule accepts, never more: a value it refuses goes to the rule."""

    pattern: str | None = None
    max_length: int | None = None
    nullable: bool = False
    boolean: bool = False

    def schema(self) -> CoreSchema:
        if self.boolean:
            return core_schema.bool_schema(strict=True)
        assert self.pattern is not None
        schema = core_schema.str_schema(strict=True, pattern=rf"\A(?:{self.pattern})\z",
                                        max_length=self.max_length)
        return core_schema.nullable_schema(schema) if self.nullable else schema


@dataclass(frozen=True)
class Rule:
    """A field rule: ``func`` decides (a value it refuses gets its reason), and ``fast``, when
    given, accepts most valid values first in pydantic-core, so that a valid message calls no
    Python per field. A value ``fast`` refuses goes to ``func``, which accepts it or raises the
    reason the field reports; the ``fast`` way's own error is dropped
    (:func:`rule_errors`)."""

    func: Callable[[Any], Any]
    fast: Fast | None = None

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        rule = core_schema.no_info_before_validator_function(self.func, handler(source))
        if self.fast is None:
            return rule
        return core_schema.union_schema([(self.fast.schema(), FAST), (rule, RULE)],
                                        mode="left_to_right")


def rule_errors(errors: list[Any]) -> list[Any]:
    """pydantic's errors of a refused message as its rules say them: a field's ``fast`` way's
    error left out, the rule's label taken off the location."""
    result = []
    for error in errors:
        loc = error["loc"]
        if loc and loc[-1] == FAST:
            continue
        result.append({**error, "loc": loc[:-1]} if loc and loc[-1] == RULE else error)
    return result


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    """A Rust regex character class's inside: the code point ranges, as escapes."""
    return "".join(f"\\x{{{low:X}}}-\\x{{{high:X}}}" for low, high in ranges)


#: Characters a name or a description may hold that Python calls printable and not white space
#: whatever its Unicode tables' version (Latin, Cyrillic, common punctuation and currency signs;
#: tests/unit/test_field_rules.py checks every one): a text of only these needs no Python to
#: be accepted. Any other character goes to the rule.
PLAIN_TEXT = ((0x21, 0x7E), (0xA1, 0xAC), (0xAE, 0x24F), (0x400, 0x4FF), (0x2010, 0x2027),
              (0x20A0, 0x20BF), (0x2116, 0x2116), (0x2122, 0x2122))
_PLAIN = _class(PLAIN_TEXT)


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


def _pattern_rule(pattern: re.Pattern[str], rule: str) -> Rule:
    """:func:`_matching` as a field rule, its pattern also checked in pydantic-core (the
    patterns of the message's fields are ASCII classes, counts and literals, which Python's and
    Rust's engines read alike; tests/unit/test_field_rules.py compares them)."""
    return Rule(_matching(pattern, rule), Fast(pattern.pattern))


def _choice_rule(allowed: tuple[str, ...]) -> Rule:
    """:func:`_choice` as a field rule (its words are letters, digits and '/')."""
    if not all(re.fullmatch(r"[A-Za-z0-9/]+", word) for word in allowed):
        raise ValueError("a choice's words are letters, digits and '/'")
    return Rule(_choice(allowed), Fast("|".join(allowed)))


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


def _text(limit: int, *, multiline: bool) -> Rule:
    """:func:`_text_rule` as a field rule: in pydantic-core, a text of :data:`PLAIN_TEXT`
    characters and spaces (tabs and line feeds too when ``multiline``) with one that is not
    white space."""
    space = " \\t\\n" if multiline else " "
    return Rule(_text_rule(limit, multiline=multiline),
                Fast(f"[{space}]*[{_PLAIN}][{space}{_PLAIN}]*", max_length=limit))


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
        match = _DECIMAL_RE.fullmatch(value) if len(value) <= MAX_DECIMAL_TEXT else None
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


def _decimal(*, int_digits: int, frac_digits: int, positive: bool,
             hundred: bool = False) -> Rule:
    """:func:`_decimal_rule` as a field rule, with the same digits and bounds: at least 0 (above
    0 when ``positive``), at most 100 when ``hundred``; in pydantic-core, the pattern
    :func:`decimal_pattern` writes."""
    minimum, maximum = Decimal(0), Decimal(100) if hundred else None
    return Rule(_decimal_rule(minimum=minimum, inclusive=not positive, maximum=maximum,
                              int_digits=int_digits, frac_digits=frac_digits),
                Fast(decimal_pattern(int_digits, frac_digits, positive=positive,
                                     hundred=hundred), max_length=MAX_DECIMAL_TEXT))


def _counted(low: int, high: int) -> str:
    return "" if high == 0 else f"[0-9]{{{low},{high}}}"


def decimal_pattern(int_digits: int, frac_digits: int, *, positive: bool,
                    hundred: bool = False) -> str:
    """The decimal strings :func:`_decimal` accepts, as a regex both engines read alike: no
    sign, leading zeros free, at most ``int_digits`` digits after them and ``frac_digits``
    after the point; above zero (a digit other than 0) when ``positive``; at most 100 when
    ``hundred`` (then ``int_digits`` is 3)."""
    fraction = f"(?:\\.{_counted(1, frac_digits)})?"
    if hundred:
        if int_digits != 3:
            raise ValueError("a bound of 100 has 3 digits before the point")
        whole = "[1-9][0-9]?" if positive else "[0-9]{1,2}"
        options = [f"0*{whole}{fraction}", f"0*100(?:\\.0{{1,{frac_digits}}})?"]
    else:
        whole = f"[1-9]{_counted(0, int_digits - 1)}" if positive else f"[0-9]{{1,{int_digits}}}"
        options = [f"0*{whole}{fraction}"]
    if positive:
        # Below 1: a whole part of zeros, a fraction with a digit other than 0.
        options.append("0+\\.(?:" + "|".join(
            f"0{{{zeros}}}[1-9]{_counted(0, frac_digits - zeros - 1)}"
            for zeros in range(frac_digits)) + ")")
    return "|".join(options)


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


InvoiceId = Annotated[str, Rule(_check_invoice_id, Fast(
    "[\\x21-\\x7E]+", max_length=MAX_INVOICE_ID))]
#: ``document`` of a dispatch note's message (the parser chose the model by it).
DespatchDocument = Annotated[str, _choice_rule(DOCUMENTS[1:])]
Tenant = Annotated[str, Rule(_check_tenant, Fast(TENANT_RE.pattern))]
SeriesCode = Annotated[str, Rule(_check_series, Fast(CODE_RE.pattern))]
#: A series that may be omitted (routing, or the tenant's default, chooses it) but, when given,
#: is a code: an explicit null is refused like any other non-string.
OptionalSeriesCode = Annotated[str | None, Rule(_check_series, Fast(CODE_RE.pattern))]
Priority = Annotated[Literal["user", "batch"] | None, Rule(_check_priority, Fast(
    "user|batch", nullable=True))]
IssueDate = Annotated[date, Rule(_check_issue_date)]
Currency = Annotated[str, Rule(_check_currency, Fast(_CURRENCY_RE.pattern))]
TaxId = Annotated[str, Rule(_check_tax_id, Fast(_TAX_ID_RE.pattern))]
Name = Annotated[str, _text(MAX_NAME, multiline=False)]
Description = Annotated[str, _text(MAX_DESCRIPTION, multiline=True)]
Quantity = Annotated[str, _decimal(int_digits=12, frac_digits=6, positive=True)]
UnitPrice = Annotated[str, _decimal(int_digits=15, frac_digits=8, positive=False)]
VatRate = Annotated[str, _decimal(int_digits=3, frac_digits=2, positive=False, hundred=True)]
ExchangeRate = Annotated[str, _decimal(int_digits=15, frac_digits=6, positive=True)]
UnitCode = Annotated[str, Rule(_check_unit_code, Fast(_UNIT_CODE_RE.pattern))]
Profile = Annotated[str, _choice_rule(PROFILES)]
InvoiceType = Annotated[str, _choice_rule(INVOICE_TYPES)]
SendType = Annotated[str, _choice_rule(SEND_TYPES)]
PaymentMethod = Annotated[str, _choice_rule(PAYMENT_METHODS)]
#: GİB's 3-digit codes (VAT exemption, withholding); whether GİB knows one is the document's check.
Code3 = Annotated[str, _pattern_rule(_CODE3_RE, "must be a 3-digit code, e.g. \"301\"")]
#: A discount on a line: an amount of money, at most 2 decimals.
Discount = Annotated[str, _decimal(int_digits=15, frac_digits=2, positive=False)]
WithholdingRate = Annotated[str, _decimal(int_digits=3, frac_digits=2, positive=True,
                                          hundred=True)]
Gtip = Annotated[str, _pattern_rule(_GTIP_RE, "must be the 12-digit customs tariff number (GTİP)")]
DibLineCode = Annotated[str, _pattern_rule(
    _DIB_RE, "must be the 11-character DİB line code (upper-case letters and digits)")]
Incoterms = Annotated[str, _pattern_rule(
    _INCOTERMS_RE, "must be a 3-letter INCOTERMS code, e.g. FOB")]
TransportMode = Annotated[str, _pattern_rule(
    _TRANSPORT_MODE_RE, "must be a 1-digit transport mode code (UN/ECE Rec. 19), e.g. \"1\"")]
DocumentNumber = Annotated[str, _pattern_rule(
    _DOCUMENT_NUMBER_RE, "must be 1-64 letters, digits, '_', '/', '.' or '-'")]
#: A GİB e-document's number, e.g. ``IRS2026000000004`` (a dispatch note an invoice bills).
GibNumber = Annotated[str, _pattern_rule(
    GIB_NUMBER_RE, "must be a GİB number: 3 upper-case letters or digits, the year and 9 "
                   "digits (e.g. IRS2026000000004)")]
Iban = Annotated[str, Rule(_check_iban)]
#: A yes-or-no fact, a JSON boolean.
Flag = Annotated[bool, Rule(_check_flag, Fast(boolean=True))]
#: Free text for the document (cbc:Note); as long as the body allows, blank allowed (not shown).
Note = Annotated[str, Rule(_string, Fast("[^\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F\\x{FFFE}\\x{FFFF}]*"))]


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
