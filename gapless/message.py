"""The invoice message: the contract JSON as a typed, frozen model, and the one parser of bodies.

Every producer's body passes through :func:`parse_message` (the worker) or through
:class:`InvoiceMessage` validation (``publish_invoice``, ``gapless publish``, the API), so both
ends agree on what is valid. The parser's guarantee: whatever the bytes, it returns a valid
:class:`InvoiceMessage` or raises :class:`InvalidMessage` — never anything else — and the
reason it gives is one short line, safe to put in a dead-letter header (it names the field path
and the problem, never a tax id nor the payload).

Optional fields (a UBL-TR document needs them; a message for a tenant without an issuer profile
may omit them): ``customer.tax_office``, ``customer.address``, ``customer.person``,
``lines[].unit_code``, ``profile``, ``type``, ``note`` and ``exchange_rate``. Whether a message
has what its tenant's document needs is decided later, against the tenant's issuer profile
(:func:`gapless.documents.check_ubl_inputs`); here only their shapes are checked. A field the
producer did not send is not added to the payload.

Rules beyond the plain types, and why:

* **Money and quantities are decimal strings** (``"10.00"``), never JSON numbers: a float cannot
  carry ``0.10`` exactly, and the integrator receives the producer's digits as given. Plain
  notation only (no exponent, NaN or Infinity), bounded digits before and after the point.
* **Unknown top-level fields are kept** (producers of other document kinds add their own) and
  travel in the payload; unknown fields inside ``customer`` or a line are refused, so a typo
  there is a clear error rather than a silently dropped value.
* **Sizes are bounded**: the body (:data:`MAX_BODY_BYTES`, checked before JSON parsing), lines
  (1..1000), every text field, nesting depth and the number of extra fields. Text must be
  storable in PostgreSQL ``jsonb``: no NUL characters and no lone surrogates anywhere.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gapless.constants import MAX_PRIORITY, PRIORITIES, PRIORITY_BATCH
from gapless.errors import GaplessError
from gapless.numbering import CODE_RE, TENANT_RE

#: Largest accepted body, in bytes; larger bodies are refused before JSON parsing.
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

_ACCEPTED_CHARSETS = frozenset({"utf-8", "utf8"})
_DECIMAL_RE = re.compile(r"-?([0-9]+)(?:\.([0-9]+))?")
_TAX_ID_RE = re.compile(r"[0-9]{10,11}")
_CURRENCY_RE = re.compile(r"[A-Z]{3}")
_ISO_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_UNIT_CODE_RE = re.compile(r"[A-Z0-9]{1,4}")
#: Document profiles (GİB scenario) a message may ask for; the UBL-TR document's default is the
#: first.
PROFILES = ("TEMELFATURA", "TICARIFATURA", "EARSIVFATURA")
#: Invoice type codes gapless renders (GİB has more: each needs fields of its own first).
INVOICE_TYPES = ("SATIS",)
# Field names shown in a reason; anything else (digits that might be a tax id, odd text) is masked.
_SAFE_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,39}")


class InvalidMessage(GaplessError):
    """A message breaks the contract; it goes to ``<prefix>.dead`` with :attr:`reason`.

    ``reason`` is one line (no tax ids, no payload), e.g.
    ``lines.0.quantity: must be a decimal string greater than 0``.
    """

    def __init__(self, reason: str) -> None:
        reason = _one_line(reason)
        super().__init__(reason)
        self.reason = reason


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 1] + "…"
    return text


def _error(message: str) -> PydanticCustomError:
    # The message is used verbatim (no context), so braces in it are never interpreted.
    return PydanticCustomError("gapless", message.replace("{", "(").replace("}", ")"))


# --- field rules ----------------------------------------------------------------------------------


_BAD_TEXT_RE = re.compile("[\x00\ud800-\udfff]")


def _has_bad_text(text: str) -> bool:
    """NUL and lone surrogates cannot be stored in PostgreSQL jsonb (nor encoded as UTF-8)."""
    return _BAD_TEXT_RE.search(text) is not None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _error(f"must be a string, not {_json_type(value)}")
    if _has_bad_text(value):
        raise _error("contains a NUL character or invalid unicode")
    return value


def _check_invoice_id(value: Any) -> str:
    text = _string(value)
    if not 1 <= len(text) <= MAX_INVOICE_ID:
        raise _error(f"must be 1 to {MAX_INVOICE_ID} characters")
    if not text.isprintable() or any(char.isspace() for char in text):
        raise _error("must be printable characters without spaces or control characters")
    return text


def _check_priority(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in PRIORITIES:
        raise _error("must be \"user\" or \"batch\" (or absent)")
    return value


def _check_issue_date(value: Any) -> date:
    text = _string(value)
    if not _ISO_DATE_RE.fullmatch(text):
        raise _error("must be a date string YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise _error("is not a real calendar date") from None


def _matching(pattern: re.Pattern[str], rule: str) -> Callable[[Any], str]:
    """A string that ``pattern`` matches in full; ``rule`` says what is wanted when it doesn't."""

    def check(value: Any) -> str:
        text = _string(value)
        if not pattern.fullmatch(text):
            raise _error(rule)
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
        text = _string(value)
        if text not in allowed:
            raise _error(f"must be one of {', '.join(allowed)}")
        return text

    return check


def _text_rule(limit: int, *, multiline: bool) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = _string(value)
        if not text.strip():
            raise _error(f"must be 1 to {limit} characters, not blank")
        if len(text) > limit:
            raise _error(f"must be at most {limit} characters")
        allowed = "\n\t" if multiline else ""
        if not text.isprintable() and any(
                not char.isprintable() and char not in allowed for char in text):
            raise _error("must not contain control characters")
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
            if isinstance(value, int | float) and not isinstance(value, bool):
                raise _error("must be a decimal string such as \"10.00\", not a JSON number "
                             "(money and quantities travel as strings)")
            raise _error(f"must be a decimal string, not {_json_type(value)}")
        match = _DECIMAL_RE.fullmatch(value) if len(value) <= 64 else None
        if match is None:
            raise _error(f"must be a decimal string {bound} (digits with an optional '.' "
                         "fraction; no exponent, sign '+', spaces, NaN or Infinity)")
        whole, fraction = match.group(1), match.group(2) or ""
        if len(whole.lstrip("0")) > int_digits or len(fraction) > frac_digits:
            raise _error(f"must have at most {int_digits} digits before the point and "
                         f"{frac_digits} after it")
        number = Decimal(value)
        too_low = number < minimum if inclusive else number <= minimum
        if too_low or (maximum is not None and number > maximum) or value.startswith("-"):
            # "-0" too: a sign on a zero amount means the producer computed something odd.
            raise _error(f"must be a decimal string {bound}")
        return value

    return check


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


InvoiceId = Annotated[str, BeforeValidator(_check_invoice_id)]
Tenant = Annotated[str, BeforeValidator(_check_tenant)]
SeriesCode = Annotated[str, BeforeValidator(_check_series)]
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
#: Free text for the document (cbc:Note); as long as the body allows, blank allowed (not shown).
Note = Annotated[str, BeforeValidator(_string)]


# --- the model ------------------------------------------------------------------------------------


class _Part(BaseModel):
    """A part of the message: immutable, and no field outside the contract."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Address(_Part):
    """A postal address; a UBL-TR document needs at least the district and the city."""

    street: Name | None = None
    district: Name | None = None
    city: Name | None = None
    postal_zone: Name | None = None
    country: Name | None = None


class Person(_Part):
    """A natural person's name (a customer identified by an 11-digit TCKN)."""

    first_name: Name
    family_name: Name


class Customer(_Part):
    """The buyer. ``tax_id`` is personal data: never log it at info level nor put it in a reason."""

    tax_id: TaxId
    name: Name
    tax_office: Name | None = None
    address: Address | None = None
    person: Person | None = None


class Line(_Part):
    """One invoice line; amounts are decimal strings exactly as the producer wrote them."""

    description: Description
    quantity: Quantity
    unit_price: UnitPrice
    vat_rate: VatRate
    unit_code: UnitCode | None = None

    @property
    def quantity_value(self) -> Decimal:
        return Decimal(self.quantity)

    @property
    def unit_price_value(self) -> Decimal:
        return Decimal(self.unit_price)

    @property
    def vat_rate_value(self) -> Decimal:
        return Decimal(self.vat_rate)


class InvoiceMessage(BaseModel):
    """The contract message. Valid instances are always publishable (body within
    :data:`MAX_BODY_BYTES`) and storable as ``jsonb``.

    Build one from a dict with ``InvoiceMessage.model_validate(data)`` (raises pydantic's
    ValidationError) or :func:`validate_message` (raises :class:`InvalidMessage`), and from a body
    with :func:`parse_message`.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    invoice_id: InvoiceId
    tenant: Tenant
    series: SeriesCode
    priority: Priority = None
    issue_date: IssueDate
    currency: Currency
    customer: Customer
    lines: list[Line] = Field(min_length=1, max_length=MAX_LINES)
    profile: Profile | None = None
    type: InvoiceType | None = None
    note: Note | None = None
    exchange_rate: ExchangeRate | None = None

    @model_validator(mode="before")
    @classmethod
    def _json_shaped(cls, data: Any) -> Any:
        """Refuse non-objects, non-JSON values, deep nesting, bad text and too many extra fields.

        Runs before the field rules so that they only ever see JSON-shaped data.
        """
        if not isinstance(data, dict):
            raise _error(f"message must be a JSON object, not {_json_type(data)}")
        _check_json_value(data, (), 0)
        extras = [key for key in data if key not in cls.model_fields]
        if len(extras) > MAX_EXTRA_FIELDS:
            raise _error(f"message has {len(extras)} unknown top-level fields; at most "
                         f"{MAX_EXTRA_FIELDS} are kept")
        for key in extras:
            if not 1 <= len(key) <= MAX_EXTRA_KEY or not key.isprintable():
                raise _error(f"unknown top-level field names must be 1 to {MAX_EXTRA_KEY} "
                             "printable characters")
        return data

    @model_validator(mode="after")
    def _fits(self) -> InvoiceMessage:
        size = len(self.body())
        if size > MAX_BODY_BYTES:
            raise _error(f"message is {size} bytes as JSON; at most {MAX_BODY_BYTES} are accepted")
        return self

    def payload(self) -> dict[str, Any]:
        """The JSON-safe dict stored as the invoice payload and sent as the integrator document:
        the contract fields (amounts as the producer's strings; optional fields only when the
        producer sent them, ``priority`` only when not null) and every unknown top-level field,
        unchanged."""
        data = self.model_dump(mode="json", exclude_unset=True)
        if data.get("priority") is None:
            data.pop("priority", None)
        return data

    def body(self) -> bytes:
        """The AMQP body: the payload as compact UTF-8 JSON."""
        return json.dumps(self.payload(), ensure_ascii=False, separators=(",", ":")).encode()

    @property
    def priority_value(self) -> int:
        """The AMQP priority this message asks for (user 4, batch 1; absent means batch)."""
        return PRIORITIES[self.priority] if self.priority else PRIORITY_BATCH


def _path(prefix: str, key: str | int) -> str:
    part = str(key) if isinstance(key, int) or _SAFE_KEY_RE.fullmatch(key) else "<field>"
    return f"{prefix}.{part}" if prefix else part


def _format_path(parts: tuple[str | int, ...]) -> str:
    path = ""
    for part in parts:
        path = _path(path, part)
    return path


def _check_json_value(value: Any, parts: tuple[str | int, ...], depth: int) -> None:
    """Walk a value: JSON types only, bounded depth, text storable in jsonb.

    Depth is checked before descending, so the recursion itself is bounded by MAX_DEPTH. The
    path is formatted only when there is a reason to give (this runs on every value).
    """
    if isinstance(value, str):
        if _has_bad_text(value):
            raise _located(parts, "contains a NUL character or invalid unicode")
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise _located(parts, f"nested more than {MAX_DEPTH} levels deep")
        for key, item in value.items():
            if not isinstance(key, str):
                raise _located(parts, "object keys must be strings")
            if _has_bad_text(key):
                raise _located(parts, "a field name contains a NUL character or invalid unicode")
            _check_json_value(item, (*parts, key), depth + 1)
    elif isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            raise _located(parts, f"nested more than {MAX_DEPTH} levels deep")
        for index, item in enumerate(value):
            _check_json_value(item, (*parts, index), depth + 1)
    elif isinstance(value, bool | int) or value is None:
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _located(parts, "NaN and Infinity are not JSON")
    elif isinstance(value, Decimal):
        raise _located(parts, "must be a decimal string such as \"10.00\", not a Python Decimal")
    else:
        raise _located(parts, f"{type(value).__name__} is not a JSON value")


def _located(parts: tuple[str | int, ...], problem: str) -> PydanticCustomError:
    path = _format_path(parts)
    return _error(f"{path}: {problem}" if path else problem)


# --- parsing and reasons --------------------------------------------------------------------------

_GENERIC_REASONS = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field (extra fields are kept only at the top level)",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
}


def reason_of(error: ValidationError) -> str:
    """One line naming the first problem's field path (and how many more there are)."""
    errors = error.errors(include_url=False, include_input=False)
    if not errors:  # pragma: no cover - pydantic always reports at least one
        return "invalid message"
    first = errors[0]
    path = _format_path(tuple(first["loc"]))
    kind = first["type"]
    if kind in _GENERIC_REASONS:
        problem = _GENERIC_REASONS[kind]
    elif kind == "too_short" and path == "lines":
        problem = "must contain at least 1 line"
    elif kind == "too_long" and path == "lines":
        problem = f"must contain at most {MAX_LINES} lines"
    else:
        problem = first["msg"]
    reason = f"{path}: {problem}" if path else problem
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more)"
    return _one_line(reason)


def validate_message(data: Any) -> InvoiceMessage:
    """An :class:`InvoiceMessage` from already-decoded data (a dict, or a model).

    Raises :class:`InvalidMessage` with a one-line reason.
    """
    if isinstance(data, InvoiceMessage):
        return data
    try:
        return InvoiceMessage.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(reason_of(exc)) from None
    except RecursionError:
        # Only reachable for Python objects that nest deeper than the interpreter's stack
        # (cycles); JSON input is depth-checked before any recursion.
        raise InvalidMessage("message nests too deeply") from None


def check_content_type(content_type: str | None) -> None:
    """Accept ``application/json``, optionally with ``charset=utf-8``; raise InvalidMessage."""
    if not content_type:
        raise InvalidMessage("missing content type; must be application/json")
    mime, *params = content_type.split(";")
    if mime.strip().lower() != "application/json":
        shown = mime.strip()[:60] if mime.strip().isprintable() else "?"
        raise InvalidMessage(f"content type {shown!r} is not application/json")
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
            if charset not in _ACCEPTED_CHARSETS:
                raise InvalidMessage("charset must be utf-8")


class _DuplicateKey(ValueError):
    pass


class _NotJsonConstant(ValueError):
    pass


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key is ambiguous (parsers disagree on which value wins): refuse it.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


def decode_json(body: bytes) -> Any:
    """Strict JSON from UTF-8 bytes: no NaN/Infinity, no duplicate keys; raise InvalidMessage."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage("body is not valid UTF-8") from None
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates,
                          parse_constant=_refuse_constant)
    except _DuplicateKey:
        raise InvalidMessage("body has a duplicate field name in an object") from None
    except _NotJsonConstant:
        raise InvalidMessage("body is not valid JSON: NaN and Infinity are not allowed") from None
    except json.JSONDecodeError as exc:
        raise InvalidMessage(f"body is not valid JSON: {exc.msg} at line {exc.lineno} column "
                             f"{exc.colno}") from None
    except RecursionError:
        raise InvalidMessage(f"body nests more than {MAX_DEPTH} levels deep") from None
    except ValueError:
        # e.g. an integer literal longer than Python's int conversion limit
        raise InvalidMessage("body is not valid JSON: a number literal is too long") from None


def parse_message(body: bytes, content_type: str | None) -> InvoiceMessage:
    """The message in an AMQP delivery, or InvalidMessage with a one-line reason.

    Checks, in order: content type, size (before any parsing), UTF-8, JSON, object, the contract.
    Never raises anything but InvalidMessage, whatever ``body`` holds.
    """
    check_content_type(content_type)
    if len(body) > MAX_BODY_BYTES:
        raise InvalidMessage(f"body is {len(body)} bytes; at most {MAX_BODY_BYTES} are accepted")
    data = decode_json(body)
    if not isinstance(data, dict):
        raise InvalidMessage(f"body must be a JSON object, not {_json_type(data)}")
    return validate_message(data)


def priority_of(message_priority_property: int | None, body_priority: str | None) -> int:
    """The effective priority 0..4 of a delivery.

    The AMQP ``priority`` property rules (contract: 4 user, 1 batch; above 4 counts as 4). When
    the property is missing the message counts as batch, unless its body says ``"user"`` — the
    broker has already ordered it as low priority, but the invoice row keeps what the producer
    asked for.
    """
    if message_priority_property is None:
        return PRIORITIES.get(body_priority or "batch", PRIORITY_BATCH)
    return max(0, min(MAX_PRIORITY, int(message_priority_property)))
