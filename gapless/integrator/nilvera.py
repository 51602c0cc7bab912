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

The calls, the table of answers and outcomes, and what is assumed where Nilvera does not
document its behaviour: docs/nilvera.md ("Calls", "What each Nilvera answer becomes in gapless",
"What was assumed where Nilvera does not document its behaviour").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import aiohttp
from lxml import etree

from gapless.errors import ConfigurationError
from gapless.integrator.base import (
    MEDIA_XML,
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
#: What Nilvera cannot tell: the holder of a number that is not ours, and in ``lookup_uuid``'s
#: receipt the invoice_id (and the number, unless the answer names it).
UNKNOWN: Final = NOT_TOLD

#: Path segments per channel: where documents are sent, series registered, statuses read.
_SEND: Final = {EFATURA: "/einvoice/Send/Xml", EARSIV: "/earchive/Send/Xml"}
_SERIES: Final = {EFATURA: "/einvoice/Series", EARSIV: "/earchive/Series"}
_STATUS: Final = {EFATURA: "/einvoice/sale/{uuid}/Status",
                  EARSIV: "/earchive/invoices/{uuid}/Status"}
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

#: The DocumentType of an e-Fatura alias in the recipient check.
INVOICE_DOCUMENT_TYPE: Final = "invoice"
EARSIV_PROFILE: Final = "EARSIVFATURA"
_CBC: Final = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
_PARSER: Final = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
#: A VKN (10 digits) or TCKN (11) standing alone: masked in texts Nilvera writes.
_TAX_ID: Final = re.compile(r"(?<!\d)\d{10,11}(?!\d)")
_REASON_MAX: Final = 300


#: Nilvera's status words; every other word is PENDING.
_GIB_STATES: Final = {"succeed": GibState.ACCEPTED, "error": GibState.REFUSED}


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
        params = {"Alias": document.alias} if channel == EFATURA and document.alias else None
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
        number = _text(answer, "InvoiceNumber")
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
        """The receipt of the document Nilvera holds under ``uuid`` (e-Fatura, then e-Arşiv),
        whatever its GİB status; None when neither channel knows it (404 on both). ``ref`` and
        ``uuid`` are the UUID; ``invoice_id`` is ``UNKNOWN``; ``number`` is the answer's
        ``InvoiceNumber`` when it has one, else ``UNKNOWN`` (docs/nilvera.md, assumptions)."""
        found = await self._find(uuid, (EFATURA, EARSIV))
        if found is None:
            return None
        _, answer = found
        return Receipt(tenant, _text(answer, "InvoiceNumber") or UNKNOWN, UNKNOWN, uuid, uuid)

    async def status(self, tenant: str, uuid: str, *,
                     channel: str | None = None) -> GibStatus | None:
        """GİB's state of the document with ``uuid`` as Nilvera reports it (gapless's
        ``status(tenant, uuid)``), or None when Nilvera does not know the UUID. Asked in
        e-Fatura, then e-Arşiv; in ``channel`` only when it is given. Raises
        TransientIntegratorError when Nilvera cannot answer."""
        found = await self._find(uuid, (channel,) if channel else (EFATURA, EARSIV))
        if found is None:
            return None
        where, answer = found
        return gib_status(where, answer)

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
        """Whether ``tax_id`` is a registered e-Fatura user and its invoice aliases (in
        Nilvera's order, without repeats; aliases of other document types are left out)."""
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
        aliases: dict[str, None] = {}
        for entry in answer:
            if not isinstance(entry, dict):
                raise TransientIntegratorError("Nilvera recipient check: unexpected answer")
            kind, name = entry.get("DocumentType"), entry.get("Name")
            if (isinstance(kind, str) and kind.lower() == INVOICE_DOCUMENT_TYPE
                    and isinstance(name, str) and name):
                aliases[name] = None
        return Recipient(tax_id, bool(aliases), tuple(aliases))

    async def aclose(self) -> None:
        await self._http.aclose()


# --------------------------------------------------------------------------- classification


def channel_of(document: Document) -> str:
    """``efatura`` or ``earsiv``: the document's channel, else its ``cbc:ProfileID``.

    Raises PermanentRejection for a document Nilvera cannot take (not UBL-TR XML, an unknown
    channel).
    """
    if document.media_type != MEDIA_XML:
        raise PermanentRejection(f"{document.number}: Nilvera takes UBL-TR XML only (the tenant "
                                 "has no issuer profile)")
    if document.channel in (EFATURA, EARSIV):
        return document.channel
    if document.channel is not None:
        raise PermanentRejection(f"{document.number}: unknown channel {document.channel!r}")
    try:
        root = etree.fromstring(document.body, _PARSER)
    except etree.XMLSyntaxError:
        raise PermanentRejection(f"{document.number}: the document is not well-formed XML"
                                 ) from None
    profile = root.findtext(f"{{{_CBC}}}ProfileID")
    return EARSIV if (profile or "").strip() == EARSIV_PROFILE else EFATURA


def gib_status(channel: str, answer: dict[str, Any]) -> GibStatus:
    """gapless's word for a status answer of either channel (e-Fatura's ``InvoiceStatus``
    object, e-Arşiv's flat ``StatusCode`` / ``StatusDetail``)."""
    invoice_status = answer.get("InvoiceStatus")
    parts: list[str] = []
    code: str | None = None
    if isinstance(invoice_status, dict):
        code = _text(invoice_status, "Code")
        parts += [_text(invoice_status, "Description") or "",
                  _text(invoice_status, "DetailDescription") or ""]
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


def _accepted(document: Document, answer: Any) -> Receipt:
    """A 2xx: the receipt, unless Nilvera says it gave the document another number."""
    number = _text(answer, "InvoiceNumber")
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
    """Ask the document's own channel first, then the other one."""
    return (channel, EARSIV if channel == EFATURA else EFATURA)


def _text(answer: Any, name: str) -> str | None:
    value = answer.get(name) if isinstance(answer, dict) else None
    return value if isinstance(value, str) and value else None


def _one_line(text: str) -> str:
    """Collapsed whitespace, tax-id-like digit runs masked, at most ``_REASON_MAX`` long."""
    line = _TAX_ID.sub("…", " ".join(text.split()))
    return line if len(line) <= _REASON_MAX else line[:_REASON_MAX - 1] + "…"
