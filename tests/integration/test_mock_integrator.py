"""The mock integrator over real HTTP: ledger, concurrency, faults and their run-time control."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import GaplessProcess, free_port, run_gapless, wait_for_port, wait_until
from tests.mock_client import MockIntegratorClient


def submission(number: str, invoice_id: str, *, tenant: str = "acme",
               tax_id: str = "1234567890") -> dict[str, Any]:
    return {"tenant": tenant, "number": number, "invoice_id": invoice_id,
            "document": {"customer": {"tax_id": tax_id, "name": "Example Ltd"},
                         "lines": [{"description": "Widget", "quantity": "1",
                                    "unit_price": "10.00", "vat_rate": "20"}]}}


def test_accept_lookup_duplicate_and_ledger_in_acceptance_order(
        mock_integrator: MockIntegratorClient) -> None:
    first = mock_integrator.post(submission("ABC2026000000001", "inv-1"))
    second = mock_integrator.post(submission("ABC2026000000002", "inv-2"))
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["ref"] != second.json()["ref"]

    again = mock_integrator.post(submission("ABC2026000000001", "inv-other"))
    assert again.status_code == 409
    assert again.json()["invoice_id"] == "inv-1"
    assert again.json()["ref"] == first.json()["ref"]

    found = mock_integrator.get("acme", "ABC2026000000001")
    assert found.status_code == 200
    assert found.json() == {"number": "ABC2026000000001", "invoice_id": "inv-1",
                            "ref": first.json()["ref"]}
    assert mock_integrator.get("acme", "ABC2026000000003").status_code == 404
    # The same number is free in another tenant: the ledger is keyed by (tenant, number).
    assert mock_integrator.post(
        submission("ABC2026000000001", "inv-9", tenant="other")).status_code == 201

    ledger = mock_integrator.ledger()
    assert [(e["tenant"], e["number"], e["invoice_id"]) for e in ledger] == [
        ("acme", "ABC2026000000001", "inv-1"), ("acme", "ABC2026000000002", "inv-2"),
        ("other", "ABC2026000000001", "inv-9")]
    assert all(e["ref"] and e["accepted_at"] for e in ledger)
    stats = mock_integrator.stats()
    assert (stats["posts"], stats["accepted"], stats["duplicate"]) == (4, 3, 1)
    assert (stats["lookups_found"], stats["lookups_missing"]) == (1, 1)
    assert stats["posts_per_number"]["acme/ABC2026000000001"] == 2
    assert stats["max_posts_per_number"] == 2


def test_tax_id_0000000000_is_always_rejected(mock_integrator: MockIntegratorClient) -> None:
    response = mock_integrator.post(submission("N1", "inv-1", tax_id="0000000000"))
    assert response.status_code == 422
    assert response.json() == {"reason": "invalid tax id"}
    assert mock_integrator.ledger() == []
    assert mock_integrator.stats()["rejected_tax_id"] == 1


def test_malformed_submission_is_422_naming_the_field_without_echoing_values(
        mock_integrator: MockIntegratorClient) -> None:
    body = submission("N1", "inv-1", tax_id="9876543210")
    del body["number"]
    response = mock_integrator.post(body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "number"]
    assert "9876543210" not in response.text
    assert mock_integrator.stats()["posts"] == 0


async def test_50_concurrent_posts_of_one_number_accept_exactly_one(
        mock_integrator: MockIntegratorClient) -> None:
    # Latency keeps all 50 requests inside the handler at once, so the check-and-insert races.
    mock_integrator.set_faults(latency_ms=[5, 30])
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=mock_integrator.url, limits=limits,
                                 timeout=30) as client:
        responses = await asyncio.gather(*(
            client.post("/invoices", json=submission("ABC2026000000777", f"inv-{i}"))
            for i in range(50)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 49
    winner = next(i for i, r in enumerate(responses) if r.status_code == 201)
    assert {r.json()["invoice_id"] for r in responses if r.status_code == 409} == {f"inv-{winner}"}
    assert [e["invoice_id"] for e in mock_integrator.ledger()] == [f"inv-{winner}"]


def test_fault_changes_take_effect_on_the_next_request(
        mock_integrator: MockIntegratorClient) -> None:
    assert mock_integrator.set_faults(transient_rate=1.0)["transient_rate"] == 1.0
    assert mock_integrator.post(submission("N1", "inv-1")).status_code == 503
    mock_integrator.set_faults(transient_rate=0.0, reject_rate=1.0)
    rejected = mock_integrator.post(submission("N1", "inv-1"))
    assert rejected.status_code == 422
    assert rejected.json()["reason"]
    mock_integrator.set_faults(reject_rate=0.0, lost_response_rate=1.0)
    assert mock_integrator.post(submission("N1", "inv-1")).status_code == 500
    assert [e["number"] for e in mock_integrator.ledger()] == ["N1"]  # accepted, answer lost
    mock_integrator.set_faults(lost_response_rate=0.0, latency_ms=[150, 150])
    started = time.monotonic()
    assert mock_integrator.post(submission("N2", "inv-2")).status_code == 201
    assert time.monotonic() - started >= 0.15  # a lower bound only: the mock slept 150 ms
    assert mock_integrator.stats()["latency_ms"]["min"] == 150
    faults = mock_integrator.faults()
    assert faults["latency_ms"] == [150, 150]
    assert (faults["transient_rate"], faults["reject_rate"], faults["lost_response_rate"]) == (
        0, 0, 0)


def test_down_answers_503_everywhere_but_admin(mock_integrator: MockIntegratorClient) -> None:
    assert mock_integrator.post(submission("N1", "inv-1")).status_code == 201
    assert mock_integrator.set_faults(down=True)["down"] is True
    assert mock_integrator.post(submission("N2", "inv-2")).status_code == 503
    assert mock_integrator.get("acme", "N1").status_code == 503
    with httpx.Client(base_url=mock_integrator.url) as http:
        assert http.get("/ledger").status_code == 503
        assert http.get("/admin/faults").status_code == 200
    assert mock_integrator.stats()["down"] == 3
    mock_integrator.set_faults(down=False)
    assert mock_integrator.post(submission("N2", "inv-2")).status_code == 201
    assert [e["number"] for e in mock_integrator.ledger()] == ["N1", "N2"]


def test_gib_verdict_by_uuid_is_accepted_by_default_and_set_by_the_admin_switch(
        mock_integrator: MockIntegratorClient) -> None:
    accepted, refused, pending = (str(uuid.uuid4()) for _ in range(3))
    for n, key in enumerate((accepted, refused, pending)):
        body = {**submission(f"N{n}", f"inv-{n}"), "uuid": key}
        assert mock_integrator.post(body).status_code == 201
    assert mock_integrator.gib_status("acme", accepted).json() == {
        "state": "accepted", "detail": "accepted by GİB (mock)", "answer": None}

    answer = mock_integrator.set_gib_status({
        refused: {"state": "refused", "detail": "Alıcı etiketi hatalı"},
        pending.upper(): {"state": "pending"}})
    assert answer == {"default": {"state": "accepted", "detail": "accepted by GİB (mock)"},
                      "documents": 2}
    assert mock_integrator.gib_status("acme", refused).json() == {
        "state": "refused", "detail": "Alıcı etiketi hatalı", "answer": None}
    assert mock_integrator.gib_status("acme", pending).json()["state"] == "pending"
    # The default ("*") is every other document's verdict; a document's own one wins.
    mock_integrator.set_gib_status({"*": {"state": "pending", "detail": "GİB raporu bekleniyor"}})
    assert mock_integrator.gib_status("acme", accepted).json() == {
        "state": "pending", "detail": "GİB raporu bekleniyor", "answer": None}
    assert mock_integrator.gib_status("acme", refused).json()["state"] == "refused"
    # Unknown to the integrator: 404 (another tenant's UUID too); faults apply like any call.
    assert mock_integrator.gib_status("acme", str(uuid.uuid4())).status_code == 404
    assert mock_integrator.gib_status("other", accepted).status_code == 404
    mock_integrator.set_faults(down=True)
    assert mock_integrator.gib_status("acme", accepted).status_code == 503
    mock_integrator.set_faults(down=False)
    assert mock_integrator.stats()["gib_status_checks"] == 7
    # Verdicts are configuration: a reset forgets the ledger, not them.
    mock_integrator.reset()
    assert mock_integrator.post({**submission("N9", "inv-9"), "uuid": refused}
                                ).status_code == 201
    assert mock_integrator.gib_status("acme", refused).json()["state"] == "refused"


@pytest.mark.parametrize("bad", [
    {"x": {"state": "refused"}}, {str(uuid.UUID(int=1)): {"state": "rejected"}},
    {str(uuid.UUID(int=1)): {"state": "refused", "extra": 1}}, {"*": {}},
])
def test_bad_gib_verdicts_are_refused(mock_integrator: MockIntegratorClient,
                                      bad: dict[str, Any]) -> None:
    with httpx.Client(base_url=mock_integrator.url) as http:
        assert http.put("/admin/gib-status", json=bad).status_code == 422


@pytest.mark.parametrize("bad", [
    {"transient_rate": 1.5}, {"reject_rate": -0.1}, {"latency_ms": [10, 5]},
    {"latency_ms": [-1, 5]}, {"lost_response_mode": "sometimes"}, {"down": None},
    {"no_such_fault": 1},
])
def test_bad_fault_settings_are_refused_and_change_nothing(
        mock_integrator: MockIntegratorClient, bad: dict[str, Any]) -> None:
    before = mock_integrator.faults()
    with httpx.Client(base_url=mock_integrator.url) as http:
        assert http.put("/admin/faults", json=bad).status_code == 422
    assert mock_integrator.faults() == before


def test_dropped_connection_loses_the_answer_but_keeps_the_document(
        mock_integrator: MockIntegratorClient, log_dir: Path) -> None:
    mock_integrator.set_faults(lost_response_rate=1.0, lost_response_mode="drop")
    with pytest.raises(httpx.RemoteProtocolError):
        mock_integrator.post(submission("N1", "inv-1"))
    mock_integrator.set_faults(lost_response_rate=0.0)
    assert mock_integrator.get("acme", "N1").json()["invoice_id"] == "inv-1"
    assert mock_integrator.stats()["lost_response_modes"]["drop"] == 1
    # The drop is deliberate: uvicorn must not have logged it as an application error.
    assert "Traceback" not in (log_dir / "mock-integrator.log").read_text()


def test_timeout_mode_withholds_the_answer_until_the_client_gives_up(
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(lost_response_rate=1.0, lost_response_mode="timeout")
    with httpx.Client(base_url=mock_integrator.url, timeout=0.3) as http, \
            pytest.raises(httpx.ReadTimeout):
        http.post("/invoices", json=submission("N1", "inv-1"))
    mock_integrator.set_faults(lost_response_rate=0.0)
    assert mock_integrator.get("acme", "N1").status_code == 200


def test_same_seed_replays_the_same_faults(mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(transient_rate=0.3, reject_rate=0.3, lost_response_rate=0.3,
                               lost_response_mode="500")

    def run() -> list[int]:
        mock_integrator.reset()
        return [mock_integrator.post(submission(f"N{i}", f"inv-{i}")).status_code
                for i in range(60)]

    first, second = run(), run()
    assert first == second
    assert {503, 422, 500, 201} <= set(first)


@pytest.mark.parametrize(("args", "flag"), [
    (["--transient-rate", "1.5"], "--transient-rate"),
    (["--latency-ms", "50-10"], "--latency-ms"),
    (["--latency-ms", "fast"], "--latency-ms"),
    (["--lost-response-mode", "sometimes"], "--lost-response-mode"),
    (["--port", "70000"], "--port"),
])
def test_bad_flags_are_one_line_usage_errors(args: list[str], flag: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    result = run_gapless(["mock-integrator", *args], env, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert flag in lines[0]


def test_sigterm_stops_the_mock_cleanly_even_with_an_answer_withheld(log_dir: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    port = free_port()
    proc = GaplessProcess(["mock-integrator", "--port", str(port), "--lost-response-rate", "1",
                           "--lost-response-mode", "timeout"], env, log_dir, "mock-sigterm")
    mock = MockIntegratorClient(f"http://127.0.0.1:{port}")
    answers: list[object] = []

    def held_post() -> None:
        with httpx.Client(base_url=mock.url, timeout=30) as http:
            try:
                answers.append(http.post("/invoices", json=submission("N1", "inv-1")).status_code)
            except httpx.HTTPError as exc:
                answers.append(exc)

    try:
        wait_for_port(port)
        thread = threading.Thread(target=held_post)
        thread.start()
        wait_until(lambda: mock.stats()["lost_response"] == 1, 10,
                   message="the withheld request to be in flight")
        assert proc.terminate(timeout=15) == 0
        thread.join(timeout=15)
        # The withheld answer never became a 201: shutdown ended it with a 500 or a closed socket.
        assert len(answers) == 1
        assert answers[0] != 201
        assert "mock_integrator_stopped" in proc.output()
    finally:
        mock.close()
        proc.close()


def ubl_submission(number: str, tax_id: str, profile: str,
                   alias: str | None = None) -> dict[str, Any]:
    """A UBL-TR document of ``profile`` to ``tax_id``, rendered by gapless, as POSTed."""
    from datetime import UTC, datetime

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
    sent: dict[str, Any] = {"tenant": "acme", "number": number, "invoice_id": f"inv-{number}",
                            "uuid": str(document_uuid), "document": body.decode()}
    if alias is not None:
        sent["alias"] = alias
    return sent


def test_recipients_and_the_channel_a_document_must_take(
        mock_integrator: MockIntegratorClient) -> None:
    user, former, unknown = "4840847211", "5950193314", "6060304417"
    mock_integrator.set_recipients({user: ["urn:mail:apk@a.example", "urn:mail:b@a.example"],
                                    former: ["urn:mail:old@b.example"]})
    mock_integrator.set_recipients({former: []})  # unregistered by name
    assert mock_integrator.recipient(user).json() == {
        "tax_id": user, "registered": True,
        "aliases": ["urn:mail:apk@a.example", "urn:mail:b@a.example"],
        "despatch_registered": False, "despatch_aliases": []}
    assert mock_integrator.recipient(former).json()["registered"] is False
    assert mock_integrator.recipient(unknown).json() == {
        "tax_id": unknown, "registered": False, "aliases": [],
        "despatch_registered": False, "despatch_aliases": []}

    def refused(sent: dict[str, Any]) -> str:
        answer = mock_integrator.post(sent)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "wrong_channel"
        return str(answer.json()["reason"])

    assert refused(ubl_submission("ABC2025000000001", user, "EARSIVFATURA")) == (
        "recipient is an e-Fatura user")
    assert refused(ubl_submission("ABC2025000000002", user, "TEMELFATURA",
                                  alias="urn:mail:x@a.example")).startswith("alias is not")
    assert refused(ubl_submission("ABC2025000000003", unknown, "TEMELFATURA",
                                  alias="urn:mail:apk@a.example")) == (
        "recipient is not an e-Fatura user")
    assert refused(ubl_submission("ABC2025000000004", former, "TEMELFATURA")) == (
        "recipient is not an e-Fatura user")
    accepted = [ubl_submission("ABC2025000000005", user, "TEMELFATURA",
                               alias="urn:mail:b@a.example"),
                ubl_submission("ABC2025000000006", unknown, "EARSIVFATURA"),
                # no alias, a tax id never named: a series without routing, not checked
                ubl_submission("ABC2025000000007", unknown, "TICARIFATURA")]
    for sent in accepted:
        assert mock_integrator.post(sent).status_code == 201
    ledger = {entry["number"]: entry["alias"] for entry in mock_integrator.ledger()}
    assert ledger == {"ABC2025000000005": "urn:mail:b@a.example", "ABC2025000000006": None,
                      "ABC2025000000007": None}
    assert mock_integrator.stats()["rejected_channel"] == 4
