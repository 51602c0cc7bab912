"""The integrator adapter interface and its error classes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gapless.errors import ConfigurationError, GaplessError
from gapless.plugins import load_factory

if TYPE_CHECKING:
    from gapless.settings import Settings


#: A UBL-TR 2.1 document (the tenant has an issuer profile).
MEDIA_XML = "application/xml"
#: The producer's message as JSON (the tenant has no issuer profile).
MEDIA_JSON = "application/json"


@dataclass(frozen=True)
class Document:
    """What is sent: an invoice's document under its pinned number and UUID (ETTN).

    ``body`` is exactly the bytes the integrator receives (UBL-TR XML, or the message's canonical
    JSON); every send and resend of the invoice sends the same bytes. ``format`` names how they
    were rendered (``ubl-tr-…`` or ``json/…``). ``stored``: the bytes are already recorded in
    ``invoice_documents`` (a resend), so an outcome need not store them again.
    """

    tenant: str
    number: str
    invoice_id: str
    uuid: str
    body: bytes
    media_type: str
    format: str
    sha256: str
    stored: bool = False
    #: The channel the document goes through (``efatura`` / ``earsiv``; None: the integrator's
    #: own choice, a document of a series without routing) and the e-Fatura recipient's alias.
    channel: str | None = None
    alias: str | None = None

    @classmethod
    def of(cls, *, tenant: str, number: str, invoice_id: str, uuid: str, body: bytes,
           media_type: str, format: str, stored: bool = False, channel: str | None = None,
           alias: str | None = None) -> Document:
        """A document with the SHA-256 of its bytes."""
        return cls(tenant, number, invoice_id, uuid, body, media_type, format,
                   hashlib.sha256(body).hexdigest(), stored, channel, alias)


@dataclass(frozen=True)
class Recipient:
    """The integrator's answer to "is this tax id an e-Fatura user?": registered users get
    e-Fatura documents at one of their invoice ``aliases`` (the first is the default); anyone
    else gets e-Arşiv."""

    tax_id: str
    registered: bool
    aliases: tuple[str, ...] = ()
    #: Whether it is an e-İrsaliye user, and its dispatch-note aliases (separate from its
    #: e-Fatura ones; the first is the default). Anyone else gets dispatch notes at GİB's box.
    despatch_registered: bool = False
    despatch_aliases: tuple[str, ...] = ()


#: A receipt's field the integrator did not tell (e.g. a lookup by UUID that answers no number).
UNKNOWN = "<unknown at the integrator>"


@dataclass(frozen=True)
class Receipt:
    """The integrator's word that ``number`` is accepted, as ``invoice_id``, under ``ref``
    (with the document's UUID when the integrator tells it)."""

    tenant: str
    number: str
    invoice_id: str
    ref: str
    #: Not part of equality: a lookup by number does not say it, a duplicate answer may.
    uuid: str | None = field(default=None, compare=False)


class GibState(StrEnum):
    """gapless's word for a document's state at GİB after the integrator accepted it."""

    ACCEPTED = "accepted"  # GİB accepted it: final
    REFUSED = "refused"    # GİB refused it: final (a new invoice or a return, never a resend)
    PENDING = "pending"    # no final verdict yet (e-Arşiv: until GİB's nightly report)


@dataclass(frozen=True)
class GibStatus:
    """A document's state at GİB as the integrator reports it: ``final`` once GİB accepted or
    refused it (it will not change), ``accepted`` True/False when final and None while pending;
    ``detail`` is the integrator's one-line description (no tax ids); ``channel`` is where the
    integrator found it (``efatura`` / ``earsiv``), when it says."""

    state: GibState
    detail: str
    channel: str | None = None
    #: The receiver's answer to the document, once it answered (None: not yet, or not told).
    answer: Answer | None = None

    @property
    def final(self) -> bool:
        return self.state is not GibState.PENDING

    @property
    def accepted(self) -> bool | None:
        return None if self.state is GibState.PENDING else self.state is GibState.ACCEPTED


class AnswerCode(StrEnum):
    """gapless's word for a receiver's answer: a dispatch note's (ReceiptAdvice) or a
    ``TICARIFATURA`` invoice's (ApplicationResponse, KABUL or RED only)."""

    KABUL = "KABUL"            # accepted as sent
    RED = "RED"                # rejected
    KISMIKABUL = "KISMIKABUL"  # a dispatch note accepted in part: its lines say how


@dataclass(frozen=True)
class AnswerLine:
    """One line of a dispatch note's answer: of line ``line``, how much arrived, was short, was
    rejected (and why)."""

    line: int
    received: Decimal
    short: Decimal
    rejected: Decimal
    reason: str | None = None


@dataclass(frozen=True)
class Answer:
    """A receiver's answer as the integrator reports it: ``at`` when it was given (aware);
    ``lines`` for a dispatch note (perhaps empty), None for an invoice. It never changes a
    number or its status."""

    code: AnswerCode
    at: datetime
    lines: tuple[AnswerLine, ...] | None = None


class IntegratorError(GaplessError):
    """Base of every integrator failure."""


class TransientIntegratorError(IntegratorError):
    """Outcome unknown or temporary (timeout, 5xx, connection error): retry with the same number."""


class PermanentRejection(IntegratorError):
    """The integrator refuses the document for a business reason; retrying as-is cannot help."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WrongChannel(PermanentRejection):
    """The integrator refuses the document because the customer's registration is not what it
    assumed (an e-Arşiv to an e-Fatura user, an e-Fatura to someone who is not one, or an alias
    that is not the recipient's): refresh the recipient and correct the channel."""


class IntegratorAuthError(IntegratorError):
    """The integrator refuses our credentials (401/403): a configuration error, not the
    invoice's. Stop sending until an operator fixes the key; never reject an invoice for it."""


class DuplicateOfMine(IntegratorError):
    """The number is already accepted for this very invoice (an earlier send arrived)."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(f"number {receipt.number} already accepted for this invoice")
        self.receipt = receipt


#: What a person does about a number the integrator holds for another invoice (every alarm says
#: it). The likeliest cause is a database that lost a seal the integrator had already been sent:
#: a failover to a standby that lacked it (asynchronous replication), or a restore from backup.
DUPLICATE_HINT = ("the integrator holds this number for another invoice: the database may have "
                  "lost its seal (a failover to an asynchronous standby, a restore); stop the "
                  "workers and run `gapless audit --integrator` (docs/operations.md)")


class DuplicateOfAnother(IntegratorError):
    """The number is held by a different invoice at the integrator — or this document's UUID was
    accepted under another number (``holder_number``): an alarm, never retried."""

    def __init__(self, number: str, holder_invoice_id: str,
                 holder_number: str | None = None) -> None:
        self.number = number
        self.holder_invoice_id = holder_invoice_id
        self.holder_number = holder_number or number
        if self.uuid_elsewhere:
            what = (f"the document's UUID was accepted under number {self.holder_number} at the "
                    "integrator")
        else:
            what = f"number {number} is held by another invoice at the integrator"
        super().__init__(what)

    @property
    def uuid_elsewhere(self) -> bool:
        """The document's UUID was accepted under another number (not: the number is taken)."""
        return self.holder_number != self.number

    @property
    def describe(self) -> str:
        """One line for the invoice's last_error (no tax ids, no payload)."""
        if self.uuid_elsewhere:
            return (f"the document's UUID was accepted under number {self.holder_number} "
                    f"(invoice {self.holder_invoice_id!r}) at the integrator, not {self.number}")
        return (f"number {self.number} is held by invoice {self.holder_invoice_id!r} "
                "at the integrator")


@runtime_checkable
class Integrator(Protocol):
    """What the worker and recovery need of an integrator. Implementations must be async-safe."""

    async def send(self, document: Document) -> Receipt:
        """Submit a document. Raises one of the IntegratorError subclasses on failure."""
        ...

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Ask whether ``number`` was accepted; None when it was not.

        Raises TransientIntegratorError when the integrator cannot answer. Recovery depends on a
        truthful answer: it is how a lost response is told from a document that never arrived.
        An adapter whose integrator cannot look numbers up says so with a class attribute
        ``looks_up_numbers = False``; recovery then asks by UUID (``lookup_uuid``).
        """
        ...

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        """Ask whether a document with this UUID (ETTN) was accepted, under whichever number;
        None when it was not. Raises TransientIntegratorError when the integrator cannot answer.
        """
        ...

    async def recipient(self, tax_id: str) -> Recipient:
        """Ask whether ``tax_id`` is a registered e-Fatura user, and its invoice aliases.

        Raises TransientIntegratorError when the integrator cannot answer (the caller waits:
        nothing may be sealed on a guess).
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class FollowsGibStatus(Protocol):
    """The optional part of an adapter: GİB's verdict on a document the integrator accepted.

    An adapter that has no ``status`` (or sets the class attribute ``follows_gib_status =
    False``) is simply not asked: its documents' GİB verdicts are not followed.
    """

    async def status(self, tenant: str, uuid: str) -> GibStatus | None:
        """GİB's state of the document with this UUID (ETTN), in gapless's words; None when the
        integrator does not know the UUID. Raises TransientIntegratorError when it cannot
        answer."""
        ...


def follows_gib_status(integrator: object) -> bool:
    """Whether ``integrator`` can be asked GİB's verdict (``status(tenant, uuid)``)."""
    return (getattr(integrator, "follows_gib_status", True) is not False
            and callable(getattr(integrator, "status", None)))


def endpoint(settings: Settings) -> tuple[str, str]:
    """Where the configured adapter sends, and the variable that says so: the adapter class's
    ``endpoint_setting`` (``integrator_url`` when it names none, or cannot be loaded), e.g.
    ``("https://apitest.nilvera.com", "GAPLESS_NILVERA_URL")`` for the Nilvera adapter."""
    try:
        factory = load_factory(settings.integrator_adapter, setting="GAPLESS_INTEGRATOR_ADAPTER",
                               shape="module:Class", what="integrator adapter")
    except ConfigurationError:
        factory = None
    name = getattr(factory, "endpoint_setting", "integrator_url")
    if not isinstance(name, str) or not isinstance(getattr(settings, name, None), str):
        name = "integrator_url"
    return str(getattr(settings, name)), f"GAPLESS_{name.upper()}"


def load_integrator(settings: Settings) -> Integrator:
    """Build the adapter named by ``settings.integrator_adapter`` (``module:Class``).

    The class is called with the settings object.
    """
    path = settings.integrator_adapter
    factory = load_factory(path, setting="GAPLESS_INTEGRATOR_ADAPTER", shape="module:Class",
                           what="integrator adapter")
    adapter = factory(settings)
    if not isinstance(adapter, Integrator):
        raise ConfigurationError(f"{path!r} does not provide send, lookup, lookup_uuid, recipient "
                                 "and aclose")
    return adapter
