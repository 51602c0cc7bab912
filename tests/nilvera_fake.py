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
  TaxNumber, Title, Type, …}`` (aliases of every document type), ``[]`` for a non-user.

Fault switches (one-shot, consumed by the next sends in order): ``faults`` —
``"500"``, ``"timeout"`` (no answer until the fake stops; nothing recorded), ``"lost-drop"``,
``"lost-500"``, ``"lost-timeout"`` (the document IS accepted and recorded, then the connection is
dropped, a 500 comes, or no answer); ``errors`` — a Nilvera error answered instead of processing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, hdrs, web
from lxml import etree

NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
      "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)
CHANNELS = {"einvoice": "efatura", "earchive": "earsiv"}
FAULTS = ("500", "timeout", "lost-drop", "lost-500", "lost-timeout")


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
        default_factory=lambda: {"efatura": set(), "earsiv": set()})
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
        app.router.add_post("/{api:einvoice|earchive}/Send/Xml", self._send)
        app.router.add_post("/{api:einvoice|earchive}/Series", self._series)
        app.router.add_get("/einvoice/sale/{uuid}/Status", self._efatura_status)
        app.router.add_get("/earchive/invoices/{uuid}/Status", self._earsiv_status)
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
        number = root.findtext("cbc:ID", namespaces=NS) or ""
        uuid = root.findtext("cbc:UUID", namespaces=NS) or ""
        profile = root.findtext("cbc:ProfileID", namespaces=NS) or ""
        customer = root.findtext(
            "cac:AccountingCustomerParty/cac:Party/cac:PartyIdentification/cbc:ID",
            namespaces=NS) or ""
        alias = call.query.get("Alias")
        if channel == "earsiv":
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
        if fault == "lost-drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        if fault == "lost-500":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "lost-timeout":
            await self._hold()
        return web.json_response({"UUID": uuid, "InvoiceNumber": answered_number})

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
            "Answer": {"AnswerCode": "unknown", "AnswerNote": None, "Description": None},
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

