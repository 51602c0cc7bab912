"""``NilveraIntegrator`` against a fake of Nilvera's API over real HTTP (tests/nilvera_fake.py):
the request shapes Nilvera documents, every answer classified into gapless's outcomes, the series
registration retry, the recipient check's alias filter, status lookups, and — with lost
responses — resends settled by UUID so that each number is accepted once."""

from __future__ import annotations

import asyncio
import uuid as uuid_module
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gapless.documents import FORMAT as UBL_FORMAT
from gapless.documents import build_issuer, check_ubl_inputs, render_ubl_tr
from gapless.errors import ConfigurationError
from gapless.integrator.base import (
    MEDIA_XML,
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    FollowsGibStatus,
    GibState,
    Integrator,
    IntegratorAuthError,
    IntegratorError,
    PermanentRejection,
    Receipt,
    Recipient,
    TransientIntegratorError,
    WrongChannel,
    follows_gib_status,
    load_integrator,
)
from gapless.integrator.nilvera import (
    UNKNOWN,
    NilveraIntegrator,
    channel_of,
)
from gapless.message import validate_message
from gapless.settings import Settings
from tests.helpers import free_port, json_document
from tests.nilvera_fake import NilveraFake, running_nilvera

KEY = "nv-test-key-5c1e0b7d"
ISSUER = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul")
USER = "9876543210"        # a registered e-Fatura user
NON_USER = "5555555555"    # not registered
DESPATCH_ONLY = "4444444444"  # registered for despatch advices only
ALIAS = "urn:mail:defaultpk@example.com"
SECOND_ALIAS = "urn:mail:muhasebe@example.com"
DESPATCH_ALIAS = "urn:mail:irsaliyepk@example.com"
SEALED = datetime(2026, 1, 2, 9, 0, tzinfo=UTC)


def document(number: str, invoice_id: str, *, channel: str | None = "efatura",
             profile: str | None = None, customer: str = USER, alias: str | None = ALIAS,
             document_uuid: str | None = None, tenant: str = "acme") -> Document:
    """A real UBL-TR document (gapless's renderer) under ``number``."""
    profile = profile or ("EARSIVFATURA" if channel == "earsiv" else "TEMELFATURA")
    message = validate_message({
        "invoice_id": invoice_id, "tenant": tenant, "series": number[:3],
        "issue_date": "2026-01-02", "currency": "TRY", "profile": profile,
        "customer": {"tax_id": customer, "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}]})
    check_ubl_inputs(message, ISSUER)
    fixed = document_uuid or str(uuid_module.uuid5(uuid_module.NAMESPACE_URL,
                                                    f"nilvera-test:{tenant}:{invoice_id}"))
    body = render_ubl_tr(message, number=number, uuid=uuid_module.UUID(fixed), sealed_at=SEALED,
                         tz="Europe/Istanbul", issuer=ISSUER)
    return Document.of(tenant=tenant, number=number, invoice_id=invoice_id, uuid=fixed,
                       body=body, media_type=MEDIA_XML, format=UBL_FORMAT, channel=channel,
                       alias=alias if channel != "earsiv" else None)


def earsiv(number: str, invoice_id: str, **changes: Any) -> Document:
    changes.setdefault("customer", NON_USER)
    return document(number, invoice_id, channel="earsiv", alias=None, **changes)


def settings_for(url: str, **changes: Any) -> Settings:
    return Settings(nilvera_url=url, nilvera_api_key=changes.pop("key", KEY),
                    integrator_timeout_s=changes.pop("timeout", 2.0), **changes)


@pytest.fixture
async def fake() -> AsyncIterator[NilveraFake]:
    async with running_nilvera(KEY) as nilvera:
        nilvera.register(USER, (ALIAS, "Invoice"), (DESPATCH_ALIAS, "DespatchAdvice"),
                         (SECOND_ALIAS, "Invoice"))
        nilvera.register(DESPATCH_ONLY, (DESPATCH_ALIAS, "DespatchAdvice"))
        nilvera.series["efatura"].add("ABC")
        nilvera.series["earsiv"].add("ARS")
        yield nilvera


@pytest.fixture
async def adapter(fake: NilveraFake) -> AsyncIterator[NilveraIntegrator]:
    integrator = NilveraIntegrator(settings_for(fake.url))
    yield integrator
    await integrator.aclose()


async def outcome(call: Any) -> Receipt | IntegratorError:
    try:
        result: Receipt = await call
    except IntegratorError as exc:
        return exc
    return result


# --------------------------------------------------------------------------- configuration


def test_load_integrator_builds_the_nilvera_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_INTEGRATOR_ADAPTER", "gapless.integrator.nilvera:NilveraIntegrator")
    monkeypatch.setenv("GAPLESS_NILVERA_API_KEY", KEY)
    adapter = load_integrator(Settings())
    assert isinstance(adapter, NilveraIntegrator)
    assert isinstance(adapter, Integrator)
    assert isinstance(adapter, FollowsGibStatus)  # gapless recovery follows GİB's verdict
    assert follows_gib_status(adapter)
    assert KEY not in repr(adapter)
    assert KEY not in repr(Settings())


def test_an_empty_api_key_stops_the_process_at_start_up() -> None:
    settings = Settings(integrator_adapter="gapless.integrator.nilvera:NilveraIntegrator",
                        nilvera_api_key="")
    with pytest.raises(ConfigurationError, match="GAPLESS_NILVERA_API_KEY"):
        load_integrator(settings)


def test_the_channel_is_the_documents_else_its_profile() -> None:
    assert channel_of(document("ABC2026000000001", "i", channel="efatura")) == "efatura"
    assert channel_of(earsiv("ARS2026000000001", "i")) == "earsiv"
    assert channel_of(document("ABC2026000000001", "i", channel=None)) == "efatura"
    assert channel_of(document("ARS2026000000001", "i", channel=None,
                               profile="EARSIVFATURA")) == "earsiv"
    with pytest.raises(PermanentRejection, match="UBL-TR XML only"):
        channel_of(json_document("acme", "N1", "i"))


# ------------------------------------------------------------------------------------ send


async def test_efatura_send_shape_auth_multipart_and_alias(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    doc = document("ABC2026000000001", "inv-1", alias=SECOND_ALIAS)
    receipt = await adapter.send(doc)
    assert receipt == Receipt("acme", "ABC2026000000001", "inv-1", doc.uuid)
    assert receipt.uuid == doc.uuid
    [call] = fake.sends()
    assert (call.method, call.path) == ("POST", "/einvoice/Send/Xml")
    assert call.query == {"Alias": SECOND_ALIAS}
    assert call.authorization == f"Bearer {KEY}"
    assert call.content_type == "multipart/form-data"
    assert (call.form_field, call.filename, call.file_type) == (
        "file", f"{doc.uuid}.xml", "application/xml")
    assert call.file == doc.body
    [entry] = fake.ledger
    assert (entry.number, entry.uuid, entry.channel, entry.alias) == (
        "ABC2026000000001", doc.uuid, "efatura", SECOND_ALIAS)


async def test_earsiv_goes_to_the_earsiv_endpoint_without_alias(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    doc = earsiv("ARS2026000000001", "inv-1")
    assert (await adapter.send(doc)).number == "ARS2026000000001"
    [call] = fake.sends()
    assert (call.path, call.query) == ("/earchive/Send/Xml", {})
    assert fake.ledger[0].channel == "earsiv"


async def test_a_document_without_channel_goes_by_its_profile(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    await adapter.send(document("ARS2026000000001", "inv-a", channel=None,
                                profile="EARSIVFATURA", customer=NON_USER, alias=None))
    await adapter.send(document("ABC2026000000001", "inv-f", channel=None))
    assert [call.path for call in fake.sends()] == ["/earchive/Send/Xml", "/einvoice/Send/Xml"]


async def test_an_efatura_without_alias_is_refused_before_any_call(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    with pytest.raises(PermanentRejection, match="no recipient alias"):
        await adapter.send(document("ABC2026000000001", "inv-1", alias=None))
    with pytest.raises(PermanentRejection, match="UBL-TR XML only"):
        await adapter.send(json_document("acme", "ABC2026000000002", "inv-2"))
    assert fake.calls == []


async def test_a_resend_is_settled_by_uuid_and_a_taken_number_is_an_alarm(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    doc = document("ABC2026000000001", "inv-1")
    receipt = await adapter.send(doc)
    with pytest.raises(DuplicateOfMine) as mine:
        await adapter.send(doc)
    assert mine.value.receipt == receipt
    assert mine.value.receipt.uuid == doc.uuid
    assert fake.calls_to("/Status")[-1].path == f"/einvoice/sale/{doc.uuid}/Status"

    # Another invoice (another UUID) with the same number: 409 1005, our UUID is not there.
    with pytest.raises(DuplicateOfAnother) as another:
        await adapter.send(document("ABC2026000000001", "inv-2"))
    assert (another.value.number, another.value.holder_invoice_id) == (
        "ABC2026000000001", UNKNOWN)
    assert not another.value.uuid_elsewhere
    assert len(fake.ledger) == 1


async def test_our_uuid_under_another_number_is_an_alarm(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fake.status_numbers = True
    first = document("ABC2026000000001", "inv-1")
    await adapter.send(first)
    with pytest.raises(DuplicateOfAnother) as alarm:
        await adapter.send(document("ABC2026000000002", "inv-1", document_uuid=first.uuid))
    assert alarm.value.uuid_elsewhere
    assert alarm.value.holder_number == "ABC2026000000001"

    # Nilvera accepting a document under a number of its own choosing is the same alarm.
    fake.renumber = "ABC2026000000099"
    with pytest.raises(DuplicateOfAnother) as renumbered:
        await adapter.send(document("ABC2026000000003", "inv-3"))
    assert renumbered.value.holder_number == "ABC2026000000099"


async def test_a_409_for_a_uuid_nilvera_does_not_hold_is_an_alarm(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fake.errors.append((409, 1001, "UUID (ETTN) sistemde kayıtlıdır"))
    with pytest.raises(DuplicateOfAnother) as alarm:
        await adapter.send(document("ABC2026000000001", "inv-1"))
    assert alarm.value.holder_invoice_id == UNKNOWN
    # Every channel was asked before concluding.
    assert [call.path.split("/")[1] for call in fake.calls_to("/Status")] == [
        "einvoice", "earchive", "edespatch"]


@pytest.mark.parametrize("channel", ["efatura", "earsiv"])
async def test_an_unknown_series_is_registered_and_the_send_retried_once(
        adapter: NilveraIntegrator, fake: NilveraFake, channel: str) -> None:
    doc = (document("XYZ2026000000001", "inv-1") if channel == "efatura"
           else earsiv("XYZ2026000000001", "inv-1"))
    receipt = await adapter.send(doc)
    assert receipt.number == "XYZ2026000000001"
    api = "einvoice" if channel == "efatura" else "earchive"
    [series] = fake.calls_to("/Series")
    assert series.path == f"/{api}/Series"
    assert series.json == {"Name": "XYZ", "IsActive": True, "IsDefault": False}
    assert series.authorization == f"Bearer {KEY}"
    assert len(fake.sends()) == 2
    assert "XYZ" in fake.series[channel]

    # Known now: the next document of the series is sent once, nothing registered.
    await adapter.send(document("XYZ2026000000002", "inv-2") if channel == "efatura"
                       else earsiv("XYZ2026000000002", "inv-2"))
    assert (len(fake.sends()), len(fake.calls_to("/Series"))) == (3, 1)


async def test_workers_registering_one_series_at_once_both_send(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    docs = [document(f"XYZ2026{n:09d}", f"inv-{n}") for n in (1, 2)]
    receipts = await asyncio.gather(*(adapter.send(doc) for doc in docs))
    assert [receipt.number for receipt in receipts] == [doc.number for doc in docs]
    # Whoever registered second was told the series exists (409), and sent anyway.
    assert len(fake.calls_to("/Series")) in (1, 2)
    assert sorted(entry.number for entry in fake.ledger) == [doc.number for doc in docs]


async def test_a_series_registered_meanwhile_counts_as_registered(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fake.errors.append((422, 3009, "Seri bulunamadı"))  # another worker registers it meanwhile
    receipt = await adapter.send(document("ABC2026000000001", "inv-1"))
    assert receipt.number == "ABC2026000000001"
    [series] = fake.calls_to("/Series")
    assert series.json == {"Name": "ABC", "IsActive": True, "IsDefault": False}
    assert len(fake.sends()) == 2


async def test_a_series_that_stays_unknown_is_rejected_after_exactly_one_retry(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fake.forget_series = True
    with pytest.raises(PermanentRejection, match="3009") as refused:
        await adapter.send(document("XYZ2026000000001", "inv-1"))
    assert "after registering series XYZ" in refused.value.reason
    assert (len(fake.sends()), len(fake.calls_to("/Series"))) == (2, 1)
    assert fake.ledger == []


@pytest.mark.parametrize(("make", "code"), [
    pytest.param(lambda: earsiv("ARS2026000000001", "inv-1", customer=USER), 2025,
                 id="earsiv-to-an-efatura-user"),
    pytest.param(lambda: document("ABC2026000000001", "inv-1", customer=NON_USER), 2054,
                 id="efatura-to-a-non-user"),
    pytest.param(lambda: document("ABC2026000000001", "inv-1", customer=DESPATCH_ONLY,
                                  alias=DESPATCH_ALIAS), 2054,
                 id="efatura-to-a-despatch-only-alias"),
    pytest.param(lambda: document("ABC2026000000001", "inv-1",
                                  alias="urn:mail:gone@example.com"), 2052,
                 id="efatura-to-an-alias-not-in-use"),
])
async def test_a_recipient_that_is_not_what_the_document_assumed_is_wrong_channel(
        adapter: NilveraIntegrator, fake: NilveraFake, make: Any, code: int) -> None:
    with pytest.raises(WrongChannel) as wrong:
        await adapter.send(make())
    assert wrong.value.reason.startswith(f"Nilvera {code}: ")
    assert fake.ledger == []


@pytest.mark.parametrize("code", [2053, 3000])
async def test_injected_registration_codes_are_wrong_channel(
        adapter: NilveraIntegrator, fake: NilveraFake, code: int) -> None:
    fake.errors.append((422 if code == 2053 else 404, code, "Alıcı durumu değişti"))
    with pytest.raises(WrongChannel, match=f"Nilvera {code}"):
        await adapter.send(document("ABC2026000000001", "inv-1"))


async def test_business_errors_are_one_line_rejections_without_tax_ids(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fake.errors.append((422, 2015, f"Şema hatası:\n alıcı {USER} geçersiz"))
    with pytest.raises(PermanentRejection) as refused:
        await adapter.send(document("ABC2026000000001", "inv-1"))
    assert not isinstance(refused.value, WrongChannel)
    assert refused.value.reason == "Nilvera 2015: Şema hatası: alıcı … geçersiz"
    assert "ABC2026000000001" not in refused.value.reason  # the document is not echoed

    fake.errors.append((400, 4001, "Geçersiz istek"))
    with pytest.raises(PermanentRejection, match=r"^Nilvera 4001: Geçersiz istek$"):
        await adapter.send(document("ABC2026000000002", "inv-2"))


@pytest.mark.parametrize("code", [2000, 2078, 1000, 2051])
async def test_account_level_refusals_never_reject_the_invoice(
        adapter: NilveraIntegrator, fake: NilveraFake, code: int) -> None:
    fake.errors.append((409 if code == 1000 else 422, code, "Hesap gönderemez"))
    with pytest.raises(IntegratorAuthError, match=f"refuses the account.*Nilvera {code}"):
        await adapter.send(document("ABC2026000000001", "inv-1"))


async def test_a_refused_api_key_is_an_auth_error_everywhere(fake: NilveraFake) -> None:
    wrong = "nv-wrong-key-0000"
    integrator = NilveraIntegrator(settings_for(fake.url, key=wrong))
    try:
        doc = document("ABC2026000000001", "inv-1")
        failures = [await outcome(integrator.send(doc)),
                    await outcome(integrator.recipient(USER)),
                    await outcome(integrator.lookup_uuid("acme", doc.uuid)),
                    await outcome(integrator.status("acme", doc.uuid))]
    finally:
        await integrator.aclose()
    for failure in failures:
        assert isinstance(failure, IntegratorAuthError), failure
        assert str(failure) == ("Nilvera refuses the API key (HTTP 401): check "
                                "GAPLESS_NILVERA_API_KEY")
        assert wrong not in str(failure)
        assert KEY not in str(failure)
    assert fake.calls[0].authorization == f"Bearer {wrong}"
    assert fake.ledger == []


async def test_server_errors_timeouts_and_refused_connections_are_transient(
        fake: NilveraFake) -> None:
    integrator = NilveraIntegrator(settings_for(fake.url, timeout=0.3))
    try:
        fake.faults.extend(["500", "timeout"])
        server_error = await outcome(integrator.send(document("ABC2026000000001", "inv-1")))
        timed_out = await outcome(integrator.send(document("ABC2026000000002", "inv-2")))
        fake.errors.extend([(429, 9999, "Çok fazla istek"), (503, 9999, "Bakım")])
        throttled = await outcome(integrator.send(document("ABC2026000000003", "inv-3")))
        unavailable = await outcome(integrator.send(document("ABC2026000000004", "inv-4")))
    finally:
        await integrator.aclose()
    for failure in (server_error, timed_out, throttled, unavailable):
        assert isinstance(failure, TransientIntegratorError), failure
    assert "TimeoutError" in str(timed_out)
    assert fake.ledger == []

    nobody = NilveraIntegrator(settings_for(f"http://127.0.0.1:{free_port()}"))
    try:
        for call in (nobody.send(document("ABC2026000000005", "inv-5")),
                     nobody.recipient(USER), nobody.lookup_uuid("acme", "u"),
                     nobody.status("acme", "u")):
            failure = await outcome(call)
            assert isinstance(failure, TransientIntegratorError), failure
            assert USER not in str(failure)
    finally:
        await nobody.aclose()


async def test_a_wrong_base_url_is_transient_not_a_rejection(fake: NilveraFake) -> None:
    integrator = NilveraIntegrator(settings_for(fake.url + "/v9"))
    try:
        for call in (integrator.send(document("ABC2026000000001", "inv-1")),
                     integrator.recipient(USER)):
            with pytest.raises(TransientIntegratorError, match="GAPLESS_NILVERA_URL"):
                await call
    finally:
        await integrator.aclose()


@pytest.mark.parametrize("mode", ["lost-drop", "lost-500", "lost-timeout"])
async def test_lost_responses_resend_settles_by_uuid_and_each_number_is_accepted_once(
        fake: NilveraFake, mode: str) -> None:
    integrator = NilveraIntegrator(settings_for(fake.url, timeout=0.3))
    docs = [document(f"ABC2026{n:09d}", f"inv-{n}") for n in range(1, 6)]
    docs += [earsiv(f"ARS2026{n:09d}", f"arc-{n}") for n in range(1, 4)]
    try:
        for doc in docs:
            fake.faults.append(mode)
            with pytest.raises(TransientIntegratorError):
                await integrator.send(doc)
            assert fake.by_uuid(doc.uuid) is not None  # accepted, the answer lost
            with pytest.raises(DuplicateOfMine) as mine:
                await integrator.send(doc)
            assert mine.value.receipt == Receipt(doc.tenant, doc.number, doc.invoice_id,
                                                 doc.uuid)
            # Recovery's question by UUID agrees.
            found = await integrator.lookup_uuid(doc.tenant, doc.uuid)
            assert found is not None
            assert found.uuid == doc.uuid
    finally:
        await integrator.aclose()
    numbers = [entry.number for entry in fake.ledger]
    assert sorted(numbers) == sorted(doc.number for doc in docs)
    assert len(set(numbers)) == len(numbers) == len(docs)
    assert len(fake.sends()) == 2 * len(docs)


# ------------------------------------------------------------------------ recipient check


async def test_the_recipient_check_tells_invoice_and_despatch_aliases_apart(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    assert await adapter.recipient(USER) == Recipient(
        USER, True, (ALIAS, SECOND_ALIAS), despatch_registered=True,
        despatch_aliases=(DESPATCH_ALIAS,))
    [call] = fake.calls
    assert call.path == f"/general/GlobalCompany/Check/TaxNumber/{USER}"
    assert call.authorization == f"Bearer {KEY}"
    assert await adapter.recipient(DESPATCH_ONLY) == Recipient(
        DESPATCH_ONLY, False, (), despatch_registered=True, despatch_aliases=(DESPATCH_ALIAS,))
    assert await adapter.recipient(NON_USER) == Recipient(NON_USER, False, ())
    fake.recipient_404 = True
    assert await adapter.recipient(NON_USER) == Recipient(NON_USER, False, ())


async def test_a_recipient_check_nilvera_cannot_answer_is_transient(
        fake: NilveraFake) -> None:
    integrator = NilveraIntegrator(settings_for(fake.url, timeout=0.3))
    try:
        fake.recipients[NON_USER] = [{"DocumentType": "Invoice"}, "not an entry"]
        with pytest.raises(TransientIntegratorError, match="unexpected answer") as odd:
            await integrator.recipient(NON_USER)
        assert NON_USER not in str(odd.value)
        fake.recipient_failure = 503
        with pytest.raises(TransientIntegratorError, match="HTTP 503") as down:
            await integrator.recipient(USER)
        assert USER not in str(down.value)
    finally:
        await integrator.aclose()


# ---------------------------------------------------------------------- lookups and status


async def test_lookup_by_uuid_in_both_channels(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fatura, arsiv = document("ABC2026000000001", "inv-1"), earsiv("ARS2026000000001", "arc-1")
    await adapter.send(fatura)
    await adapter.send(arsiv)
    fake.calls.clear()

    found = await adapter.lookup_uuid("acme", fatura.uuid)
    assert found == Receipt("acme", UNKNOWN, UNKNOWN, fatura.uuid)
    assert found.uuid == fatura.uuid
    assert [call.path for call in fake.calls] == [f"/einvoice/sale/{fatura.uuid}/Status"]

    fake.calls.clear()
    found = await adapter.lookup_uuid("acme", arsiv.uuid)
    assert found is not None
    assert found.uuid == arsiv.uuid
    assert [call.path for call in fake.calls] == [f"/einvoice/sale/{arsiv.uuid}/Status",
                                                  f"/earchive/invoices/{arsiv.uuid}/Status"]

    assert await adapter.lookup_uuid("acme", str(uuid_module.uuid4())) is None

    # When Nilvera names the number, the receipt carries it.
    fake.status_numbers = True
    found = await adapter.lookup_uuid("acme", arsiv.uuid)
    assert found is not None
    assert found.number == "ARS2026000000001"


async def test_lookup_by_number_says_nilvera_is_asked_by_uuid(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    with pytest.raises(TransientIntegratorError, match="asked by the document's UUID"):
        await adapter.lookup("acme", "ABC2026000000001")
    assert fake.calls == []
    # A reachability probe that consumes nothing works by UUID: "not found" when Nilvera answers.
    assert await adapter.lookup_uuid("gapless-probe", str(uuid_module.UUID(int=0))) is None


async def test_gib_status_in_gaplesss_words(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    fatura, arsiv = document("ABC2026000000001", "inv-1"), earsiv("ARS2026000000001", "arc-1")
    await adapter.send(fatura)
    await adapter.send(arsiv)

    pending = await adapter.status("acme", fatura.uuid, channel="efatura")
    assert pending is not None
    assert (pending.state, pending.final, pending.accepted, pending.channel) == (
        GibState.PENDING, False, None, "efatura")

    fake.set_gib(fatura.uuid, "succeed", "Fatura GİB tarafından kabul edildi")
    accepted = await adapter.status("acme", fatura.uuid)
    assert accepted is not None
    assert (accepted.state, accepted.final, accepted.accepted) == (
        GibState.ACCEPTED, True, True)
    assert accepted.detail.startswith("Fatura GİB tarafından kabul edildi — GİB 1300")

    fake.set_gib(arsiv.uuid, "error", f"Alıcı {NON_USER} hatalı")
    fake.calls.clear()
    refused = await adapter.status("acme", arsiv.uuid, channel="earsiv")
    assert refused is not None
    assert (refused.state, refused.final, refused.accepted, refused.channel) == (
        GibState.REFUSED, True, False, "earsiv")
    assert refused.detail == "Alıcı … hatalı"
    # Asked in the channel given only.
    assert [call.path for call in fake.calls] == [f"/earchive/invoices/{arsiv.uuid}/Status"]

    fake.set_gib(arsiv.uuid, "boop", "?")
    odd = await adapter.status("acme", arsiv.uuid)
    assert odd is not None
    assert odd.state is GibState.PENDING
    assert odd.detail.startswith("unrecognised status 'boop'")

    assert await adapter.status("acme", str(uuid_module.uuid4())) is None


async def test_status_answers_nilvera_cannot_give_are_transient(
        adapter: NilveraIntegrator, fake: NilveraFake) -> None:
    doc = document("ABC2026000000001", "inv-1")
    await adapter.send(doc)
    fake.status_failure = 500
    for call in (adapter.lookup_uuid("acme", doc.uuid), adapter.status("acme", doc.uuid)):
        with pytest.raises(TransientIntegratorError, match="status of UUID"):
            await call
    # A 409 that cannot be settled is not an alarm: outcome unknown, ask again later.
    with pytest.raises(TransientIntegratorError):
        await adapter.send(doc)
    assert len(fake.ledger) == 1
