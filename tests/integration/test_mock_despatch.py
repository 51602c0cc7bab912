"""The mock integrator over real HTTP: dispatch notes (a UBL-TR DespatchAdvice, e-İrsaliye
aliases, GİB's box) and the receivers' answers (``PUT /admin/answers``, the status's
``answer``), and ``HttpIntegrator`` reading both."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from gapless.integrator.base import AnswerCode, AnswerLine, TransientIntegratorError
from gapless.integrator.http import HttpIntegrator
from gapless.integrator.mock.state import GIB_DESPATCH_BOX, MAX_BODY_BYTES
from gapless.settings import Settings
from tests.mock_client import MockIntegratorClient

_NS = {
    "": "urn:oasis:names:specification:ubl:schema:xsd:DespatchAdvice-2",
    "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2",
    "cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
}


def despatch_xml(number: str, document_uuid: str, tax_id: str, *, lines: int = 2,
                 doctype: str = "", id_text: str | None = None) -> str:
    """A minimal well-formed UBL-TR DespatchAdvice: what the mock reads of one (ID, UUID, the
    customer's tax id in DeliveryCustomerParty, the lines), not a GİB-valid note."""
    namespaces = " ".join(f'xmlns{":" + prefix if prefix else ""}="{uri}"'
                          for prefix, uri in _NS.items())
    body_lines = "".join(
        f"<cac:DespatchLine><cbc:ID>{n}</cbc:ID>"
        f'<cbc:DeliveredQuantity unitCode="C62">{n * 2}</cbc:DeliveredQuantity>'
        f"<cac:OrderLineReference><cbc:LineID>{n}</cbc:LineID></cac:OrderLineReference>"
        f"<cac:Item><cbc:Name>Widget {n}</cbc:Name></cac:Item></cac:DespatchLine>"
        for n in range(1, lines + 1))
    return (f'<?xml version="1.0" encoding="UTF-8"?>{doctype}<DespatchAdvice {namespaces}>'
            "<cbc:UBLVersionID>2.1</cbc:UBLVersionID>"
            "<cbc:CustomizationID>TR1.2.1</cbc:CustomizationID>"
            "<cbc:ProfileID>TEMELIRSALIYE</cbc:ProfileID>"
            f"<cbc:ID>{number if id_text is None else id_text}</cbc:ID>"
            "<cbc:CopyIndicator>false</cbc:CopyIndicator>"
            f"<cbc:UUID>{document_uuid}</cbc:UUID>"
            "<cbc:IssueDate>2026-11-26</cbc:IssueDate><cbc:IssueTime>10:00:00</cbc:IssueTime>"
            "<cbc:DespatchAdviceTypeCode>SEVK</cbc:DespatchAdviceTypeCode>"
            "<cac:DespatchSupplierParty><cac:Party><cac:PartyIdentification>"
            '<cbc:ID schemeID="VKN">1234567803</cbc:ID>'
            "</cac:PartyIdentification></cac:Party></cac:DespatchSupplierParty>"
            "<cac:DeliveryCustomerParty><cac:Party><cac:PartyIdentification>"
            f'<cbc:ID schemeID="VKN">{tax_id}</cbc:ID>'
            "</cac:PartyIdentification></cac:Party></cac:DeliveryCustomerParty>"
            f"{body_lines}</DespatchAdvice>")


def despatch(number: str, tax_id: str, alias: str | None, *, tenant: str = "acme",
             lines: int = 2, document_uuid: str | None = None) -> dict[str, Any]:
    """A dispatch note as POSTed to the mock."""
    key = document_uuid or str(uuid.uuid4())
    sent: dict[str, Any] = {"tenant": tenant, "number": number, "invoice_id": f"wh-{number}",
                            "uuid": key, "document": despatch_xml(number, key, tax_id,
                                                                  lines=lines)}
    if alias is not None:
        sent["alias"] = alias
    return sent


def ubl_invoice(number: str, tax_id: str, profile: str) -> dict[str, Any]:
    """A UBL-TR invoice of ``profile`` to ``tax_id``, rendered by gapless, sent without an
    alias (a series without routing: the mock does not check its channel)."""
    from gapless.documents import build_issuer, render_ubl_tr
    from gapless.message import validate_message

    document_uuid = uuid.uuid4()
    message = validate_message({
        "invoice_id": f"inv-{number}", "tenant": "acme", "issue_date": "2025-12-31",
        "currency": "TRY", "profile": profile,
        "customer": {"tax_id": tax_id, "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                   "vat_rate": "20"}]})
    issuer = build_issuer(tax_id="1234567803", name="Acme A.Ş.", tax_office="Kadıköy",
                          street="Rıhtım Cad. 1", district="Kadıköy", city="İstanbul")
    body = render_ubl_tr(message, number=number, uuid=document_uuid,
                         sealed_at=datetime(2025, 12, 31, 9, tzinfo=UTC), tz="Europe/Istanbul",
                         issuer=issuer)
    return {"tenant": "acme", "number": number, "invoice_id": f"inv-{number}",
            "uuid": str(document_uuid), "document": body.decode()}


def json_invoice(number: str, tax_id: str = "1234567890") -> dict[str, Any]:
    return {"tenant": "acme", "number": number, "invoice_id": f"inv-{number}",
            "uuid": str(uuid.uuid4()),
            "document": {"document": "despatch", "profile": "TICARIFATURA",
                         "customer": {"tax_id": tax_id, "name": "Example Ltd"},
                         "lines": [{"description": "Widget", "quantity": "1"}]}}


USER, BOTH, OUTSIDER = "4840847211", "5950193314", "6060304417"
IRS_A, IRS_B = "urn:mail:irsaliyepk@a.example", "urn:mail:depo@a.example"
EFA = "urn:mail:defaultpk@b.example"


def test_recipients_object_form_registers_each_kind_apart(
        mock_integrator: MockIntegratorClient) -> None:
    answer = mock_integrator.set_recipients({
        USER: {"despatch": [IRS_A, IRS_B, IRS_A]},
        BOTH: {"invoice": [EFA], "despatch": [IRS_A]}})
    assert answer == {"registered": 1, "despatch_registered": 2}
    assert mock_integrator.recipient(USER).json() == {
        "tax_id": USER, "registered": False, "aliases": [],
        "despatch_registered": True, "despatch_aliases": [IRS_A, IRS_B]}
    assert mock_integrator.recipient(BOTH).json() == {
        "tax_id": BOTH, "registered": True, "aliases": [EFA],
        "despatch_registered": True, "despatch_aliases": [IRS_A]}
    assert mock_integrator.recipient(OUTSIDER).json() == {
        "tax_id": OUTSIDER, "registered": False, "aliases": [],
        "despatch_registered": False, "despatch_aliases": []}

    # The list form is the e-Fatura aliases only; one kind given leaves the other as it was.
    mock_integrator.set_recipients({USER: [EFA]})
    mock_integrator.set_recipients({BOTH: {"despatch": [IRS_B]}})
    assert mock_integrator.recipient(USER).json()["despatch_aliases"] == [IRS_A, IRS_B]
    assert mock_integrator.recipient(USER).json()["aliases"] == [EFA]
    assert mock_integrator.recipient(BOTH).json()["aliases"] == [EFA]
    assert mock_integrator.recipient(BOTH).json()["despatch_aliases"] == [IRS_B]

    # An empty list unregisters that kind only.
    mock_integrator.set_despatch_recipients({BOTH: []})
    assert mock_integrator.recipient(BOTH).json() == {
        "tax_id": BOTH, "registered": True, "aliases": [EFA],
        "despatch_registered": False, "despatch_aliases": []}
    assert mock_integrator.set_recipients({USER: {"invoice": []}}) == {
        "registered": 1, "despatch_registered": 1}
    assert mock_integrator.recipient(USER).json()["despatch_registered"] is True
    assert mock_integrator.recipient(USER).json()["registered"] is False

    # The recipient check meets the faults like any integrator call.
    mock_integrator.set_faults(down=True)
    assert mock_integrator.recipient(USER).status_code == 503
    mock_integrator.set_faults(down=False)
    stats = mock_integrator.stats()
    assert (stats["recipient_checks"], stats["down"]) == (10, 1)


@pytest.mark.parametrize("bad", [
    {USER: {}}, {USER: {"despatch": None}}, {USER: {"irsaliye": [IRS_A]}},
    {USER: {"despatch": "urn:mail:x@a.example"}}, {USER: "urn:mail:x@a.example"},
    {USER: {"despatch": [IRS_A]}, OUTSIDER: {"despatch": [1]}},
])
def test_bad_recipient_objects_are_refused_and_change_nothing(
        mock_integrator: MockIntegratorClient, bad: dict[str, Any]) -> None:
    with httpx.Client(base_url=mock_integrator.url) as http:
        assert http.put("/admin/recipients", json=bad).status_code == 422
    assert mock_integrator.recipient(USER).json()["despatch_registered"] is False


def test_dispatch_notes_go_to_a_despatch_alias_or_gibs_box(
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_recipients({USER: {"invoice": [EFA], "despatch": [IRS_A, IRS_B]}})

    def refused(sent: dict[str, Any], code: str | None = "wrong_channel") -> str:
        answer = mock_integrator.post(sent)
        assert answer.status_code == 422, answer.text
        assert answer.json().get("code") == code
        return str(answer.json()["reason"])

    assert refused(despatch("IRS2026000000001", USER, GIB_DESPATCH_BOX)) == (
        "recipient is an e-İrsaliye user")
    assert refused(despatch("IRS2026000000002", USER, EFA)) == (
        "alias is not one of the recipient's e-İrsaliye aliases")
    assert refused(despatch("IRS2026000000003", OUTSIDER, IRS_A)).startswith(
        "recipient is not an e-İrsaliye user")
    assert refused(despatch("IRS2026000000004", USER, None), code=None).startswith(
        "a dispatch note is sent to an alias")
    assert refused(despatch("IRS2026000000005", OUTSIDER, None), code=None).startswith(
        "a dispatch note is sent to an alias")
    assert refused(despatch("IRS2026000000006", "0000000000", GIB_DESPATCH_BOX),
                   code=None) == "invalid tax id"
    wrong_id = despatch("IRS2026000000007", OUTSIDER, GIB_DESPATCH_BOX)
    wrong_id["number"] = "IRS2026000000070"
    assert refused(wrong_id, code=None) == (
        "cbc:ID of the document differs from the submitted number")
    wrong_uuid = {**despatch("IRS2026000000008", OUTSIDER, GIB_DESPATCH_BOX),
                  "uuid": str(uuid.uuid4())}
    assert refused(wrong_uuid, code=None) == (
        "cbc:UUID of the document differs from the submitted uuid")

    notes = [despatch("IRS2026000000011", USER, IRS_B),
             despatch("IRS2026000000012", OUTSIDER, GIB_DESPATCH_BOX)]
    for sent in notes:
        assert mock_integrator.post(sent).status_code == 201
    # The invoice rules are unchanged beside them: an e-Fatura at the user's invoice alias.
    invoice = {**ubl_invoice("EFA2026000000001", USER, "TEMELFATURA"), "alias": EFA}
    assert mock_integrator.post(invoice).status_code == 201
    assert mock_integrator.post(json_invoice("JSN2026000000001")).status_code == 201

    ledger = [(e["number"], e["document"], e["alias"]) for e in mock_integrator.ledger()]
    assert ledger == [("IRS2026000000011", "despatch", IRS_B),
                      ("IRS2026000000012", "despatch", GIB_DESPATCH_BOX),
                      ("EFA2026000000001", "invoice", EFA),
                      # a JSON document is an invoice, whatever its message says
                      ("JSN2026000000001", "invoice", None)]
    kept = mock_integrator.document("acme", "IRS2026000000011")
    assert kept.headers["content-type"].startswith("application/xml")
    assert kept.text == notes[0]["document"]
    # A resend of an accepted note is recognisable as mine before any alias check.
    again = mock_integrator.post({**notes[0], "alias": GIB_DESPATCH_BOX})
    assert (again.status_code, again.json()["invoice_id"]) == (409, "wh-IRS2026000000011")
    stats = mock_integrator.stats()
    assert (stats["accepted"], stats["accepted_despatch"]) == (4, 2)
    assert (stats["rejected_channel"], stats["rejected_document"]) == (3, 4)


def test_a_hostile_despatch_document_is_refused_without_reading_entities(
        mock_integrator: MockIntegratorClient) -> None:
    key = str(uuid.uuid4())
    entity = '<!DOCTYPE DespatchAdvice [<!ENTITY n SYSTEM "file:///etc/hostname">]>'
    sent = {"tenant": "acme", "number": "IRS2026000000001", "invoice_id": "wh-1", "uuid": key,
            "alias": GIB_DESPATCH_BOX,
            "document": despatch_xml("IRS2026000000001", key, OUTSIDER, doctype=entity,
                                     id_text="&n;")}
    answer = mock_integrator.post(sent)
    assert (answer.status_code, answer.json()["reason"]) == (
        422, "cbc:ID of the document differs from the submitted number")
    broken = {**sent, "document": sent["document"][:-5]}
    assert mock_integrator.post(broken).json()["reason"] == "document is not well-formed XML"
    receipt = {**sent, "document": despatch_xml("IRS2026000000001", key, OUTSIDER).replace(
        "DespatchAdvice-2", "ReceiptAdvice-2").replace("DespatchAdvice", "ReceiptAdvice")}
    assert mock_integrator.post(receipt).json()["reason"] == (
        "document is not a UBL-TR Invoice or DespatchAdvice")
    with httpx.Client(base_url=mock_integrator.url, timeout=30) as http:
        huge = http.post("/invoices", content=b" " * (MAX_BODY_BYTES + 1),
                         headers={"content-type": "application/json"})
        chunk = b" " * (1024 * 1024)
        chunks = [chunk] * (MAX_BODY_BYTES // len(chunk)) + [b" "]
        streamed = http.post("/invoices", content=iter(chunks),  # chunked: no length told
                             headers={"content-type": "application/json"})
    assert (huge.status_code, streamed.status_code) == (413, 413)
    assert mock_integrator.ledger() == []


def test_receivers_answer_a_dispatch_note_and_a_commercial_invoice(
        mock_integrator: MockIntegratorClient) -> None:
    note = despatch("IRS2026000000001", OUTSIDER, GIB_DESPATCH_BOX, lines=3)
    whole = despatch("IRS2026000000002", OUTSIDER, GIB_DESPATCH_BOX)
    commercial = ubl_invoice("TIC2026000000001", OUTSIDER, "TICARIFATURA")
    for sent in (note, whole, commercial):
        assert mock_integrator.post(sent).status_code == 201
    assert mock_integrator.answer("acme", note["uuid"]) is None
    assert mock_integrator.gib_status("acme", note["uuid"]).json() == {
        "state": "accepted", "detail": "accepted by GİB (mock)", "answer": None}

    before = datetime.now(UTC)
    assert mock_integrator.set_answers({
        note["uuid"].upper(): {"code": "KISMIKABUL", "lines": [
            {"line": 1, "received": "2"},
            {"line": 3, "received": "4", "short": "1.5", "rejected": "0.5",
             "reason": "Ambalaj hasarlı"}]},
        whole["uuid"]: {"code": "KABUL"},
        commercial["uuid"]: {"code": "RED"}}) == {"answered": 3}

    answered = mock_integrator.answer("acme", note["uuid"])
    assert answered is not None
    assert before <= datetime.fromisoformat(answered.pop("at")) <= datetime.now(UTC)
    assert answered == {"code": "KISMIKABUL", "lines": [
        {"line": 1, "received": "2", "short": "0", "rejected": "0", "reason": None},
        {"line": 3, "received": "4", "short": "1.5", "rejected": "0.5",
         "reason": "Ambalaj hasarlı"}]}
    whole_answer = mock_integrator.answer("acme", whole["uuid"])
    assert whole_answer is not None
    assert (whole_answer["code"], whole_answer["lines"]) == (
        "KABUL", [])
    red = mock_integrator.answer("acme", commercial["uuid"])
    assert red is not None
    assert set(red) == {"code", "at"}
    assert red["code"] == "RED"
    # An answer leaves GİB's verdict alone, and GİB's verdict the answer.
    mock_integrator.set_gib_status({commercial["uuid"]: {"state": "refused"}})
    status = mock_integrator.gib_status("acme", commercial["uuid"]).json()
    assert (status["state"], status["answer"]) == ("refused", red)

    # The same answer again changes nothing; another one is refused: it was answered.
    assert mock_integrator.set_answers({commercial["uuid"]: {"code": "RED"}}) == {
        "answered": 3}
    assert mock_integrator.answer("acme", commercial["uuid"]) == red
    assert mock_integrator.put_answers(
        {commercial["uuid"]: {"code": "KABUL"}}).status_code == 409
    assert mock_integrator.stats()["answers"] == 3

    # The status meets the faults like any call; a reset forgets the documents and answers.
    mock_integrator.set_faults(down=True)
    assert mock_integrator.gib_status("acme", note["uuid"]).status_code == 503
    mock_integrator.set_faults(down=False)
    mock_integrator.reset()
    assert mock_integrator.post(whole).status_code == 201
    assert mock_integrator.answer("acme", whole["uuid"]) is None


def test_answers_a_document_cannot_take_are_refused_and_change_nothing(
        mock_integrator: MockIntegratorClient) -> None:
    note = despatch("IRS2026000000001", OUTSIDER, GIB_DESPATCH_BOX, lines=2)
    commercial = ubl_invoice("TIC2026000000001", OUTSIDER, "TICARIFATURA")
    basic = ubl_invoice("TEM2026000000001", OUTSIDER, "TEMELFATURA")
    plain = json_invoice("JSN2026000000001")
    for sent in (note, commercial, basic, plain):
        assert mock_integrator.post(sent).status_code == 201
    line = {"line": 1, "received": "2"}

    def refused(answers: dict[str, Any], status: int = 422) -> str:
        answer = mock_integrator.put_answers(answers)
        assert answer.status_code == status, answer.text
        return str(answer.json()["detail"])

    assert "no accepted document" in refused({str(uuid.uuid4()): {"code": "KABUL"}}, 404)
    assert "not a UUID" in refused({"IRS2026000000001": {"code": "KABUL"}})
    assert "TICARIFATURA" in refused({basic["uuid"]: {"code": "KABUL"}})
    assert "TICARIFATURA" in refused({plain["uuid"]: {"code": "RED"}})
    assert "no lines" in refused({commercial["uuid"]: {"code": "KABUL", "lines": [line]}})
    assert "no lines" in refused({commercial["uuid"]: {"code": "KABUL", "lines": []}})
    assert "KABUL or RED" in refused(
        {commercial["uuid"]: {"code": "KISMIKABUL", "lines": [line]}})
    assert "not a line" in refused(
        {note["uuid"]: {"code": "KISMIKABUL", "lines": [{"line": 3, "received": "1"}]}})
    for bad in ({"code": "IADE"}, {"code": "KISMIKABUL"}, {"code": "KISMIKABUL", "lines": []},
                {"code": "KABUL", "lines": [line, line]},
                {"code": "KABUL", "lines": [{"line": 1, "received": "-1"}]},
                {"code": "KABUL", "lines": [{"line": 0, "received": "1"}]},
                {"code": "KABUL", "lines": [{"line": 1}]},
                {"code": "KABUL", "lines": [{**line, "reason": ""}]},
                {"code": "KABUL", "extra": 1}, {}):
        refused({note["uuid"]: bad})
    # One bad answer in a request: none of it is recorded.
    refused({note["uuid"]: {"code": "KABUL"}, basic["uuid"]: {"code": "KABUL"}})
    assert all(mock_integrator.answer("acme", sent["uuid"]) is None
               for sent in (note, commercial, basic, plain))
    assert mock_integrator.stats()["answers"] == 0


async def test_the_adapter_reads_despatch_aliases_and_answers(
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_recipients({USER: {"invoice": [EFA], "despatch": [IRS_A, IRS_B]}})
    note = despatch("IRS2026000000001", OUTSIDER, GIB_DESPATCH_BOX, lines=2)
    commercial = ubl_invoice("TIC2026000000001", OUTSIDER, "TICARIFATURA")
    for sent in (note, commercial):
        assert mock_integrator.post(sent).status_code == 201
    adapter = HttpIntegrator(Settings(integrator_url=mock_integrator.url,
                                      integrator_timeout_s=2.0))
    try:
        user = await adapter.recipient(USER)
        assert (user.registered, user.aliases) == (True, (EFA,))
        assert (user.despatch_registered, user.despatch_aliases) == (True, (IRS_A, IRS_B))
        outsider = await adapter.recipient(OUTSIDER)
        assert (outsider.despatch_registered, outsider.despatch_aliases) == (False, ())

        unanswered = await adapter.status("acme", note["uuid"])
        assert unanswered is not None
        assert unanswered.answer is None
        mock_integrator.set_answers({
            note["uuid"]: {"code": "KISMIKABUL", "lines": [
                {"line": 2, "received": "3", "short": "1", "reason": "  Eksik\n teslim "}]},
            commercial["uuid"]: {"code": "KABUL"}})
        status = await adapter.status("acme", note["uuid"])
        assert status is not None
        assert status.answer is not None
        assert status.answer.code is AnswerCode.KISMIKABUL
        assert status.answer.at.tzinfo is not None
        assert status.answer.lines == (
            AnswerLine(2, Decimal("3"), Decimal("1"), Decimal("0"), "Eksik teslim"),)
        accepted = await adapter.status("acme", commercial["uuid"])
        assert accepted is not None
        assert accepted.answer is not None
        assert (accepted.answer.code, accepted.answer.lines) == (AnswerCode.KABUL, None)

        # A hostile body in place of the answer is an unknown outcome, never a crash.
        mock_integrator.set_faults(hostile_answer="garbage")
        with pytest.raises(TransientIntegratorError):
            await adapter.status("acme", note["uuid"])
        with pytest.raises(TransientIntegratorError):
            await adapter.recipient(USER)
    finally:
        mock_integrator.set_faults(hostile_answer="none")
        await adapter.aclose()
