"""Nilvera adapter: gapless's integrator interface over Nilvera's REST API.

Configuration: ``GAPLESS_INTEGRATOR_ADAPTER=gapless.integrator.nilvera:NilveraIntegrator``,
``GAPLESS_NILVERA_URL`` (default ``https://apitest.nilvera.com``, production
``https://api.nilvera.com``) and ``GAPLESS_NILVERA_API_KEY``, sent as ``Authorization: Bearer``.

Guarantees:

* Every Nilvera answer is classified here, once, into gapless's outcomes; the worker and
  recovery never see a Nilvera code.
* A number is accepted once: a 409 is settled by asking Nilvera for the document's UUID, so a
  resend after a lost response ends in ``DuplicateOfMine``; a UUID held under another number,
  or not found, is ``DuplicateOfAnother`` (an alarm, never retried).
* Nothing is rejected for what is not the invoice's fault: no answer, 408, 429, 5xx and a wrong
  base URL are transient; a refused key or account is ``IntegratorAuthError``.
* The key is never logged, never in an error message, never in ``repr``; error messages carry
  no tax id (digit runs of that length are masked in Nilvera's texts) and no document.
* Nilvera cannot be asked by number: ``lookup`` raises ``TransientIntegratorError`` and
  ``looks_up_numbers`` is False, so recovery and audit ask by UUID (``lookup_uuid``).
* Dispatch notes (channel ``edespatch``, a UBL-TR ``DespatchAdvice``) go through Nilvera's
  ``/edespatch`` API with the same guarantees; ``status`` also reports the receiver's answer
  (a dispatch note's ReceiptAdvice, a ``TICARIFATURA`` invoice's KABUL/RED) in gapless's words.

The calls, the table of answers and outcomes, and what is assumed where Nilvera does not
document its behaviour: docs/nilvera.md ("Calls", "What each Nilvera answer becomes in gapless",
"What was assumed where Nilvera does not document its behaviour").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote
from zoneinfo import ZoneInfo

import aiohttp
from lxml import etree

from gapless.errors import ConfigurationError
from gapless.integrator.base import (
    MEDIA_XML,
    Answer,
    AnswerCode,
    AnswerLine,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    GibState,
    GibStatus,
    IntegratorAuthError,
    IntegratorError,
    PermanentRejection,
    Receipt,
    Recipient,
    TransientIntegratorError,
    WrongChannel,
)
from gapless.integrator.base import (
    UNKNOWN as NOT_TOLD,
)
from gapless.integrator.transport import IntegratorSession, json_or_none

if TYPE_CHECKING:
    from gapless.settings import Settings

EFATURA: Final = "efatura"
EARSIV: Final = "earsiv"
EDESPATCH: Final = "edespatch"
#: Every channel, in the order a UUID is looked for when the channel is not known.
CHANNELS: Final = (EFATURA, EARSIV, EDESPATCH)
#: What Nilvera cannot tell: the holder of a number that is not ours, and in ``lookup_uuid``'s
#: receipt the invoice_id (and the number, unless the answer names it).
UNKNOWN: Final = NOT_TOLD

#: Path segments per channel: where documents are sent, series registered, statuses read.
_SEND: Final = {EFATURA: "/einvoice/Send/Xml", EARSIV: "/earchive/Send/Xml",
                 EDESPATCH: "/edespatch/Send/Xml"}
_SERIES: Final = {EFATURA: "/einvoice/Series", EARSIV: "/earchive/Series",
                  EDESPATCH: "/edespatch/Series"}
_STATUS: Final = {EFATURA: "/einvoice/sale/{uuid}/Status",
                  EARSIV: "/earchive/invoices/{uuid}/Status",
                  EDESPATCH: "/edespatch/Sale/{uuid}/Status"}
#: The receiver's answer to a dispatch note (its ReceiptAdvice XML), by the note's UUID.
_ANSWER_XML: Final = "/edespatch/Sale/Answer/{uuid}/xml"
#: Channels whose documents go to the receiver's alias (``?Alias=``).
_ADDRESSED: Final = frozenset({EFATURA, EDESPATCH})
_RECIPIENT: Final = "/general/GlobalCompany/Check/TaxNumber/{tax_id}"

#: Nilvera's error codes that gapless acts on (docs/nilvera.md, the answers). A 409 needs
#: no list: every 409 ("already in the system": 1001 UUID, 1004, 1005 number, 1015) is settled
#: by UUID, unless it names an account-level refusal.
UNKNOWN_SERIES: Final = 3009
WRONG_CHANNEL: Final = frozenset({2025, 2052, 2053, 2054, 3000})
ACCOUNT_REFUSED: Final = frozenset({1000, 2000, 2051, 2075, 2078})
API_NOT_FOUND: Final = 3030
#: HTTP statuses below 500 that still mean "try again later".
_RETRY_LATER: Final = frozenset({408, 429})

#: The DocumentType of an e-Fatura alias and of an e-İrsaliye alias in the recipient check
#: (compared without case).
INVOICE_DOCUMENT_TYPE: Final = "invoice"
DESPATCH_DOCUMENT_TYPE: Final = "despatchadvice"
EARSIV_PROFILE: Final = "EARSIVFATURA"
_CBC: Final = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
_CAC: Final = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
_DESPATCH_ROOT: Final = "{urn:oasis:names:specification:ubl:schema:xsd:DespatchAdvice-2}" \
    "DespatchAdvice"
_RECEIPT_ROOT: Final = "{urn:oasis:names:specification:ubl:schema:xsd:ReceiptAdvice-2}" \
    "ReceiptAdvice"
#: Where a number is named in Nilvera's answers (a send's, a status's).
_NUMBER_FIELDS: Final = ("InvoiceNumber", "DespatchNumber")
#: GİB's clock: the time zone of dates and times Nilvera and the answers' XML give without one.
_GIB_TZ: Final = ZoneInfo("Europe/Istanbul")
_PARSER: Final = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
#: A VKN (10 digits) or TCKN (11) standing alone: masked in texts Nilvera writes.
_TAX_ID: Final = re.compile(r"(?<!\d)\d{10,11}(?!\d)")
_REASON_MAX: Final = 300


#: Nilvera's status words; every other word is PENDING.
_GIB_STATES: Final = {"succeed": GibState.ACCEPTED, "error": GibState.REFUSED}
#: The status object of each channel's answer (e-Arşiv's is flat: ``StatusCode``).
_STATUS_OBJECTS: Final = ("InvoiceStatus", "DespatchStatus")

#: Nilvera's ``Answer.AnswerCode`` words (compared without case) and gapless's answer
#: (ARCHITECTURE.md, "The receiver's answer"); every other word (``waitingForApproval``,
#: ``unknown``, none) is "not answered yet". KISMIKABUL is a dispatch note's only.
ANSWER_CODES: Final = {
    "approved": AnswerCode.KABUL,
    "acceptall": AnswerCode.KABUL,
    "documentansweredautomatically": AnswerCode.KABUL,
    "rejected": AnswerCode.RED,
    "rejectall": AnswerCode.RED,
    "documentanswered": AnswerCode.KISMIKABUL,
}
#: Channels whose documents the receiver answers (e-Arşiv documents are not answered).
_ANSWERED: Final = frozenset({EFATURA, EDESPATCH})


@dataclass(frozen=True)
class _Refusal:
    """A non-2xx answer, read once: its status, Nilvera's error codes and a safe reason."""

    status: int
    codes: frozenset[int]
    reason: str
    nilvera_shaped: bool


class NilveraIntegrator:
    """``Integrator`` over Nilvera's REST API (safe to share between tasks of one event loop; the
    session is opened on first use, inside that loop).

    Raises ConfigurationError at construction when ``GAPLESS_NILVERA_API_KEY`` is empty, so a
    process configured for Nilvera without a key stops at start-up rather than at its first
    invoice.
    """

    #: Nilvera's API has no lookup by number: recovery asks by the invoice's UUID.
    looks_up_numbers = False
    #: The setting naming where this adapter sends (:func:`gapless.integrator.base.endpoint`).
    endpoint_setting = "nilvera_url"

    def __init__(self, settings: Settings) -> None:
        if not settings.nilvera_api_key:
            raise ConfigurationError("GAPLESS_NILVERA_API_KEY is empty: the Nilvera adapter "
                                     "needs the account's API key")
        self._base = settings.nilvera_url.rstrip("/")
        # Nilvera's paths carry tax ids: no aiohttp error is chained to what the adapter raises.
        self._http = IntegratorSession(
            self._base, settings, label="Nilvera ", hide_cause=True,
            headers={"authorization": f"Bearer {settings.nilvera_api_key}",
                     "accept": "application/json"})

    def __repr__(self) -> str:
        return f"NilveraIntegrator({self._base!r})"

    # ------------------------------------------------------------------------------- send

    async def send(self, document: Document) -> Receipt:
        """Send the document's bytes to its channel. Returns the receipt of an accepted
        document; raises the classified outcome otherwise (docs/nilvera.md, the answers).

        An unknown series (3009) is registered and the document resent once, in this call. A
        409 is settled by asking the UUID's status, so a resend after a lost response ends in
        ``DuplicateOfMine`` and the number is accepted once.
        """
        channel = channel_of(document)
        if channel == EFATURA and not document.alias:
            raise PermanentRejection(
                f"e-Fatura {document.number} has no recipient alias: Nilvera needs one (route "
                "the invoice through a series of channel efatura, or name customer.alias)")
        if channel == EDESPATCH and not document.alias:
            raise PermanentRejection(
                f"dispatch note {document.number} has no recipient alias: Nilvera needs the "
                "receiver's e-İrsaliye alias or GİB's box (route it through a series of channel "
                "edespatch)")
        params = ({"Alias": document.alias} if channel in _ADDRESSED and document.alias
                  else None)
        series_registered = False
        while True:
            form = aiohttp.FormData()
            form.add_field("file", document.body, filename=f"{document.uuid}.xml",
                           content_type=MEDIA_XML)
            status, body = await self._http.request("POST", _SEND[channel], f"send of "
                                               f"{document.number}", params=params, data=form)
            if 200 <= status < 300:
                return _accepted(document, json_or_none(body))
            refusal = _refusal(status, body)
            if status == 409 and not refusal.codes & ACCOUNT_REFUSED:
                raise await self._settle(document, channel)
            if UNKNOWN_SERIES in refusal.codes and 400 <= status < 500:
                if series_registered:
                    raise PermanentRejection(f"{refusal.reason} (after registering series "
                                             f"{document.number[:3]})")
                await self._register_series(document, channel)
                series_registered = True
                continue
            raise _outcome(refusal, f"send of {document.number}")

    async def _register_series(self, document: Document, channel: str) -> None:
        """Register the number's series (its first 3 characters) in the channel. An answer that
        it exists already (409: another worker was first) is as good as a 2xx."""
        prefix = document.number[:3]
        status, body = await self._http.request(
            "POST", _SERIES[channel], f"series registration of {prefix}",
            payload={"Name": prefix, "IsActive": True, "IsDefault": False})
        if 200 <= status < 300 or status == 409:
            return
        refusal = _refusal(status, body)
        outcome = _outcome(refusal, f"series registration of {prefix}")
        if isinstance(outcome, PermanentRejection):
            raise PermanentRejection(f"series {prefix} cannot be registered: {refusal.reason}")
        raise outcome

    async def _settle(self, document: Document, channel: str) -> IntegratorError:
        """A 409 ("already exists"): ours if Nilvera holds the document's UUID (under our number,
        as far as its answer tells), an alarm otherwise."""
        found = await self._find(document.uuid, _order(channel))
        if found is None:
            return DuplicateOfAnother(document.number, UNKNOWN)
        _, answer = found
        number = _number(answer)
        if number is not None and number != document.number:
            return DuplicateOfAnother(document.number, UNKNOWN, number)
        return DuplicateOfMine(Receipt(document.tenant, document.number, document.invoice_id,
                                       document.uuid, document.uuid))

    # ----------------------------------------------------------------------------- lookups

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Not available: Nilvera is asked by UUID. Always raises TransientIntegratorError (the
        caller cannot conclude anything), so recovery and audit must use ``lookup_uuid``."""
        raise TransientIntegratorError(
            f"lookup of {number}: Nilvera is asked by the document's UUID, not by number "
            "(use lookup_uuid)")

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        """The receipt of the document Nilvera holds under ``uuid`` (e-Fatura, then e-Arşiv,
        then e-İrsaliye), whatever its GİB status; None when no channel knows it (404 on each).
        ``ref`` and ``uuid`` are the UUID; ``invoice_id`` is ``UNKNOWN``; ``number`` is the
        answer's ``InvoiceNumber`` (``DespatchNumber``) when it has one, else ``UNKNOWN``
        (docs/nilvera.md, assumptions)."""
        found = await self._find(uuid, CHANNELS)
        if found is None:
            return None
        _, answer = found
        return Receipt(tenant, _number(answer) or UNKNOWN, UNKNOWN, uuid, uuid)

    async def status(self, tenant: str, uuid: str, *,
                     channel: str | None = None) -> GibStatus | None:
        """GİB's state of the document with ``uuid`` as Nilvera reports it (gapless's
        ``status(tenant, uuid)``), with the receiver's answer once it answered; None when
        Nilvera does not know the UUID. Asked in e-Fatura, then e-Arşiv, then e-İrsaliye; in
        ``channel`` only when it is given. A dispatch note's answer is read with its lines from
        the answer's XML (one more call, once answered). Raises TransientIntegratorError when
        Nilvera cannot answer; ValueError for a channel that is none of Nilvera's (a caller's
        mistake, not Nilvera's answer)."""
        if channel is not None and channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        found = await self._find(uuid, (channel,) if channel else CHANNELS)
        if found is None:
            return None
        where, answer = found
        verdict = gib_status(where, answer)
        code = answer_code(where, answer)
        if code is None:
            return verdict
        if where != EDESPATCH:
            return replace(verdict, answer=Answer(code, _answered_at(answer), None))
        receipt = await self._receipt_advice(uuid)
        if receipt is None:
            if code is AnswerCode.KISMIKABUL:
                # Answered line by line, but the lines cannot be read yet: ask again later.
                return verdict
            return replace(verdict, answer=Answer(code, _answered_at(answer), ()))
        at, lines = receipt
        return replace(verdict, answer=Answer(code, at or _answered_at(answer), lines))

    async def _receipt_advice(self, uuid: str
                              ) -> tuple[datetime | None, tuple[AnswerLine, ...]] | None:
        """The receiver's answer to the dispatch note ``uuid`` read from its ReceiptAdvice XML
        (when it was given, and its lines); None when Nilvera has no answer XML (404); no date
        and no lines when it is not a readable ReceiptAdvice (the code still tells the answer,
        and asking again would read the same)."""
        path = _ANSWER_XML.format(uuid=quote(uuid, safe=""))
        status, body = await self._http.request("GET", path, f"answer of UUID {uuid}",
                                                headers={"accept": MEDIA_XML})
        if status == 404:
            return None
        if status in (401, 403):
            raise _auth(status)
        if status != 200:
            raise TransientIntegratorError(f"Nilvera answer of UUID {uuid}: HTTP {status}")
        return receipt_advice(body) or (None, ())

    async def _find(self, uuid: str, channels: tuple[str, ...]) -> tuple[str, Any] | None:
        """(channel, status answer) of the first channel that knows ``uuid``; None if none."""
        for channel in channels:
            path = _STATUS[channel].format(uuid=quote(uuid, safe=""))
            status, body = await self._http.request("GET", path, f"status of UUID {uuid}")
            if status == 200:
                answer = json_or_none(body)
                if isinstance(answer, dict):
                    return channel, answer
                raise TransientIntegratorError(
                    f"Nilvera status of UUID {uuid}: 200 without a status object")
            if status == 404:
                continue
            if status in (401, 403):
                raise _auth(status)
            raise TransientIntegratorError(f"Nilvera status of UUID {uuid}: HTTP {status}")
        return None

    # --------------------------------------------------------------------------- recipient

    async def recipient(self, tax_id: str) -> Recipient:
        """Whether ``tax_id`` is a registered e-Fatura user and its invoice aliases, and
        whether it is an e-İrsaliye user and its dispatch-note aliases (each in Nilvera's
        order, without repeats; aliases of other document types are left out)."""
        status, body = await self._http.request(
            "GET", _RECIPIENT.format(tax_id=quote(tax_id, safe="")), "recipient check")
        if status in (401, 403):
            raise _auth(status)
        if status == 404:
            refusal = _refusal(status, body)
            if API_NOT_FOUND in refusal.codes or not refusal.nilvera_shaped:
                raise TransientIntegratorError(_wrong_url(status))
            return Recipient(tax_id, False, ())
        answer = json_or_none(body)
        if status != 200 or not isinstance(answer, list):
            raise TransientIntegratorError(f"Nilvera recipient check: HTTP {status}")
        aliases: dict[str, dict[str, None]] = {INVOICE_DOCUMENT_TYPE: {},
                                               DESPATCH_DOCUMENT_TYPE: {}}
        for entry in answer:
            if not isinstance(entry, dict):
                raise TransientIntegratorError("Nilvera recipient check: unexpected answer")
            kind, name = entry.get("DocumentType"), entry.get("Name")
            if isinstance(kind, str) and kind.lower() in aliases and isinstance(name, str) \
                    and name:
                aliases[kind.lower()][name] = None
        invoice, despatch = aliases[INVOICE_DOCUMENT_TYPE], aliases[DESPATCH_DOCUMENT_TYPE]
        return Recipient(tax_id, bool(invoice), tuple(invoice),
                         despatch_registered=bool(despatch), despatch_aliases=tuple(despatch))

    async def aclose(self) -> None:
        await self._http.aclose()


# --------------------------------------------------------------------------- classification


def channel_of(document: Document) -> str:
    """``efatura``, ``earsiv`` or ``edespatch``: the document's channel, else its XML's (a
    ``DespatchAdvice`` root is a dispatch note; an invoice goes by its ``cbc:ProfileID``).

    Raises PermanentRejection for a document Nilvera cannot take (not UBL-TR XML, an unknown
    channel).
    """
    if document.media_type != MEDIA_XML:
        raise PermanentRejection(f"{document.number}: Nilvera takes UBL-TR XML only (the tenant "
                                 "has no issuer profile)")
    if document.channel in CHANNELS:
        return document.channel
    if document.channel is not None:
        raise PermanentRejection(f"{document.number}: unknown channel {document.channel!r}")
    try:
        root = etree.fromstring(document.body, _PARSER)
    except etree.XMLSyntaxError:
        raise PermanentRejection(f"{document.number}: the document is not well-formed XML"
                                 ) from None
    if root.tag == _DESPATCH_ROOT:
        return EDESPATCH
    profile = root.findtext(f"{{{_CBC}}}ProfileID")
    return EARSIV if (profile or "").strip() == EARSIV_PROFILE else EFATURA


def gib_status(channel: str, answer: dict[str, Any]) -> GibStatus:
    """gapless's word for a status answer of any channel (e-Fatura's ``InvoiceStatus`` object,
    e-İrsaliye's ``DespatchStatus``, e-Arşiv's flat ``StatusCode`` / ``StatusDetail``); the
    receiver's answer is not read here (:func:`answer_code`)."""
    parts: list[str] = []
    code: str | None = None
    for name in _STATUS_OBJECTS:
        status_object = answer.get(name)
        if isinstance(status_object, dict):
            code = _text(status_object, "Code")
            parts += [_text(status_object, "Description") or "",
                      _text(status_object, "DetailDescription") or ""]
            break
    if code is None:
        code = _text(answer, "StatusCode")
        parts += [_text(answer, "StatusDetail") or ""]
    envelope = answer.get("EnvelopeInfo")
    if isinstance(envelope, dict) and isinstance(envelope.get("GIBCode"), int):
        parts.append(f"GİB {envelope['GIBCode']}: {_text(envelope, 'GIBDescription') or ''}")
    word = (code or "").strip().lower()
    state = _GIB_STATES.get(word, GibState.PENDING)
    if state is GibState.PENDING and word not in ("waiting", "unknown"):
        parts.insert(0, f"unrecognised status {code!r}")
    detail = _one_line(" — ".join(part.strip() for part in parts if part and part.strip()))
    return GibStatus(state, detail or word or "no detail", channel)


def answer_code(channel: str, answer: dict[str, Any]) -> AnswerCode | None:
    """gapless's word for the receiver's answer in a status answer (``Answer.AnswerCode``, see
    ANSWER_CODES); None while it has not answered, for an e-Arşiv document, and for a
    line-by-line answer to an invoice (only a dispatch note is answered so)."""
    if channel not in _ANSWERED:
        return None
    word = _text(answer.get("Answer"), "AnswerCode")
    code = ANSWER_CODES.get((word or "").strip().lower())
    if code is AnswerCode.KISMIKABUL and channel != EDESPATCH:
        return None
    return code


def receipt_advice(body: bytes) -> tuple[datetime | None, tuple[AnswerLine, ...]] | None:
    """A dispatch note's answer from its UBL-TR ``ReceiptAdvice``: when it was issued (its
    ``IssueDate`` and ``IssueTime`` in GİB's time zone; None without a date) and, per
    ``ReceiptLine``, the note's line (``DespatchLineReference/LineID``, else the line's ``ID``)
    with its received, short and rejected quantities (absent: 0) and reject reason (one line,
    tax ids masked). None when the body is not such a document (not XML, another root, a line
    without a number, a quantity that is not a non-negative number)."""
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError:
        return None
    if root.tag != _RECEIPT_ROOT:
        return None
    lines: list[AnswerLine] = []
    for element in root.iterfind(f"{{{_CAC}}}ReceiptLine"):
        number = (element.findtext(f"{{{_CAC}}}DespatchLineReference/{{{_CBC}}}LineID")
                  or element.findtext(f"{{{_CBC}}}ID") or "").strip()
        quantities = [_quantity(element.findtext(f"{{{_CBC}}}{name}"))
                      for name in ("ReceivedQuantity", "ShortQuantity", "RejectedQuantity")]
        if not (number.isdigit() and len(number) <= 9) or None in quantities:
            return None
        received, short, rejected = (quantity or Decimal(0) for quantity in quantities)
        reason = _one_line(element.findtext(f"{{{_CBC}}}RejectReason") or "") or None
        lines.append(AnswerLine(int(number), received, short, rejected, reason))
    return _issued_at(root.findtext(f"{{{_CBC}}}IssueDate"),
                      root.findtext(f"{{{_CBC}}}IssueTime")), tuple(lines)


def _quantity(text: str | None) -> Decimal | None:
    """A quantity's value (absent: 0); None when it is not a finite non-negative number."""
    if text is None or not text.strip():
        return Decimal(0)
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and value >= 0 and len(text) <= 40 else None


def _issued_at(day: str | None, at: str | None) -> datetime | None:
    """An answer's ``IssueDate`` (and ``IssueTime``, else midnight) in GİB's time zone."""
    try:
        issued = date.fromisoformat((day or "").strip())
    except ValueError:
        return None
    try:
        clock = time.fromisoformat((at or "").strip()[:8])
    except ValueError:
        clock = time(0)
    return datetime.combine(issued, clock.replace(tzinfo=None), _GIB_TZ)


def _answered_at(answer: dict[str, Any]) -> datetime:
    """When the receiver answered, as far as the status answer tells (``Answer.AnswerDate``,
    without a zone: GİB's time); else now, when gapless learnt it (docs/nilvera.md)."""
    text = _text(answer.get("Answer"), "AnswerDate")
    if text is not None:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            pass
        else:
            return moment if moment.tzinfo is not None else moment.replace(tzinfo=_GIB_TZ)
    return datetime.now(UTC)


def _accepted(document: Document, answer: Any) -> Receipt:
    """A 2xx: the receipt, unless Nilvera says it gave the document another number."""
    number = _number(answer)
    if number and number != document.number:
        raise DuplicateOfAnother(document.number, UNKNOWN, number)
    ref = _text(answer, "UUID") or document.uuid
    return Receipt(document.tenant, document.number, document.invoice_id, ref, document.uuid)


def _refusal(status: int, body: bytes) -> _Refusal:
    """Read a non-2xx answer: Nilvera's error codes and a one-line reason without tax ids."""
    answer = json_or_none(body)
    codes: set[int] = set()
    reasons: list[str] = []
    shaped = isinstance(answer, dict) and ("Errors" in answer or "Message" in answer)
    if isinstance(answer, dict):
        errors = answer.get("Errors")
        for error in errors if isinstance(errors, list) else ():
            if not isinstance(error, dict):
                continue
            code = error.get("Code")
            if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
                codes.add(int(code))
            description = _text(error, "Description") or "no description"
            reasons.append(f"Nilvera {code}: {description}")
        if not reasons and _text(answer, "Message"):
            reasons.append(f"Nilvera HTTP {status}: {_text(answer, 'Message')}")
    reason = "; ".join(reasons) or f"Nilvera HTTP {status}"
    return _Refusal(status, frozenset(codes), _one_line(reason), shaped)


def _outcome(refusal: _Refusal, what: str) -> IntegratorError:
    """The outcome of a refusal that is neither a duplicate nor an unknown series."""
    status, codes = refusal.status, refusal.codes
    if status in (401, 403):
        return _auth(status)
    if status >= 500 or status in _RETRY_LATER or status < 400:
        return TransientIntegratorError(f"Nilvera {what}: HTTP {status}")
    if codes & ACCOUNT_REFUSED:
        return IntegratorAuthError(f"Nilvera refuses the account, not the invoice: "
                                   f"{refusal.reason}")
    if codes & WRONG_CHANNEL:
        return WrongChannel(refusal.reason)
    if status == 404 and (API_NOT_FOUND in codes or not refusal.nilvera_shaped):
        return TransientIntegratorError(_wrong_url(status))
    return PermanentRejection(refusal.reason)


def _auth(status: int) -> IntegratorAuthError:
    return IntegratorAuthError(f"Nilvera refuses the API key (HTTP {status}): check "
                               "GAPLESS_NILVERA_API_KEY")


def _wrong_url(status: int) -> str:
    return (f"Nilvera answers HTTP {status} without its error shape (API not found): check "
            "GAPLESS_NILVERA_URL")


def _order(channel: str) -> tuple[str, ...]:
    """Ask the document's own channel first, then the others."""
    return (channel, *(other for other in CHANNELS if other != channel))


def _text(answer: Any, name: str) -> str | None:
    value = answer.get(name) if isinstance(answer, dict) else None
    return value if isinstance(value, str) and value else None


def _number(answer: Any) -> str | None:
    """The number an answer names (an invoice's or a dispatch note's), if any."""
    return next((number for name in _NUMBER_FIELDS
                 if (number := _text(answer, name)) is not None), None)


def _one_line(text: str) -> str:
    """Collapsed whitespace, tax-id-like digit runs masked, at most ``_REASON_MAX`` long."""
    line = _TAX_ID.sub("…", " ".join(text.split()))
    return line if len(line) <= _REASON_MAX else line[:_REASON_MAX - 1] + "…"
