"""HTTP adapter for the mock integrator HTTP API (docs/mock.md; `gapless mock-integrator`).

Guarantee: every answer is classified once, here, into the outcomes the worker and recovery act
on: 201 ``Receipt``; 409 ``DuplicateOfMine`` when the holder is this invoice under this number
and UUID, else ``DuplicateOfAnother`` (an alarm); 422 ``WrongChannel`` (``code:
wrong_channel``) or ``PermanentRejection``; 401/403 ``IntegratorAuthError``; any other 4xx
``PermanentRejection``; 5xx, a timeout, a refused or dropped connection
``TransientIntegratorError`` (outcome unknown: a lookup settles it). The request embeds the
document's bytes unchanged; the document and the customer's tax id are never logged or put into
an error message.

The table of answers, the recipient check, GİB's status and the request body:
docs/mock.md, "The adapter that speaks this API".
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gapless.integrator.base import (
    MEDIA_JSON,
    Answer,
    AnswerCode,
    AnswerLine,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    GibState,
    GibStatus,
    IntegratorAuthError,
    PermanentRejection,
    Receipt,
    Recipient,
    TransientIntegratorError,
    WrongChannel,
)
from gapless.integrator.transport import IntegratorSession, json_or_none

if TYPE_CHECKING:
    from gapless.settings import Settings

_JSON_HEADERS = {"content-type": "application/json"}
#: The ``code`` of a 422 that refuses a document sent through the wrong channel or alias.
WRONG_CHANNEL = "wrong_channel"
#: A quantity in a receiver's answer: a non-negative decimal string.
_QUANTITY = re.compile(r"[0-9]{1,15}(\.[0-9]{1,6})?")


#: Writes the request's fields: compact, UTF-8 as it is (one encoder for every request).
_FIELDS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: The bytes a JSON string escapes (``json.dumps(..., ensure_ascii=False)``): the backslash, the
#: quote and the C0 controls. XML 1.0 carries only three of the controls (tab, line feed,
#: carriage return); a text holding another one is written by ``json`` itself.
_ESCAPED = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\t"): b"\\t",
            ord("\r"): b"\\r"}
_OTHER_CONTROLS = bytes(code for code in range(0x20) if code not in _ESCAPED)


def json_string(text: bytes) -> bytes:
    """``text`` (UTF-8) as a JSON string, exactly as ``json.dumps(text.decode(),
    ensure_ascii=False).encode()`` writes it, made on the bytes: a UBL-TR document has a few
    quotes and line feeds to escape in thousands of bytes (the ``str`` encoder walked each
    character of the decoded text: about 35 µs for a 6 KB invoice)."""
    if len(text.translate(None, _OTHER_CONTROLS)) != len(text):
        return json.dumps(text.decode(), ensure_ascii=False).encode()
    for code, escaped in _ESCAPED.items():
        if code in text:
            text = text.replace(bytes((code,)), escaped)
    return b'"' + text + b'"'


def request_body(document: Document) -> bytes:
    """The contract's POST /invoices body, with the document's bytes embedded unchanged (a JSON
    document as the object it is, a UBL-TR document as a JSON string)."""
    fields = {"tenant": document.tenant, "number": document.number,
              "invoice_id": document.invoice_id, "uuid": document.uuid}
    if document.alias is not None:
        fields["alias"] = document.alias
    head = _FIELDS.encode(fields).encode()
    embedded = document.body if document.media_type == MEDIA_JSON else json_string(document.body)
    return head[:-1] + b',"document":' + embedded + b"}"


class HttpIntegrator:
    """``Integrator`` over HTTP with pooled keep-alive connections (safe to share between tasks
    of one event loop; the session is opened on first use, inside that loop).

    Timeouts: ``settings.integrator_timeout_s`` for connecting (pool wait included) and for each
    read of the answer.
    """

    #: The setting naming where this adapter sends (:func:`gapless.integrator.base.endpoint`).
    endpoint_setting = "integrator_url"

    def __init__(self, settings: Settings) -> None:
        self._http = IntegratorSession(settings.integrator_url, settings)

    async def send(self, document: Document) -> Receipt:
        """POST the document under its number. Raises the classified error on any other outcome."""
        status, body = await self._http.request("POST", "/invoices", f"send of {document.number}",
                                                data=request_body(document), headers=_JSON_HEADERS)
        answer = json_or_none(body)
        if status == 201:
            ref = _field(answer, "ref")
            if ref is None:
                raise TransientIntegratorError(f"send of {document.number}: 201 without a ref")
            return Receipt(document.tenant, document.number, document.invoice_id, ref,
                           document.uuid)
        if status == 409:
            raise _duplicate(document, answer)
        if status == 422:
            reason = _field(answer, "reason") or _detail(answer, body)
            if _field(answer, "code") == WRONG_CHANNEL:
                raise WrongChannel(reason)
            raise PermanentRejection(reason)
        if status in (401, 403):
            raise IntegratorAuthError(f"the integrator refuses our credentials (HTTP {status})")
        if 400 <= status < 500:
            raise PermanentRejection(f"HTTP {status}: {_detail(answer, body)}")
        raise TransientIntegratorError(f"send of {document.number}: HTTP {status}")

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Ask whether ``number`` is accepted: its receipt, or None (404). Transient otherwise."""
        return await self._get(f"/invoices/{quote(tenant, safe='')}/{quote(number, safe='')}",
                               tenant, f"lookup of {number}")

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        """Ask whether a document with this UUID is accepted (under any number), or None."""
        return await self._get(
            f"/invoices/{quote(tenant, safe='')}/by-uuid/{quote(uuid, safe='')}", tenant,
            f"lookup of UUID {uuid}")

    async def status(self, tenant: str, uuid: str) -> GibStatus | None:
        """GİB's verdict on the document with this UUID and its receiver's answer (``{state,
        detail, answer}``), or None when the integrator does not know the UUID (404). Transient
        otherwise (a malformed answer too)."""
        what = f"GİB status of UUID {uuid}"
        status, answer = await self._get_json(
            f"/invoices/{quote(tenant, safe='')}/by-uuid/{quote(uuid, safe='')}/status", what)
        if status == 404:
            return None
        state = _field(answer, "state")
        if status == 200 and state in tuple(GibState):
            detail = " ".join((_field(answer, "detail") or "").split())[:300]
            try:
                received = _receiver_answer(answer.get("answer"))
            except ValueError:
                raise TransientIntegratorError(f"{what}: a malformed receiver's answer") from None
            return GibStatus(GibState(state), detail or state, answer=received)
        raise TransientIntegratorError(f"{what}: HTTP {status}")

    async def recipient(self, tax_id: str) -> Recipient:
        """Ask whether ``tax_id`` is a registered e-Fatura user and an e-İrsaliye user, with the
        aliases of each (an answer without the ``despatch_*`` fields: not an e-İrsaliye
        user)."""
        status, answer = await self._get_json(f"/recipients/{quote(tax_id, safe='')}",
                                              "recipient check")
        if status == 200 and isinstance(answer, dict) and isinstance(
                answer.get("registered"), bool):
            aliases = _strings(answer.get("aliases"))
            despatch = answer.get("despatch_registered", False)
            despatch_aliases = _strings(answer.get("despatch_aliases"))
            if aliases is not None and isinstance(despatch, bool) and (
                    despatch_aliases is not None):
                return Recipient(tax_id, answer["registered"], aliases, despatch,
                                 despatch_aliases)
        raise TransientIntegratorError(f"recipient check: HTTP {status}")

    async def _get_json(self, path: str, what: str) -> tuple[int, Any]:
        """One GET: its status and JSON answer. A network error is transient, and refused
        credentials (401/403) an IntegratorAuthError, whatever was asked."""
        status, body = await self._http.request("GET", path, what)
        if status in (401, 403):
            raise IntegratorAuthError(f"the integrator refuses our credentials (HTTP {status})")
        return status, json_or_none(body)

    async def _get(self, path: str, tenant: str, what: str) -> Receipt | None:
        status, answer = await self._get_json(path, what)
        if status == 404:
            return None
        if status == 200:
            number = _field(answer, "number")
            invoice_id = _field(answer, "invoice_id")
            ref = _field(answer, "ref")
            if number is not None and invoice_id is not None and ref is not None:
                return Receipt(tenant, number, invoice_id, ref, _field(answer, "uuid"))
        raise TransientIntegratorError(f"{what}: HTTP {status}")

    async def aclose(self) -> None:
        await self._http.aclose()


def _duplicate(document: Document, answer: Any) -> Exception:
    """A 409: ours (same invoice, same number, same UUID when told) or an alarm."""
    holder = _field(answer, "invoice_id")
    if holder is None:
        return TransientIntegratorError(
            f"send of {document.number}: 409 without the holder's invoice_id")
    number = _field(answer, "number") or document.number
    uuid = _field(answer, "uuid")
    if holder == document.invoice_id and number == document.number and uuid in (
            None, document.uuid):
        return DuplicateOfMine(Receipt(document.tenant, document.number, document.invoice_id,
                                       _field(answer, "ref") or "", uuid))
    return DuplicateOfAnother(document.number, holder, number)


def _strings(value: Any) -> tuple[str, ...] | None:
    """A list of strings (absent or null: none) as a tuple; None when it is anything else."""
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _receiver_answer(value: Any) -> Answer | None:
    """The status's ``answer``: None (not answered) or the Answer (``{code, at, lines?}``: a
    known code, an aware ISO time, lines of non-negative decimal quantities). Raises ValueError
    when it is malformed."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("code") not in tuple(AnswerCode):
        raise ValueError("no known answer code")
    at = datetime.fromisoformat(value["at"]) if isinstance(value.get("at"), str) else None
    if at is None or at.tzinfo is None:
        raise ValueError("no aware answer time")
    lines = value.get("lines")
    if lines is not None and not isinstance(lines, list):
        raise ValueError("answer lines are not a list")
    return Answer(AnswerCode(value["code"]), at,
                  None if lines is None else tuple(_answer_line(line) for line in lines))


def _answer_line(value: Any) -> AnswerLine:
    """One line of a dispatch note's answer; raises ValueError when it is malformed."""
    if not isinstance(value, dict):
        raise ValueError("an answer line is not an object")
    number = value.get("line")
    quantities = [value.get(name, "0") for name in ("received", "short", "rejected")]
    reason = value.get("reason")
    if (not isinstance(number, int) or isinstance(number, bool) or number < 1
            or not all(isinstance(q, str) and _QUANTITY.fullmatch(q) for q in quantities)
            or not (reason is None or isinstance(reason, str))):
        raise ValueError("a malformed answer line")
    received, short, rejected = (Decimal(q) for q in quantities)
    reason = " ".join(reason.split())[:500] if reason is not None else None
    return AnswerLine(number, received, short, rejected, reason or None)


def _field(answer: Any, name: str) -> str | None:
    value = answer.get(name) if isinstance(answer, dict) else None
    return value if isinstance(value, str) else None


def _detail(answer: Any, body: bytes) -> str:
    """A short, single-line reason from an error body.

    Validation errors (``{"detail": [{"loc": ..., "msg": ...}]}``) are reduced to field and
    message: their ``input`` would echo the document back.
    """
    if isinstance(answer, dict):
        detail = answer.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            where = ".".join(str(part) for part in detail[0].get("loc", ()))
            return f"{where}: {detail[0].get('msg', 'invalid')}"[:200]
        for key in ("detail", "error", "reason"):
            if isinstance(answer.get(key), str):
                return str(answer[key])[:200]
    text = body.decode(errors="replace").strip()
    return text.splitlines()[0][:200] if text else "no reason given"
