"""The dispatch note's message (e-İrsaliye, ``"document": "despatch"``): its parts, its field
rules, and the rules across fields that GİB's schematron holds a ``DespatchAdvice`` to.

Everything here is checked by the parser, before any number: a dispatch note with no driver and
no carrier, a driver without a plate, a plate or a postal zone GİB's patterns refuse, a
``MATBUDAN`` note without the paper note it registers, an ``HKSIRSALIYE`` line without its
künye number, an ``IDISIRSALIYE`` note without its shipment or label numbers, a TCKN whose check
digits are wrong — each refused with a one-line reason naming the field. What needs the tenant's
issuer profile (the customer's tax office or person, known unit codes) is the document's check
(:func:`gapless.documents.check_despatch_inputs`).

GİB's lists (profiles, type codes, plate and trailer schemes, the identifiers' patterns) are
data: ``despatch.toml`` beside this module, read once at import.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import time
from importlib.resources import files
from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator
from stdnum.exceptions import ValidationError as StdnumError
from stdnum.tr import tckimlik

from gapless.message.fields import (
    MAX_LINES,
    Currency,
    Description,
    DespatchDocument,
    DocumentNumber,
    InvoiceId,
    IssueDate,
    Name,
    Note,
    OptionalSeriesCode,
    Priority,
    Quantity,
    Rule,
    Tenant,
    UnitCode,
    UnitPrice,
    _choice_rule,
    _pattern_rule,
    _string,
    located,
    rule_error,
)
from gapless.message.model import Address, Carrier, Customer, Message, _Part

_LISTS = tomllib.loads(files("gapless.message").joinpath("despatch.toml").read_text("utf-8"))


@dataclass(frozen=True)
class Code:
    """A value of one of GİB's lists, and the parts of the message it needs."""

    name: str
    needs: frozenset[str]


@dataclass(frozen=True)
class PlateScheme:
    """A LicensePlateID scheme: the pattern its plates match and its trailers' scheme."""

    name: str
    pattern: re.Pattern[str]
    trailer: str
    description: str


@dataclass(frozen=True)
class Identifier:
    """An identifier GİB holds to a pattern, and the schemeID it is written under."""

    pattern: re.Pattern[str]
    scheme: str | None
    description: str


def _codes(table: str) -> dict[str, Code]:
    return {name: Code(name, frozenset(rule["needs"]))
            for name, rule in _LISTS[table]["codes"].items()}


#: DespatchAdviceTypeCode: what each needs; the default first.
DESPATCH_TYPES: dict[str, Code] = _codes("types")
DEFAULT_TYPE: str = _LISTS["types"]["default"]
#: ProfileID of a dispatch note: what each needs; the default first.
DESPATCH_PROFILES: dict[str, Code] = _codes("profiles")
DEFAULT_PROFILE: str = _LISTS["profiles"]["default"]
PLATE_SCHEMES: dict[str, PlateScheme] = {
    name: PlateScheme(name, re.compile(rule["pattern"]), rule["trailer"], rule["description"])
    for name, rule in _LISTS["plate_schemes"]["codes"].items()}
DEFAULT_PLATE_SCHEME: str = _LISTS["plate_schemes"]["default"]
IDENTIFIERS: dict[str, Identifier] = {
    name: Identifier(re.compile(rule["pattern"]), rule.get("scheme"), rule["description"])
    for name, rule in _LISTS["identifiers"].items()}
#: GİB's inbox for dispatch notes to receivers that are not e-İrsaliye users.
GIB_DESPATCH_BOX = "urn:mail:irsaliyepk@gib.gov.tr"
MAX_DRIVERS = 16
MAX_TRAILERS = 8

_PLATE_RE = re.compile(r"[A-Z0-9_-]{1,32}")
_TIME_RE = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")


def _identifier(name: str) -> Rule:
    rule = IDENTIFIERS[name]
    return _pattern_rule(rule.pattern, f"must be {rule.description}")


def _check_tckn(value: Any) -> str:
    text = _string(value)
    if not re.fullmatch(r"[0-9]{11}", text):
        raise rule_error("must be an 11-digit TCKN, as a string")
    try:
        tckimlik.validate(text)
    except StdnumError:
        raise rule_error("an 11-digit TCKN whose check digits do not match") from None
    return text


def _check_time(value: Any) -> time:
    text = _string(value)
    if not _TIME_RE.fullmatch(text):
        raise rule_error("must be a time string HH:MM:SS")
    try:
        return time.fromisoformat(text)
    except ValueError:
        raise rule_error("is not a real time of day") from None


DespatchType = Annotated[str, _choice_rule(tuple(DESPATCH_TYPES))]
DespatchProfile = Annotated[str, _choice_rule(tuple(DESPATCH_PROFILES))]
PlateSchemeName = Annotated[str, _choice_rule(tuple(PLATE_SCHEMES))]
#: A plate's shape; its scheme's pattern is checked across fields (the scheme is another field).
Plate = Annotated[str, _pattern_rule(
    _PLATE_RE, "must be 1-32 upper-case letters, digits, '_' or '-', no spaces (e.g. 34ABC123)")]
Tckn = Annotated[str, Rule(_check_tckn)]
DespatchTime = Annotated[time, Rule(_check_time)]
SevkiyatNo = Annotated[str, _identifier("sevkiyat_no")]
KunyeNo = Annotated[str, _identifier("kunye_no")]
EtiketNo = Annotated[str, _identifier("etiket_no")]
PrintedNumber = Annotated[str, _identifier("printed_number")]


class Driver(_Part):
    """A driver of the vehicle: name and TCKN (written as the driver's NationalityID)."""

    first_name: Name
    family_name: Name
    tckn: Tckn


class Printed(_Part):
    """The paper dispatch note a ``MATBUDAN`` note registers: its number and date."""

    number: PrintedNumber
    issue_date: IssueDate


class OrderReference(_Part):
    """The buyer's order the goods are sent for."""

    number: DocumentNumber
    issue_date: IssueDate


class Despatch(_Part):
    """The shipment: when the goods leave, where they go, who carries them."""

    type: DespatchType | None = None
    printed: Printed | None = None
    profile: DespatchProfile | None = None
    sevkiyat_no: SevkiyatNo | None = None
    despatch_date: IssueDate
    despatch_time: DespatchTime
    delivery_address: Address
    drivers: list[Driver] | None = Field(default=None, min_length=1, max_length=MAX_DRIVERS)
    license_plate: Plate | None = None
    plate_scheme: PlateSchemeName | None = None
    trailer_plates: list[Plate] | None = Field(default=None, min_length=1,
                                               max_length=MAX_TRAILERS)
    carrier: Carrier | None = None
    order: OrderReference | None = None

    @property
    def type_code(self) -> str:
        """The DespatchAdviceTypeCode (``SEVK`` when the message names none)."""
        return self.type or DEFAULT_TYPE

    @property
    def profile_code(self) -> str:
        """The ProfileID (``TEMELIRSALIYE`` when the message names none)."""
        return self.profile or DEFAULT_PROFILE

    @property
    def scheme(self) -> PlateScheme:
        """The plates' scheme (``PLAKA`` when the message names none)."""
        return PLATE_SCHEMES[self.plate_scheme or DEFAULT_PLATE_SCHEME]


class DespatchLine(_Part):
    """One line of goods; a dispatch note need not carry prices."""

    description: Description
    quantity: Quantity
    unit_code: UnitCode | None = None
    unit_price: UnitPrice | None = None
    kunye_no: KunyeNo | None = None
    etiket_no: EtiketNo | None = None


class DespatchMessage(Message):
    """The contract message of a dispatch note (e-İrsaliye). Valid instances are publishable
    and storable like an invoice's, and hold to GİB's rules of the note (module docstring)."""

    #: Only a series of channel "edespatch" numbers dispatch notes.
    channels: ClassVar[frozenset[str]] = frozenset({"edespatch"})
    #: A dispatch note is a UBL-TR DespatchAdvice: its tenant needs an issuer profile.
    ubl_only: ClassVar[bool] = True

    document: DespatchDocument
    invoice_id: InvoiceId
    tenant: Tenant
    #: Absent: the tenant's default series of channel "edespatch".
    series: OptionalSeriesCode = None
    priority: Priority = None
    issue_date: IssueDate
    customer: Customer
    despatch: Despatch
    lines: list[DespatchLine] = Field(min_length=1, max_length=MAX_LINES)
    #: The currency of the lines' prices (TRY when absent).
    currency: Currency | None = None
    note: Note | None = None

    @model_validator(mode="after")
    def _gib_rules(self) -> DespatchMessage:
        _check_kind(self)
        _check_address(self.despatch.delivery_address)
        _check_carriage(self.despatch)
        return self


def _refuse(path: tuple[str | int, ...], problem: str) -> Exception:
    return located(path, problem)


def _check_kind(message: DespatchMessage) -> None:
    """The type and profile: the paper note a MATBUDAN registers, the identifiers a profile
    needs — and none it does not take."""
    despatch = message.despatch
    kind = DESPATCH_TYPES[despatch.type_code]
    if "printed" in kind.needs and despatch.printed is None:
        raise _refuse(("despatch", "printed"), f"required for a {kind.name} dispatch note (the "
                                               "paper note's number and issue_date)")
    if "printed" not in kind.needs and despatch.printed is not None:
        takes = [code.name for code in DESPATCH_TYPES.values() if "printed" in code.needs]
        raise _refuse(("despatch", "printed"), f"only for a {', '.join(takes)} dispatch note")
    profile = DESPATCH_PROFILES[despatch.profile_code]
    takes_sevkiyat = "sevkiyat_no" in profile.needs
    if takes_sevkiyat and despatch.sevkiyat_no is None:
        raise _refuse(("despatch", "sevkiyat_no"),
                      f"required for a {profile.name} dispatch note "
                      f"({IDENTIFIERS['sevkiyat_no'].description})")
    if not takes_sevkiyat and despatch.sevkiyat_no is not None:
        raise _refuse(("despatch", "sevkiyat_no"), f"only for a {_needing('sevkiyat_no')} "
                                                   "dispatch note")
    for field in ("kunye_no", "etiket_no"):
        needed = field in profile.needs
        for index, line in enumerate(message.lines):
            given = getattr(line, field) is not None
            if needed and not given:
                raise _refuse(("lines", index, field),
                              f"required on every line of a {profile.name} dispatch note "
                              f"({IDENTIFIERS[field].description})")
            if given and not needed:
                raise _refuse(("lines", index, field), f"only for a {_needing(field)} "
                                                       "dispatch note")


def _needing(field: str) -> str:
    return ", ".join(code.name for code in DESPATCH_PROFILES.values() if field in code.needs)


def _check_address(address: Address) -> None:
    """Where the goods go: GİB wants the district, the city and a Turkish postal zone."""
    for field in ("district", "city", "postal_zone"):
        if getattr(address, field) is None:
            raise _refuse(("despatch", "delivery_address", field),
                          "required for a dispatch note")
    rule = IDENTIFIERS["postal_zone"]
    assert address.postal_zone is not None
    if not rule.pattern.fullmatch(address.postal_zone):
        raise _refuse(("despatch", "delivery_address", "postal_zone"),
                      f"must be {rule.description}")


def _check_carriage(despatch: Despatch) -> None:
    """Who carries the goods: drivers with the vehicle's plate, or a carrier company; plates of
    the scheme's pattern."""
    if not despatch.drivers and despatch.carrier is None:
        raise _refuse(("despatch", "drivers"), "a dispatch note needs at least one driver (with "
                                               "license_plate) or a carrier")
    if despatch.drivers and despatch.license_plate is None:
        raise _refuse(("despatch", "license_plate"), "required with drivers (the vehicle's "
                                                     "plate)")
    scheme = despatch.scheme
    if despatch.license_plate is not None and not scheme.pattern.fullmatch(
            despatch.license_plate):
        raise _refuse(("despatch", "license_plate"), f"must be {scheme.description} "
                                                     f"({scheme.name})")
    for index, plate in enumerate(despatch.trailer_plates or ()):
        if not scheme.pattern.fullmatch(plate):
            raise _refuse(("despatch", "trailer_plates", index),
                          f"must be {scheme.description} ({scheme.trailer})")
    if despatch.trailer_plates and despatch.license_plate is None:
        raise _refuse(("despatch", "license_plate"), "required with trailer_plates")
    if despatch.carrier is not None and len(despatch.carrier.tax_id) == 11:
        try:
            tckimlik.validate(despatch.carrier.tax_id)
        except StdnumError:
            raise _refuse(("despatch", "carrier", "tax_id"), "an 11-digit TCKN whose check "
                                                             "digits do not match") from None
