"""The message model: the contract JSON as typed, frozen pydantic models (the parts of an invoice,
and the document kinds' fields; docs/message.md describes every field for producers)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, model_validator

from gapless.constants import PRIORITIES, PRIORITY_BATCH
from gapless.message.fields import (
    DOCUMENTS,
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_EXTRA_FIELDS,
    MAX_EXTRA_KEY,
    MAX_LINES,
    MAX_REFERENCES,
    Code3,
    Currency,
    Description,
    DibLineCode,
    Discount,
    DocumentNumber,
    ExchangeRate,
    Flag,
    GibNumber,
    Gtip,
    Iban,
    Incoterms,
    InvoiceId,
    InvoiceType,
    IssueDate,
    Name,
    Note,
    OptionalSeriesCode,
    PaymentMethod,
    Priority,
    Profile,
    Quantity,
    SendType,
    TaxId,
    Tenant,
    TransportMode,
    UnitCode,
    UnitPrice,
    VatRate,
    WithholdingRate,
    find_not_xml,
    json_type,
    located,
    not_xml_problem,
    rule_error,
)
from gapless.message.jsontext import MAX_NUMBER_TEXT, dumps, plain_length

#: The payload leaves out a ``priority`` that is null.
_NO_PRIORITY: set[str] = {"priority"}
#: The validation context of data known to hold only what the JSON walk of
#: ``Message._json_shaped`` accepts (:func:`gapless.message.parse.decode_body`).
SHAPED: dict[str, bool] = {"shaped": True}
#: :data:`SHAPED`, of a body within MAX_BODY_BYTES: the message is no longer as JSON
#: (:class:`gapless.message.parse.Decoded`), so ``Message._fits`` need not write it to know.
SHAPED_BODY: dict[str, bool] = {"shaped": True, "fits": True}


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
    #: The alias to send to: one of the recipient's e-Fatura aliases for an invoice, e-İrsaliye
    #: aliases for a dispatch note (default: its first).
    alias: Name | None = None


class Line(_Part):
    """One invoice line; amounts are decimal strings exactly as the producer wrote them."""

    description: Description
    quantity: Quantity
    unit_price: UnitPrice
    vat_rate: VatRate
    unit_code: UnitCode | None = None
    #: GİB's exemption code for a line whose VAT is zero, and its text (default: GİB's name).
    vat_exemption_code: Code3 | None = None
    vat_exemption_reason: Name | None = None
    #: GİB's withholding (tevkifat) code; the rate is the code's. ``withholding_rate``, when
    #: given, must agree with it (a producer's own idea of the rate is checked, never used).
    withholding_code: Code3 | None = None
    withholding_rate: WithholdingRate | None = None
    #: An amount taken off the line's quantity × unit price.
    discount: Discount | None = None
    gtip: Gtip | None = None
    dib_line_code: DibLineCode | None = None

    @property
    def quantity_value(self) -> Decimal:
        return Decimal(self.quantity)

    @property
    def unit_price_value(self) -> Decimal:
        return Decimal(self.unit_price)

    @property
    def vat_rate_value(self) -> Decimal:
        return Decimal(self.vat_rate)

    @property
    def discount_value(self) -> Decimal:
        return Decimal(self.discount) if self.discount is not None else Decimal(0)


class BillingReference(_Part):
    """An invoice a return (``IADE``, ``TEVKIFATIADE``) returns: its number and date, as the
    supplier issued it."""

    number: DocumentNumber
    issue_date: IssueDate


class DespatchReference(_Part):
    """A dispatch note (e-İrsaliye) the invoice bills: its GİB number and date, as it was
    issued."""

    # The date is checked against the day of the seal, before it:
    # gapless.documents.checks.references_date_problem.

    number: GibNumber
    issue_date: IssueDate


class Export(_Part):
    """Delivery terms of an export (``IHRACAT``) invoice."""

    incoterms: Incoterms
    transport_mode: TransportMode
    delivery_address: Address


class Payment(_Part):
    """Where the buyer pays (required for ``KAMU``)."""

    iban: Iban


class Carrier(_Part):
    """Who carries an internet sale's goods. ``address`` (optional) is the carrier's; without it
    the document gives the supplier's address, where the carrier takes the goods."""

    tax_id: TaxId
    name: Name
    address: Address | None = None


class InternetSale(_Part):
    """An e-Arşiv internet sale: GİB wants the web site, payment and shipment facts."""

    website: Name
    payment_method: PaymentMethod
    payment_date: IssueDate
    carrier: Carrier | None = None
    shipment_date: IssueDate | None = None


class EArsiv(_Part):
    """e-Arşiv facts: how the document reaches the buyer (default ``ELEKTRONIK``), an internet
    sale, and whether the invoice travels with the goods instead of a dispatch note."""

    send_type: SendType | None = None
    internet_sale: InternetSale | None = None
    is_despatch: Flag = False


class Message(BaseModel):
    """What every document's message shares: the checks of its JSON shape, XML text and size,
    and the small protocol the issuing flow uses whatever the document (``document``,
    ``channels``, ``payload()``, ``body()``, ``priority_value``; each kind declares
    ``invoice_id``, ``tenant``, ``series``, ``issue_date``, ``priority``, ``customer`` and
    ``lines``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    #: The series channels that may number this kind of document.
    channels: ClassVar[frozenset[str]] = frozenset()
    #: Whether the document exists only as UBL-TR (the tenant needs an issuer profile).
    ubl_only: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _json_shaped(cls, data: Any, info: ValidationInfo) -> Any:
        """Refuse non-objects, non-JSON values, deep nesting, text XML cannot carry and too many
        extra fields.

        Runs before the field rules so that they only ever see JSON-shaped data, and walks every
        value whatever its field: the one check that no text of any document kind holds a
        character its XML document could not carry (a field added later is covered too). A
        Python producer's float becomes the exact Decimal of its JSON text, the number the same
        message is when it comes as a body. Data validated with the :data:`SHAPED` context is
        known to pass the walk (the parser read it off the body's text) and is not walked.
        """
        if not isinstance(data, dict):
            raise rule_error(f"message must be a JSON object, not {json_type(data)}")
        shaped = info.context is SHAPED or info.context is SHAPED_BODY
        if not shaped and _check_json_value(data, (), 0):
            data = _exact(data)
        fields = cls.model_fields  # a class property of pydantic's: read once, not per key
        extras = [key for key in data if key not in fields]
        if len(extras) > MAX_EXTRA_FIELDS:
            raise rule_error(f"message has {len(extras)} unknown top-level fields; at most "
                         f"{MAX_EXTRA_FIELDS} are kept")
        for key in extras:
            if not 1 <= len(key) <= MAX_EXTRA_KEY or not key.isprintable():
                raise rule_error(f"unknown top-level field names must be 1 to {MAX_EXTRA_KEY} "
                             "printable characters")
        return data

    #: The body, made once (by the size check, or when first asked for).
    _body: bytes | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> Self:
        if info.context is SHAPED_BODY:
            return self
        size = len(self.body())
        if size > MAX_BODY_BYTES:
            raise rule_error(f"message is {size} bytes as JSON; at most {MAX_BODY_BYTES} are "
                             "accepted")
        return self

    def payload(self) -> dict[str, Any]:
        """The JSON-safe dict stored as the document's payload and sent as the integrator
        document: the contract fields (amounts as the producer's strings; optional fields only
        when the producer sent them, ``priority`` only when not null) and every unknown top-level
        field, unchanged (a number with a fraction as the exact ``Decimal`` it was; write the
        payload with :func:`gapless.message.jsontext.dumps`)."""
        extras = set(self.model_extra or ())
        data = self.model_dump(mode="json", exclude_unset=True, exclude=extras)
        if data.get("priority") is None:
            data.pop("priority", None)
        if extras:
            data.update(self.model_dump(mode="python", include=extras))
        return data

    def __eq__(self, other: object) -> bool:
        """Equal fields (pydantic's equality, but blind to the cached body)."""
        if not isinstance(other, Message):
            return NotImplemented
        return (type(self) is type(other) and self.__dict__ == other.__dict__
                and (self.__pydantic_extra__ or {}) == (other.__pydantic_extra__ or {}))

    #: Unhashable, as before (its lines are lists).
    __hash__ = None  # type: ignore[assignment]

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Self:
        """A copy (pydantic's), its body made anew when fields change."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy._body = None
        return copy

    def body(self) -> bytes:
        """The AMQP body: the payload as compact UTF-8 JSON, its numbers exact (made once: the
        model is frozen)."""
        # The private attribute read from pydantic's dict of them: ``self._body`` goes through
        # BaseModel.__getattr__, whose descriptor probe raises and catches an AttributeError at
        # every read (a sixth of the batch endpoint's CPU).
        private = self.__pydantic_private__
        assert private is not None  # a model with a private attribute always has the dict
        body: bytes | None = private["_body"]
        if body is None:
            if self.model_extra:
                # Unknown top-level fields are written as the payload holds them (a number
                # with a fraction as its exact digits, which pydantic would write as a string).
                body = dumps(self.payload()).encode()
            else:
                # The payload's JSON written by pydantic's serializer at once, without the dict
                # between (the same bytes: the contract fields are texts, booleans, dates,
                # nulls, lists and objects, which both write alike; tests/unit/test_message_body
                # proves it on generated messages).
                body = self.__pydantic_serializer__.to_json(
                    self, exclude_unset=True,
                    exclude=_NO_PRIORITY if getattr(self, "priority", 0) is None else None)
            private["_body"] = body
        return body

    @property
    def priority_value(self) -> int:
        """The AMQP priority this message asks for (user 4, batch 1; absent means batch)."""
        priority: str | None = getattr(self, "priority", None)
        return PRIORITIES[priority] if priority else PRIORITY_BATCH


class InvoiceMessage(Message):
    """The contract message of an invoice. Valid instances are always publishable (body within
    :data:`MAX_BODY_BYTES`) and storable as ``jsonb``.

    Build one from a dict with ``InvoiceMessage.model_validate(data)`` (raises pydantic's
    ValidationError) or :func:`validate_message` (raises :class:`InvalidMessage`), and from a body
    with :func:`parse_message`.
    """

    #: Series of channel "any" (not routed), "efatura" or "earsiv" number invoices.
    channels: ClassVar[frozenset[str]] = frozenset({"any", "efatura", "earsiv"})

    invoice_id: InvoiceId
    tenant: Tenant
    #: Absent: the tenant's default series of the channel routing chooses (or of channel "any").
    series: OptionalSeriesCode = None
    priority: Priority = None
    issue_date: IssueDate
    currency: Currency
    customer: Customer
    lines: list[Line] = Field(min_length=1, max_length=MAX_LINES)
    profile: Profile | None = None
    type: InvoiceType | None = None
    note: Note | None = None
    exchange_rate: ExchangeRate | None = None
    billing_reference: list[BillingReference] | None = Field(
        default=None, min_length=1, max_length=MAX_REFERENCES)
    #: The dispatch notes the invoice bills.
    despatch_references: list[DespatchReference] | None = Field(
        default=None, min_length=1, max_length=MAX_REFERENCES)
    export: Export | None = None
    payment: Payment | None = None
    earsiv: EArsiv | None = None

    @model_validator(mode="after")
    def _distinct_despatches(self) -> Self:
        seen: set[str] = set()
        for index, reference in enumerate(self.despatch_references or ()):
            if reference.number in seen:
                raise located(("despatch_references", index, "number"),
                              "names the same dispatch note twice")
            seen.add(reference.number)
        return self

    @property
    def document(self) -> str:
        """``"invoice"``: what the message's ``document`` says, or its default. (Not a field: a
        producer's ``"document": "invoice"`` travels in the payload as it was sent, and the
        parser has chosen this model by it.)"""
        return DOCUMENTS[0]

    @property
    def invoice_type(self) -> str:
        """The invoice type code (``SATIS`` when the message names none)."""
        return self.type or "SATIS"


#: The smallest positive int written with more than MAX_NUMBER_TEXT characters; a negative one
#: has a character fewer for its digits (its sign).
_INT_LIMIT = 10 ** MAX_NUMBER_TEXT


def _check_json_value(value: Any, parts: tuple[str | int, ...], depth: int) -> bool:
    """Walk a value: JSON types only, bounded depth, text XML (and jsonb) can carry, numbers
    that stay small when written out. True when it holds a float (a Python producer's number).

    Depth is checked before descending, so the recursion itself is bounded by MAX_DEPTH. The
    path is formatted only when there is a reason to give, and a text inside an object or array
    is checked in place rather than by a call of its own (this runs on every value of every
    message). A printable text (a value or a field name) holds nothing XML cannot carry
    (``str.isprintable``, cheaper than the search).
    """
    if isinstance(value, str):
        if not value.isprintable() and find_not_xml(value) is not None:
            raise located(parts, _problem(value))
        return False
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise located(parts, f"nested more than {MAX_DEPTH} levels deep")
        is_object = isinstance(value, dict)
        entries: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, dict) \
            else enumerate(value)
        floats = False
        for key, item in entries:
            if is_object:
                if not isinstance(key, str):
                    raise located(parts, "object keys must be strings")
                if not key.isprintable() and find_not_xml(key) is not None:
                    raise located(parts, f"a field name {_problem(key)}")
            if type(item) is str:
                if not item.isprintable() and find_not_xml(item) is not None:
                    raise located((*parts, key), _problem(item))
            else:
                floats |= _check_json_value(item, (*parts, key), depth + 1)
        return floats
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float | Decimal):
        _check_number(value, parts)
        return isinstance(value, float)
    raise located(parts, f"{type(value).__name__} is not a JSON value")


def _problem(text: str) -> str:
    problem = not_xml_problem(text)
    assert problem is not None  # called once find_not_xml found one
    return problem


def _exact(value: Any) -> Any:
    """``value`` with every float the exact Decimal of its JSON text (``repr``): what the same
    number is when the message comes as a body (parsed with Decimals), so that both paths make
    the same payload and the same bytes."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _exact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(item) for item in value]
    return value


def _check_number(value: int | float | Decimal, parts: tuple[str | int, ...]) -> None:
    """A finite number whose plain decimal text (as stored and sent) is bounded, the same rule
    whether it came as JSON text (a Decimal or an int) or from a Python producer (a float is
    the number its JSON text says)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise located(parts, "NaN and Infinity are not JSON")
        value = Decimal(repr(value))
    elif isinstance(value, Decimal) and not value.is_finite():
        raise located(parts, "NaN and Infinity are not JSON")
    if isinstance(value, int):
        # The same count as plain_length's: a number of 100 digits is 100 characters whether
        # it came as an int (1000…0) or as a Decimal (1E+99), and the sign is one more.
        too_long = (value >= _INT_LIMIT) if value >= 0 else (-value >= _INT_LIMIT // 10)
    else:
        too_long = plain_length(value) > MAX_NUMBER_TEXT
    if too_long:
        raise located(parts, f"a number written out may have at most {MAX_NUMBER_TEXT} "
                             "characters")
