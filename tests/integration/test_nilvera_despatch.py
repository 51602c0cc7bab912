"""``NilveraIntegrator`` with dispatch notes (e-İrsaliye, UBL-TR ``DespatchAdvice``) against the
fake of Nilvera's API over real HTTP (tests/nilvera_fake.py): notes sent to the receiver's
e-İrsaliye alias or GİB's box, unknown series registered at ``/edespatch/Series``, resends after
lost responses settled by UUID so that each note is accepted once, the status read back at
``/edespatch/Sale/{UUID}/Status`` with the receiver's answer (every ``AnswerCode`` mapped, a
line-by-line answer's lines from its ReceiptAdvice), TICARIFATURA invoice answers, and the
recipient check telling e-İrsaliye users apart — also through the real ``GuardedIntegrator``."""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gapless.documents import FORMAT as UBL_FORMAT
from gapless.documents import build_issuer, check_despatch_inputs, render_despatch
from gapless.integrator.base import (
    MEDIA_XML,
    AnswerCode,
    AnswerLine,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    GibState,
    PermanentRejection,
    Receipt,
    Recipient,
    TransientIntegratorError,
    WrongChannel,
)
from gapless.integrator.guard import GuardedIntegrator
from gapless.integrator.nilvera import UNKNOWN, NilveraIntegrator, channel_of
from gapless.message import DespatchMessage, validate_message
from gapless.settings import Settings
from tests.integration.test_nilvera_adapter import document as invoice
from tests.nilvera_fake import GIB_BOX, NilveraFake, ReceiptLine, running_nilvera

KEY = "nv-test-key-5c1e0b7d"
ISSUER = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                      postal_zone="34716")
USER = "9876543210"            # an e-Fatura and e-İrsaliye user
DESPATCH_ONLY = "4444444444"   # an e-İrsaliye user only, with two despatch aliases
NON_USER = "5555555555"        # neither
INVOICE_ALIAS = "urn:mail:defaultpk@example.com"
DESPATCH_ALIAS = "urn:mail:irsaliyepk@example.com"
DEPOT_ALIAS = "urn:mail:depo@example.com"
SEALED = datetime(2026, 1, 2, 9, 0, tzinfo=UTC)
ISTANBUL = ZoneInfo("Europe/Istanbul")


def note(number: str, invoice_id: str, *, customer: str = USER,
         alias: str | None = DESPATCH_ALIAS, channel: str | None = "edespatch",
         lines: int = 3, tenant: str = "acme", document_uuid: str | None = None) -> Document:
    """A real dispatch note (gapless's renderer) under ``number``."""
    message = validate_message({
        "document": "despatch", "invoice_id": invoice_id, "tenant": tenant,
        "series": number[:3], "issue_date": "2026-01-02",
        "customer": {"tax_id": customer, "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "despatch": {"despatch_date": "2026-01-02", "despatch_time": "10:00:00",
                     "delivery_address": {"district": "Tuzla", "city": "İstanbul",
                                          "postal_zone": "34940"},
                     "drivers": [{"first_name": "Ali", "family_name": "Yılmaz",
                                  "tckn": "10000000078"}],
                     "license_plate": "34ABC123"},
        "lines": [{"description": f"Widget {n}", "quantity": "12", "unit_code": "C62"}
                  for n in range(1, lines + 1)]})
    assert isinstance(message, DespatchMessage)
    check_despatch_inputs(message, ISSUER)
    fixed = document_uuid or str(uuid_module.uuid5(uuid_module.NAMESPACE_URL,
                                                    f"nilvera-despatch:{tenant}:{invoice_id}"))
    body = render_despatch(message, number=number, uuid=uuid_module.UUID(fixed),
                           sealed_at=SEALED, tz="Europe/Istanbul", issuer=ISSUER)
    return Document.of(tenant=tenant, number=number, invoice_id=invoice_id, uuid=fixed,
                       body=body, media_type=MEDIA_XML, format=UBL_FORMAT, channel=channel,
                       alias=alias)


def settings_for(url: str, **changes: Any) -> Settings:
    return Settings(nilvera_url=url, nilvera_api_key=KEY,
                    integrator_timeout_s=changes.pop("timeout", 2.0), **changes)


@pytest.fixture
async def fake() -> AsyncIterator[NilveraFake]:
    async with running_nilvera(KEY) as nilvera:
        nilvera.register(USER, (INVOICE_ALIAS, "Invoice"), (DESPATCH_ALIAS, "DespatchAdvice"))
        nilvera.register(DESPATCH_ONLY, (DESPATCH_ALIAS, "DespatchAdvice"),
                         (DEPOT_ALIAS, "DespatchAdvice"), (DESPATCH_ALIAS, "DespatchAdvice"))
        nilvera.series["edespatch"].add("IRS")
        nilvera.series["efatura"].add("ABC")
        yield nilvera


@pytest.fixture
async def adapter(fake: NilveraFake) -> AsyncIterator[NilveraIntegrator]:
    integrator = NilveraIntegrator(settings_for(fake.url, timeout=0.3))
    yield integrator
    await integrator.aclose()


# ------------------------------------------------------------------------------------ send


def test_a_despatch_advice_goes_edespatch_by_its_channel_or_its_root() -> None:
    assert channel_of(note("IRS2026000000001", "n")) == "edespatch"
    assert channel_of(note("IRS2026000000001", "n", channel=None)) == "edespatch"
    with pytest.raises(PermanentRejection, match="unknown channel 'eirsaliye'"):
        channel_of(note("IRS2026000000001", "n", channel="eirsaliye"))


async def test_a_note_goes_to_the_receivers_alias_or_gibs_box(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    registered = note("IRS2026000000001", "wh-1")
    assert await adapter.send(registered) == Receipt("acme", "IRS2026000000001", "wh-1",
                                                     registered.uuid)
    second = note("IRS2026000000002", "wh-2", customer=DESPATCH_ONLY, alias=DEPOT_ALIAS)
    assert (await adapter.send(second)).number == "IRS2026000000002"
    box = note("IRS2026000000003", "wh-3", customer=NON_USER, alias=GIB_BOX, channel=None)
    assert (await adapter.send(box)).uuid == box.uuid

    calls = fake.sends()
    assert [(call.path, call.query) for call in calls] == [
        ("/edespatch/Send/Xml", {"Alias": DESPATCH_ALIAS}),
        ("/edespatch/Send/Xml", {"Alias": DEPOT_ALIAS}),
        ("/edespatch/Send/Xml", {"Alias": GIB_BOX})]
    for call, sent in zip(calls, (registered, second, box), strict=True):
        assert call.authorization == f"Bearer {KEY}"
        assert (call.form_field, call.filename, call.file_type) == (
            "file", f"{sent.uuid}.xml", "application/xml")
        assert call.file == sent.body
    assert [(entry.number, entry.channel, entry.alias) for entry in fake.ledger] == [
        ("IRS2026000000001", "edespatch", DESPATCH_ALIAS),
        ("IRS2026000000002", "edespatch", DEPOT_ALIAS),
        ("IRS2026000000003", "edespatch", GIB_BOX)]


async def test_a_note_without_alias_is_refused_before_any_call(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    for channel in ("edespatch", None):
        with pytest.raises(PermanentRejection, match=r"no recipient alias.*GİB's box"):
            await adapter.send(note("IRS2026000000001", "wh-1", alias=None, channel=channel))
    assert fake.calls == []


@pytest.mark.parametrize(("customer", "alias", "code"), [
    pytest.param(USER, GIB_BOX, 2052, id="gibs-box-for-a-registered-receiver"),
    pytest.param(USER, INVOICE_ALIAS, 2052, id="an-invoice-alias"),
    pytest.param(NON_USER, DESPATCH_ALIAS, 2054, id="an-alias-for-an-unregistered-receiver"),
])
async def test_an_alias_that_is_not_the_receivers_is_wrong_channel(
        adapter: NilveraIntegrator, fake: NilveraFake, customer: str, alias: str,
        code: int) -> None:
    with pytest.raises(WrongChannel) as wrong:
        await adapter.send(note("IRS2026000000001", "wh-1", customer=customer, alias=alias))
    assert wrong.value.reason.startswith(f"Nilvera {code}: ")
    assert fake.ledger == []


async def test_an_unknown_series_is_registered_at_edespatch_and_the_note_resent_once(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    receipt = await adapter.send(note("SVK2026000000001", "wh-1"))
    assert receipt.number == "SVK2026000000001"
    [series] = fake.calls_to("/Series")
    assert series.path == "/edespatch/Series"
    assert series.json == {"Name": "SVK", "IsActive": True, "IsDefault": False}
    assert series.authorization == f"Bearer {KEY}"
    assert "SVK" in fake.series["edespatch"]
    assert "SVK" not in fake.series["efatura"]
    await adapter.send(note("SVK2026000000002", "wh-2"))
    assert (len(fake.sends()), len(fake.calls_to("/Series"))) == (3, 1)

    fake.forget_series = True
    with pytest.raises(PermanentRejection, match="after registering series ZZZ"):
        await adapter.send(note("ZZZ2026000000001", "wh-3"))
    assert [entry.number for entry in fake.ledger] == ["SVK2026000000001", "SVK2026000000002"]


@pytest.mark.parametrize("mode", ["lost-drop", "lost-500", "lost-timeout"])
async def test_notes_are_accepted_once_each_after_lost_responses_and_3009(
        adapter: NilveraIntegrator, fake: NilveraFake, mode: str) -> None:
    notes = [note(f"IRS2026{n:09d}", f"wh-{n}") for n in range(1, 4)]
    # A series Nilvera does not know: 3009, registration, then the resend's answer is lost.
    notes += [note(f"NEW2026{n:09d}", f"new-{n}", customer=NON_USER, alias=GIB_BOX)
              for n in range(1, 3)]
    for sent in notes:
        fake.faults.extend(["none", mode] if sent.number == "NEW2026000000001" else [mode])
        with pytest.raises(TransientIntegratorError):
            await adapter.send(sent)
        assert fake.by_uuid(sent.uuid) is not None  # accepted, the answer lost
        with pytest.raises(DuplicateOfMine) as mine:
            await adapter.send(sent)
        assert mine.value.receipt == Receipt(sent.tenant, sent.number, sent.invoice_id,
                                             sent.uuid)
        # The 409 was settled in e-İrsaliye first.
        assert fake.calls_to("/Status")[-1].path == f"/edespatch/Sale/{sent.uuid}/Status"
        found = await adapter.lookup_uuid(sent.tenant, sent.uuid)
        assert found == Receipt(sent.tenant, UNKNOWN, UNKNOWN, sent.uuid)
    numbers = [entry.number for entry in fake.ledger]
    assert sorted(numbers) == sorted(sent.number for sent in notes)
    assert len(set(numbers)) == len(numbers) == len(notes)
    assert [call.json["Name"] for call in fake.calls_to("/Series")] == ["NEW"]


async def test_a_number_held_by_another_note_or_our_uuid_elsewhere_is_an_alarm(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    first = note("IRS2026000000001", "wh-1")
    await adapter.send(first)
    with pytest.raises(DuplicateOfAnother) as another:
        await adapter.send(note("IRS2026000000001", "wh-2"))
    assert not another.value.uuid_elsewhere

    fake.status_numbers = True  # Nilvera names the number: DespatchNumber
    with pytest.raises(DuplicateOfAnother) as elsewhere:
        await adapter.send(note("IRS2026000000002", "wh-1", document_uuid=first.uuid))
    assert elsewhere.value.holder_number == "IRS2026000000001"
    found = await adapter.lookup_uuid("acme", first.uuid)
    assert found is not None
    assert found.number == "IRS2026000000001"

    fake.renumber = "IRS2026000000099"
    with pytest.raises(DuplicateOfAnother) as renumbered:
        await adapter.send(note("IRS2026000000003", "wh-3"))
    assert renumbered.value.holder_number == "IRS2026000000099"


# ---------------------------------------------------------------------- status and answers


async def test_the_notes_gib_status_is_read_at_edespatch(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    sent = note("IRS2026000000001", "wh-1")
    await adapter.send(sent)
    fake.calls.clear()

    pending = await adapter.status("acme", sent.uuid)
    assert pending is not None
    assert (pending.state, pending.channel, pending.answer) == (
        GibState.PENDING, "edespatch", None)
    assert [call.path for call in fake.calls] == [
        f"/einvoice/sale/{sent.uuid}/Status", f"/earchive/invoices/{sent.uuid}/Status",
        f"/edespatch/Sale/{sent.uuid}/Status"]

    fake.calls.clear()
    fake.set_gib(sent.uuid, "succeed", "İrsaliye GİB tarafından kabul edildi")
    accepted = await adapter.status("acme", sent.uuid, channel="edespatch")
    assert accepted is not None
    assert (accepted.state, accepted.detail) == (GibState.ACCEPTED,
                                                 "İrsaliye GİB tarafından kabul edildi")
    assert [call.path for call in fake.calls] == [f"/edespatch/Sale/{sent.uuid}/Status"]

    fake.set_gib(sent.uuid, "error", f"Alıcı {USER} hatalı")
    refused = await adapter.status("acme", sent.uuid, channel="edespatch")
    assert refused is not None
    assert (refused.state, refused.detail) == (GibState.REFUSED, "Alıcı … hatalı")

    assert await adapter.status("acme", str(uuid_module.uuid4()), channel="edespatch") is None
    with pytest.raises(ValueError, match="unknown channel 'eirsaliye'"):
        await adapter.status("acme", sent.uuid, channel="eirsaliye")


ALL_RECEIVED = [ReceiptLine(n, "12") for n in (1, 2, 3)]
ALL_REJECTED = [ReceiptLine(n, "0", rejected="12", reason="Hasarlı") for n in (1, 2, 3)]


@pytest.mark.parametrize(("word", "code", "lines", "expected"), [
    pytest.param("acceptAll", AnswerCode.KABUL, ALL_RECEIVED,
                 tuple(AnswerLine(n, Decimal(12), Decimal(0), Decimal(0)) for n in (1, 2, 3)),
                 id="acceptAll"),
    pytest.param("rejectAll", AnswerCode.RED, ALL_REJECTED,
                 tuple(AnswerLine(n, Decimal(0), Decimal(0), Decimal(12), "Hasarlı")
                       for n in (1, 2, 3)), id="rejectAll"),
    pytest.param("documentAnsweredAutomatically", AnswerCode.KABUL, None, (),
                 id="documentAnsweredAutomatically-without-xml"),
    pytest.param("approved", AnswerCode.KABUL, None, (), id="approved"),
    pytest.param("rejected", AnswerCode.RED, None, (), id="rejected"),
])
async def test_each_answer_code_of_a_note_maps_to_gaplesss_answer(
        adapter: NilveraIntegrator, fake: NilveraFake, word: str, code: AnswerCode,
        lines: list[ReceiptLine] | None, expected: tuple[AnswerLine, ...]) -> None:
    sent = note("IRS2026000000001", "wh-1")
    await adapter.send(sent)
    fake.set_gib(sent.uuid, "succeed", "Kabul edildi")
    fake.answer(sent.uuid, word, lines=lines)
    status = await adapter.status("acme", sent.uuid)
    assert status is not None
    assert status.state is GibState.ACCEPTED  # an answer never changes GİB's verdict
    assert status.answer is not None
    assert (status.answer.code, status.answer.lines) == (code, expected)
    if lines is not None:  # dated by the answer's XML, in GİB's time zone
        assert status.answer.at == datetime(2026, 1, 3, 11, 15, tzinfo=ISTANBUL)
        assert status.answer.at.astimezone(UTC) == datetime(2026, 1, 3, 8, 15, tzinfo=UTC)
    assert fake.calls_to("/xml")[-1].path == f"/edespatch/Sale/Answer/{sent.uuid}/xml"


async def test_a_note_answered_line_by_line_is_kismikabul_with_its_lines(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    sent = note("IRS2026000000001", "wh-1", lines=3)
    await adapter.send(sent)
    fake.set_gib(sent.uuid, "succeed", "Kabul edildi")

    waiting = await adapter.status("acme", sent.uuid)
    assert waiting is not None
    assert waiting.answer is None  # waitingForApproval
    assert fake.calls_to("/xml") == []

    # Answered line by line, but Nilvera has no XML yet: not answered as far as gapless knows.
    fake.answer(sent.uuid, "documentAnswered")
    early = await adapter.status("acme", sent.uuid)
    assert early is not None
    assert early.answer is None
    assert early.state is GibState.ACCEPTED

    fake.answer(sent.uuid, "documentAnswered", issued="2026-01-04T16:45:30", lines=[
        ReceiptLine(1, "10", short="2"),
        ReceiptLine(3, "7.5", rejected="4.5", reason=f"Kırık ambalaj;\n  alıcı {USER}")])
    status = await adapter.status("acme", sent.uuid)
    assert status is not None
    assert status.answer is not None
    assert status.answer.code is AnswerCode.KISMIKABUL
    assert status.answer.at == datetime(2026, 1, 4, 16, 45, 30, tzinfo=ISTANBUL)
    # The lines name the note's lines (DespatchLineReference), not the answer's own numbering.
    assert status.answer.lines == (
        AnswerLine(1, Decimal(10), Decimal(2), Decimal(0), None),
        AnswerLine(3, Decimal("7.5"), Decimal(0), Decimal("4.5"),
                   "Kırık ambalaj; alıcı …"))


async def test_an_answer_xml_nilvera_cannot_give_or_gapless_cannot_read(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    sent = note("IRS2026000000001", "wh-1")
    await adapter.send(sent)
    fake.answer(sent.uuid, "documentAnswered", lines=[ReceiptLine(1, "1")])
    fake.answer_failure = 503
    with pytest.raises(TransientIntegratorError, match="answer of UUID"):
        await adapter.status("acme", sent.uuid)
    fake.answer_failure = None

    for junk in (b"<not-xml", b"<Invoice xmlns='urn:oasis:names:specification:ubl:schema:"
                 b"xsd:Invoice-2'/>", _receipt_with_quantity("-3"), _receipt_with_quantity("x")):
        fake.answer(sent.uuid, "documentAnswered", xml=junk)
        status = await adapter.status("acme", sent.uuid)
        assert status is not None
        assert status.answer is not None
        # The code is known; the lines are not: shown as answered, with no lines.
        assert (status.answer.code, status.answer.lines) == (AnswerCode.KISMIKABUL, ())


def _receipt_with_quantity(quantity: str) -> bytes:
    return (b"<ReceiptAdvice xmlns='urn:oasis:names:specification:ubl:schema:xsd:ReceiptAdvice-2'"
            b" xmlns:cac='urn:oasis:names:specification:ubl:schema:xsd:"
            b"CommonAggregateComponents-2' xmlns:cbc='urn:oasis:names:specification:ubl:schema:"
            b"xsd:CommonBasicComponents-2'><cbc:IssueDate>2026-01-03</cbc:IssueDate>"
            b"<cac:ReceiptLine><cbc:ID>1</cbc:ID><cbc:ReceivedQuantity unitCode='C62'>"
            + quantity.encode() + b"</cbc:ReceivedQuantity></cac:ReceiptLine></ReceiptAdvice>")


@pytest.mark.parametrize(("word", "code"), [
    ("approved", AnswerCode.KABUL),
    ("documentAnsweredAutomatically", AnswerCode.KABUL),
    ("rejected", AnswerCode.RED),
    ("unknown", None),
    ("documentAnswered", None),  # a line-by-line answer is a dispatch note's only
])
async def test_a_commercial_invoices_answer_is_read_from_its_efatura_status(
        adapter: NilveraIntegrator, fake: NilveraFake, word: str,
        code: AnswerCode | None) -> None:
    sent = invoice("ABC2026000000001", "inv-1", profile="TICARIFATURA", alias=INVOICE_ALIAS)
    await adapter.send(sent)
    fake.set_gib(sent.uuid, "succeed", "Kabul edildi")
    before = datetime.now(UTC)
    fake.answer(sent.uuid, word, description="Fiyat hatalı")
    status = await adapter.status("acme", sent.uuid)
    after = datetime.now(UTC)
    assert status is not None
    assert (status.state, status.channel) == (GibState.ACCEPTED, "efatura")
    if code is None:
        assert status.answer is None
        return
    assert status.answer is not None
    assert (status.answer.code, status.answer.lines) == (code, None)
    # Nilvera's status tells no answer date: the answer is dated when gapless learnt it.
    assert before <= status.answer.at <= after
    assert fake.calls_to("/xml") == []  # an invoice's answer has no lines to read

    fake.answer(sent.uuid, word, answer_date="2026-01-05T09:30:00")
    dated = await adapter.status("acme", sent.uuid)
    assert dated is not None
    assert dated.answer is not None
    assert dated.answer.at == datetime(2026, 1, 5, 9, 30, tzinfo=ISTANBUL)


# ------------------------------------------------------------------------ recipient check


async def test_the_recipient_check_tells_e_irsaliye_users_apart(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    assert await adapter.recipient(USER) == Recipient(
        USER, True, (INVOICE_ALIAS,), despatch_registered=True,
        despatch_aliases=(DESPATCH_ALIAS,))
    # Two despatch aliases, in Nilvera's order, without repeats; no invoice alias.
    assert await adapter.recipient(DESPATCH_ONLY) == Recipient(
        DESPATCH_ONLY, False, (), despatch_registered=True,
        despatch_aliases=(DESPATCH_ALIAS, DEPOT_ALIAS))
    assert await adapter.recipient(NON_USER) == Recipient(NON_USER, False, ())
    fake.register(NON_USER, (INVOICE_ALIAS, "Invoice"))
    assert await adapter.recipient(NON_USER) == Recipient(NON_USER, True, (INVOICE_ALIAS,))
    # The word's case is not significant.
    fake.register(NON_USER, (DEPOT_ALIAS, "DESPATCHADVICE"))
    recipient = await adapter.recipient(NON_USER)
    assert (recipient.despatch_registered, recipient.despatch_aliases) == (True, (DEPOT_ALIAS,))
    assert all(call.path.startswith("/general/GlobalCompany/Check/TaxNumber/")
               for call in fake.calls)


# -------------------------------------------------------------------- through the Guard


async def test_through_the_guard_a_lost_note_is_accepted_once_and_its_answer_read_back(
        fake: NilveraFake) -> None:
    settings = settings_for(fake.url, timeout=0.3, retry_wait_s=0.01, retry_max_s=2.0)
    guard = GuardedIntegrator(NilveraIntegrator(settings), settings, name="test-nilvera-irs")
    try:
        assert guard.follows_gib_status
        recipient = await guard.recipient("acme", DESPATCH_ONLY)
        assert recipient.despatch_aliases == (DESPATCH_ALIAS, DEPOT_ALIAS)

        sent = note("NEW2026000000001", "wh-1", customer=DESPATCH_ONLY,
                    alias=recipient.despatch_aliases[0])
        fake.faults.extend(["none", "lost-500"])  # 3009, then the accepted resend's answer lost
        # The guard retries the transient failure; the resend is settled by UUID.
        with pytest.raises(DuplicateOfMine) as mine:
            await guard.send(sent)
        assert mine.value.receipt == Receipt("acme", sent.number, sent.invoice_id, sent.uuid)
        assert [entry.number for entry in fake.ledger] == [sent.number]
        assert await guard.lookup_uuid("acme", sent.uuid) == Receipt(
            "acme", UNKNOWN, UNKNOWN, sent.uuid)

        fake.set_gib(sent.uuid, "succeed", "Kabul edildi")
        fake.answer(sent.uuid, "documentAnswered",
                    lines=[ReceiptLine(1, "12"), ReceiptLine(2, "11", short="1"),
                           ReceiptLine(3, "0", rejected="12", reason="Yanlış ürün")])
        status = await guard.status("acme", sent.uuid)
        assert status is not None
        assert status.state is GibState.ACCEPTED
        assert status.answer is not None
        assert status.answer.code is AnswerCode.KISMIKABUL
        assert [(line.line, line.received, line.short, line.rejected, line.reason)
                for line in status.answer.lines or ()] == [
            (1, Decimal(12), Decimal(0), Decimal(0), None),
            (2, Decimal(11), Decimal(1), Decimal(0), None),
            (3, Decimal(0), Decimal(0), Decimal(12), "Yanlış ürün")]
        assert guard.state == "closed"
    finally:
        await guard.aclose()
