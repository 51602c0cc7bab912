"""A fake of Nilvera's REST API for the adapter's tests: a real HTTP server (aiohttp) on a free
127.0.0.1 port, inside the test's event loop.

Written from the shapes Nilvera's developer pages document and Odoo's ``l10n_tr_nilvera``
modules use, not from Nilvera's code:

* ``POST /einvoice/Send/Xml?Alias=…`` and ``POST /earchive/Send/Xml``: multipart field ``file``
  holding UBL-TR XML. The number (``cbc:ID``), UUID, profile and the customer's tax id are read
  from the XML, as Nilvera reads them. 200 ``{"UUID", "InvoiceNumber"}``.
* Errors: ``{"Message": …, "Errors": [{"Code", "Description", "Detail"}]}`` — 409 1001 (UUID
  exists), 409 1005 (number used), 422 3009 (unknown series), 422 2025 (e-Arşiv to an e-Fatura
  user), 422 2054 (e-Fatura to a non-user), 422 2052 (alias not the recipient's), 401 (wrong key,
  plain text as Nilvera's gateway answers), 404 3030 (no such API).
* ``POST /einvoice/Series`` / ``/earchive/Series`` ``{"Name", "IsActive", "IsDefault"}``.
* ``GET /einvoice/sale/{uuid}/Status`` (``InvoiceStatus: {Code, Description,
  DetailDescription}``, ``EnvelopeInfo``) and ``GET /earchive/invoices/{uuid}/Status`` (flat
  ``StatusCode``, ``StatusDetail``); 404 for a UUID the channel does not hold.
* ``GET /general/GlobalCompany/Check/TaxNumber/{vkn}``: a list of ``{Name, DocumentType,
  TaxNumber, Title, Type, …}`` (aliases of every document type: ``Invoice``,
  ``DespatchAdvice``), ``[]`` for a non-user.
* Dispatch notes: ``POST /edespatch/Send/Xml?Alias=…`` (a ``DespatchAdvice``; the receiver is
  ``DeliveryCustomerParty``): an e-İrsaliye user at one of its ``DespatchAdvice`` aliases, anyone
  else at GİB's box ``urn:mail:irsaliyepk@gib.gov.tr`` — else 422 2052 (alias not the
  receiver's, GİB's box for a user) or 2054 (not an e-İrsaliye user); 200 ``{"UUID",
  "DespatchNumber"}``; the same 409, 3009 and faults as invoices. ``POST /edespatch/Series``.
  ``GET /edespatch/Sale/{uuid}/Status``: ``DespatchStatus: {Code, Description,
  DetailDescription}`` and ``Answer: {AnswerCode, Description}`` (``waitingForApproval`` until
  :meth:`NilveraFake.answer`); ``GET /edespatch/Sale/Answer/{uuid}/xml``: the answer's UBL-TR
  ``ReceiptAdvice`` (404 until there is one). e-Fatura's status carries ``Answer`` likewise
  (``approved`` / ``rejected`` / ``documentAnsweredAutomatically``).

Fault switches (one-shot, consumed by the next sends in order): ``faults`` — ``"none"`` (this
send goes as usual), ``"500"``, ``"timeout"`` (no answer until the fake stops; nothing
recorded), ``"lost-drop"``, ``"lost-500"``, ``"lost-timeout"`` (the document IS accepted and
recorded, then the connection is dropped, a 500 comes, or no answer); ``errors`` — a Nilvera
error answered instead of processing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, hdrs, web
from lxml import etree

NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
      "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)
CHANNELS = {"einvoice": "efatura", "earchive": "earsiv", "edespatch": "edespatch"}
FAULTS = ("none", "500", "timeout", "lost-drop", "lost-500", "lost-timeout")
GIB_BOX = "urn:mail:irsaliyepk@gib.gov.tr"
UBL = "urn:oasis:names:specification:ubl:schema:xsd:"
ROOTS = {"efatura": f"{{{UBL}Invoice-2}}Invoice", "earsiv": f"{{{UBL}Invoice-2}}Invoice",
         "edespatch": f"{{{UBL}DespatchAdvice-2}}DespatchAdvice"}
#: Where each document names its receiver.
RECEIVERS = {"efatura": "cac:AccountingCustomerParty", "earsiv": "cac:AccountingCustomerParty",
             "edespatch": "cac:DeliveryCustomerParty"}
#: Nilvera's "not answered" word.
NOT_ANSWERED = {"efatura": "unknown", "edespatch": "waitingForApproval"}


@dataclass(frozen=True)
class ReceiptLine:
    """One line of a dispatch note's answer: of the note's line ``line``, the quantities."""

    line: int
    received: str
    short: str = "0"
    rejected: str = "0"
    reason: str | None = None


@dataclass
class Entry:
    """A document Nilvera accepted, with its (settable) state at GİB."""

    uuid: str
    number: str
    channel: str
    profile: str
    alias: str | None
    body: bytes
    gib_code: str = "waiting"
    gib_description: str = "Belge GİB'e iletildi"
    #: Nilvera's ``Answer`` object (None: not answered) and the answer's XML (ReceiptAdvice).
    answer: dict[str, Any] | None = None
    answer_xml: bytes | None = None


@dataclass
class Call:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    authorization: str | None
    content_type: str
    json: Any = None
    form_field: str | None = None
    filename: str | None = None
    file_type: str | None = None
    file: bytes | None = None


def nilvera_error(status: int, code: int, description: str, detail: str = "") -> web.Response:
    return web.json_response({"Message": "HATALI ISTEK", "Errors": [
        {"Code": code, "Description": description, "Detail": detail or description}]},
        status=status)


CALL = web.RequestKey("call", Call)


@dataclass
class NilveraFake:
    api_key: str
    url: str = ""
    #: tax id -> the Check/TaxNumber entries (aliases of every document type).
    recipients: dict[str, list[Any]] = field(default_factory=dict)
    series: dict[str, set[str]] = field(
        default_factory=lambda: {"efatura": set(), "earsiv": set(), "edespatch": set()})
    ledger: list[Entry] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    faults: deque[str] = field(default_factory=deque)
    errors: deque[tuple[int, int, str]] = field(default_factory=deque)
    #: An unknown tax number answers 404 (Nilvera's error shape) instead of ``[]``.
    recipient_404: bool = False
    #: Status answers also name ``InvoiceNumber`` (not in Nilvera's documented schema).
    status_numbers: bool = False
    #: Series registrations are answered 200 but not kept (3009 persists).
    forget_series: bool = False
    #: The next accepted send answers this ``InvoiceNumber`` instead of the document's.
    renumber: str | None = None
    #: Status endpoints answer this HTTP status (e.g. 500) instead of looking.
    status_failure: int | None = None
    #: The recipient check answers this HTTP status instead of looking.
    recipient_failure: int | None = None
    #: The answer's XML endpoint answers this HTTP status instead of looking.
    answer_failure: int | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    # ------------------------------------------------------------------------ test helpers

    def register(self, tax_id: str, *aliases: tuple[str, str]) -> None:
        """Register ``tax_id`` with ``(alias, DocumentType)`` pairs, e.g. ``("urn:mail:
        defaultpk@x", "Invoice")``, ``("urn:mail:irsaliyepk@x", "DespatchAdvice")``."""
        self.recipients[tax_id] = [
            {"Name": name, "DocumentType": kind, "TaxNumber": tax_id, "Title": "Example Ltd",
             "Type": "OZEL", "FirstCreatedTime": "2024-01-02T00:00:00",
             "CreationTime": "2024-01-02T00:00:00"} for name, kind in aliases]

    def invoice_aliases(self, tax_id: str) -> list[str]:
        return [entry["Name"] for entry in self.recipients.get(tax_id, ())
                if entry["DocumentType"] == "Invoice"]

    def despatch_aliases(self, tax_id: str) -> list[str]:
        return [entry["Name"] for entry in self.recipients.get(tax_id, ())
                if entry["DocumentType"] == "DespatchAdvice"]

    def answer(self, uuid: str, code: str, *, lines: Sequence[ReceiptLine] | None = None,
               issued: str = "2026-01-03T11:15:00", description: str | None = None,
               answer_date: str | None = None, xml: bytes | None = None) -> None:
        """The receiver answers the document ``uuid`` with Nilvera's ``AnswerCode`` ``code``;
        a dispatch note's answer XML (a ReceiptAdvice issued ``issued``) holds ``lines`` when
        given, or is ``xml`` as is. ``answer_date`` goes into the status's ``Answer`` object
        (Nilvera's schema does not document one)."""
        entry = self.by_uuid(uuid)
        assert entry is not None
        entry.answer = {"AnswerCode": code, "AnswerNote": None, "Description": description}
        if answer_date is not None:
            entry.answer["AnswerDate"] = answer_date
        if xml is not None:
            entry.answer_xml = xml
        elif lines is not None:
            entry.answer_xml = receipt_advice(entry, lines, issued)

    def by_uuid(self, uuid: str) -> Entry | None:
        return next((entry for entry in self.ledger if entry.uuid == uuid), None)

    def by_number(self, number: str) -> list[Entry]:
        return [entry for entry in self.ledger if entry.number == number]

    def sends(self) -> list[Call]:
        return [call for call in self.calls if call.path.endswith("/Send/Xml")]

    def calls_to(self, suffix: str) -> list[Call]:
        return [call for call in self.calls if call.path.endswith(suffix)]

    def set_gib(self, uuid: str, code: str, description: str) -> None:
        entry = self.by_uuid(uuid)
        assert entry is not None
        entry.gib_code, entry.gib_description = code, description

    # -------------------------------------------------------------------------- the server

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._authorised])
        app.router.add_post("/{api:einvoice|earchive|edespatch}/Send/Xml", self._send)
        app.router.add_post("/{api:einvoice|earchive|edespatch}/Series", self._series)
        app.router.add_get("/einvoice/sale/{uuid}/Status", self._efatura_status)
        app.router.add_get("/earchive/invoices/{uuid}/Status", self._earsiv_status)
        app.router.add_get("/edespatch/Sale/{uuid}/Status", self._edespatch_status)
        app.router.add_get("/edespatch/Sale/Answer/{uuid}/xml", self._answer_xml)
        app.router.add_get("/general/GlobalCompany/Check/TaxNumber/{tax_id}", self._recipient)
        app.router.add_route("*", "/{tail:.*}", self._no_such_api)
        return app

    @web.middleware
    async def _authorised(self, request: web.Request, handler: Any) -> web.StreamResponse:
        call = Call(request.method, request.path, dict(request.query),
                    request.headers.get("Authorization"), request.content_type)
        self.calls.append(call)
        request[CALL] = call
        if call.authorization != f"Bearer {self.api_key}":
            return web.Response(status=401, text="Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def _hold(self) -> None:
        """No answer until the fake stops (the client gives up first)."""
        await self._release.wait()

    async def _send(self, request: web.Request) -> web.StreamResponse:
        call = request[CALL]
        channel = CHANNELS[request.match_info["api"]]
        reader = await request.multipart()
        async for part in reader:
            if isinstance(part, BodyPartReader) and part.name == "file":
                call.form_field, call.filename = part.name, part.filename
                call.file_type = part.headers.get(hdrs.CONTENT_TYPE)
                call.file = bytes(await part.read())
        if call.file is None:
            return nilvera_error(400, 4000, "Dosya bulunamadı")
        fault = self.faults.popleft() if self.faults else None
        assert fault is None or fault in FAULTS, fault
        if fault == "500":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "timeout":
            await self._hold()
            return web.Response(status=500)
        if self.errors:
            status, code, description = self.errors.popleft()
            return nilvera_error(status, code, description)
        try:
            root = etree.fromstring(call.file, _PARSER)
        except etree.XMLSyntaxError:
            return nilvera_error(422, 2015, "Şema/Şematron hatası")
        if root.tag != ROOTS[channel]:
            return nilvera_error(422, 2015, "Şema/Şematron hatası: belge türü bu servise "
                                 "gönderilemez")
        number = root.findtext("cbc:ID", namespaces=NS) or ""
        uuid = root.findtext("cbc:UUID", namespaces=NS) or ""
        profile = root.findtext("cbc:ProfileID", namespaces=NS) or ""
        customer = root.findtext(
            f"{RECEIVERS[channel]}/cac:Party/cac:PartyIdentification/cbc:ID",
            namespaces=NS) or ""
        alias = call.query.get("Alias")
        if channel == "edespatch":
            registered = self.despatch_aliases(customer)
            if not registered and alias != GIB_BOX:
                return nilvera_error(422, 2054, "Alıcı e-İrsaliye mükellefi değildir")
            if registered and alias not in registered:
                return nilvera_error(422, 2052, "Alıcının etiketi kullanımda değildir")
        elif channel == "earsiv":
            if profile != "EARSIVFATURA":
                return nilvera_error(422, 2024, "Belge senaryosu e-Arşiv olmalıdır")
            if self.invoice_aliases(customer):
                return nilvera_error(422, 2025, "Alıcı e-Fatura mükellefidir, e-Arşiv fatura "
                                     "gönderilemez")
        else:
            if profile == "EARSIVFATURA":
                return nilvera_error(422, 2063, "Senaryo e-Arşiv fatura olduğu için e-Fatura "
                                     "olarak gönderilemez")
            if not self.invoice_aliases(customer):
                return nilvera_error(422, 2054, "Alıcı e-Fatura mükellefi değildir")
            if alias not in self.invoice_aliases(customer):
                return nilvera_error(422, 2052, "Alıcının etiketi kullanımda değildir")
        if number[:3] not in self.series[channel]:
            return nilvera_error(422, 3009, "Seri bulunamadı")
        if self.by_uuid(uuid) is not None:
            return nilvera_error(409, 1001, "UUID (ETTN) sistemde kayıtlıdır")
        if self.by_number(number):
            return nilvera_error(409, 1005, "Fatura numarası daha önce kullanılmıştır")
        self.ledger.append(Entry(uuid, number, channel, profile, alias, call.file))
        answered_number, self.renumber = self.renumber or number, None
        number_field = "DespatchNumber" if channel == "edespatch" else "InvoiceNumber"
        if fault == "lost-drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        if fault == "lost-500":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "lost-timeout":
            await self._hold()
        return web.json_response({"UUID": uuid, number_field: answered_number})

    async def _series(self, request: web.Request) -> web.StreamResponse:
        call = request[CALL]
        call.json = await request.json()
        channel = CHANNELS[request.match_info["api"]]
        name = call.json.get("Name") if isinstance(call.json, dict) else None
        if not isinstance(name, str) or len(name) != 3:
            return nilvera_error(422, 2065, "Seri alanı boş olamaz")
        if name in self.series[channel]:
            return nilvera_error(409, 1015, "Kayıt daha önce eklenmiştir")
        if not self.forget_series:
            self.series[channel].add(name)
        return web.json_response({"Name": name, "IsActive": True, "IsDefault": False})

    def _found(self, request: web.Request, channel: str) -> Entry | None:
        entry = self.by_uuid(request.match_info["uuid"])
        return entry if entry is not None and entry.channel == channel else None

    async def _efatura_status(self, request: web.Request) -> web.StreamResponse:
        if self.status_failure is not None:
            return web.Response(status=self.status_failure, text="Internal Server Error")
        entry = self._found(request, "efatura")
        if entry is None:
            return nilvera_error(404, 3004, "Kayıt bulunamadı")
        answer: dict[str, Any] = {
            "InvoiceProfile": entry.profile, "IssueDate": "2026-01-02T00:00:00",
            "Answer": entry.answer or {"AnswerCode": NOT_ANSWERED["efatura"],
                                       "AnswerNote": None, "Description": None},
            "InvoiceStatus": {"Code": entry.gib_code, "Description": entry.gib_description,
                              "DetailDescription": None},
            "EnvelopeInfo": {"UUID": "e5b7c1de-0000-4000-8000-000000000001",
                             "GIBCode": 1300 if entry.gib_code == "succeed" else 1220,
                             "GIBDescription": "İşlem tamamlandı",
                             "CreatedDate": "2026-01-02T00:00:00"}}
        if self.status_numbers:
            answer["InvoiceNumber"] = entry.number
        return web.json_response(answer)

    async def _earsiv_status(self, request: web.Request) -> web.StreamResponse:
        if self.status_failure is not None:
            return web.Response(status=self.status_failure, text="Internal Server Error")
        entry = self._found(request, "earsiv")
        if entry is None:
            return nilvera_error(404, 3004, "Kayıt bulunamadı")
        answer: dict[str, Any] = {"StatusCode": entry.gib_code,
                                  "StatusDetail": entry.gib_description,
                                  "ReportStatus": "Raporlanmadı"}
        if self.status_numbers:
            answer["InvoiceNumber"] = entry.number
        return web.json_response(answer)

    async def _edespatch_status(self, request: web.Request) -> web.StreamResponse:
        if self.status_failure is not None:
            return web.Response(status=self.status_failure, text="Internal Server Error")
        entry = self._found(request, "edespatch")
        if entry is None:
            return nilvera_error(404, 3004, "Kayıt bulunamadı")
        answer: dict[str, Any] = {
            "DespatchProfile": entry.profile, "IssueDate": "2026-01-02T00:00:00",
            "Answer": entry.answer or {"AnswerCode": NOT_ANSWERED["edespatch"],
                                       "AnswerNote": None, "Description": None},
            "DespatchStatus": {"Code": entry.gib_code, "Description": entry.gib_description,
                               "DetailDescription": None}}
        if self.status_numbers:
            answer["DespatchNumber"] = entry.number
        return web.json_response(answer)

    async def _answer_xml(self, request: web.Request) -> web.StreamResponse:
        if self.answer_failure is not None:
            return web.Response(status=self.answer_failure, text="Internal Server Error")
        entry = self._found(request, "edespatch")
        if entry is None or entry.answer_xml is None:
            return nilvera_error(404, 3004, "Kayıt bulunamadı")
        return web.Response(body=entry.answer_xml, content_type="application/xml")

    async def _recipient(self, request: web.Request) -> web.StreamResponse:
        if self.recipient_failure is not None:
            return web.Response(status=self.recipient_failure, text="Service Unavailable")
        entries = self.recipients.get(request.match_info["tax_id"])
        if entries is None and self.recipient_404:
            return nilvera_error(404, 3004, "Mükellef bulunamadı")
        return web.json_response(entries or [])

    async def _no_such_api(self, request: web.Request) -> web.StreamResponse:
        return nilvera_error(404, 3030, "API bulunamadı")

    def release(self) -> None:
        self._release.set()


def receipt_advice(entry: Entry, lines: Sequence[ReceiptLine], issued: str) -> bytes:
    """A receiver's UBL-TR ``ReceiptAdvice`` to the dispatch note ``entry``, one
    ``ReceiptLine`` per line (numbered in order, each referring to the note's line)."""
    cbc, cac = (f"{{{NS[prefix]}}}" for prefix in ("cbc", "cac"))
    nsmap: Any = {None: f"{UBL}ReceiptAdvice-2", **NS}
    root = etree.Element(f"{{{UBL}ReceiptAdvice-2}}ReceiptAdvice", nsmap=nsmap)

    def add(parent: Any, tag: str, text: str | None = None, **attributes: str) -> Any:
        element = etree.SubElement(parent, tag, attributes)
        element.text = text
        return element

    day, clock = issued.split("T")
    for name, value in (("UBLVersionID", "2.1"), ("CustomizationID", "TR1.2"),
                        ("ProfileID", entry.profile), ("ID", "YNT2026000000001"),
                        ("CopyIndicator", "false"),
                        ("UUID", "0b6f0c7e-0000-4000-8000-00000000a115"),
                        ("IssueDate", day), ("IssueTime", clock),
                        ("ReceiptAdviceTypeCode", "SEVK")):
        add(root, cbc + name, value)
    reference = add(root, cac + "DespatchDocumentReference")
    add(reference, cbc + "ID", entry.number)
    add(reference, cbc + "IssueDate", "2026-01-02")
    for index, line in enumerate(lines, 1):
        element = add(root, cac + "ReceiptLine")
        add(element, cbc + "ID", str(index))
        add(element, cbc + "ReceivedQuantity", line.received, unitCode="C62")
        add(element, cbc + "ShortQuantity", line.short, unitCode="C62")
        add(element, cbc + "RejectedQuantity", line.rejected, unitCode="C62")
        if line.reason is not None:
            add(element, cbc + "RejectReason", line.reason)
        add(add(element, cac + "DespatchLineReference"), cbc + "LineID", str(line.line))
        add(add(element, cac + "Item"), cbc + "Name", "Widget")
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8"))


@asynccontextmanager
async def running_nilvera(api_key: str) -> AsyncIterator[NilveraFake]:
    """The fake on a free 127.0.0.1 port, in this event loop; stopped on exit (held answers
    are released first)."""
    fake = NilveraFake(api_key)
    runner = web.AppRunner(fake.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.url = f"http://{host}:{port}"
    try:
        yield fake
    finally:
        fake.release()
        await runner.cleanup()

