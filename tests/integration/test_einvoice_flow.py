"""E-invoices end to end, the worker in-process against real RabbitMQ, PostgreSQL and the mock:
a tenant with an issuer profile gets UBL-TR 2.1 documents that GİB's own XSD and schematron
accept, dated by their number; what a document needs is checked before any number is sealed."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.demo.samples import sample_messages, tckn
from gapless.documents import build_issuer
from gapless.issuing.render import canonical_json
from gapless.ledger.invoices import Draft, claim_for_sending, upsert_draft
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.ubl import assert_valid, field
from tests.worker_support import all_in, counter, drain_dead, publish, rows, running_worker

IST = ZoneInfo("Europe/Istanbul")
ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
          "postal_zone": "34716", "email": "efatura@acme.example"}


def ubl_message(invoice_id: str, *, issue_date: str | None = None,
                **changes: Any) -> dict[str, Any]:
    """A message with everything a UBL-TR document needs (a company customer)."""
    message: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": "acme", "series": "ABC", "priority": "user",
        "issue_date": issue_date or today(), "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"street": "Atatürk Blv. 5", "district": "Çankaya",
                                 "city": "Ankara", "postal_zone": "06690",
                                 "country": "Türkiye"}},
        "lines": [{"description": "Widget", "quantity": "2.5", "unit_price": "10.00",
                   "vat_rate": "20", "unit_code": "KGM"},
                  {"description": "Service", "quantity": "1", "unit_price": "100.00",
                   "vat_rate": "10"}],
    }
    message.update(changes)
    return message


@pytest.fixture
async def profiled(engine: AsyncEngine) -> None:
    """Tenant acme with an issuer profile and a GİB series ABC; tenant globex without."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "MON", reset="monthly"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0)


async def documents(engine: AsyncEngine) -> dict[str, Any]:
    """Every invoice with its stored document in force and the sha256 its history recorded."""
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.tenant, i.number, i.uuid, i.status, i.reserved_at, i.payload,
                   i.profile_version, i.document_sha256, d.body, d.media_type,
                   pg_column_compression(d.body) AS compression,
                   (SELECT e.document_sha256 FROM invoice_events e
                     WHERE e.invoice_pk = i.id AND e.kind = 'issued') AS issued_sha256
              FROM invoices i
              LEFT JOIN invoice_documents d ON d.invoice_pk = i.id
                                           AND d.sha256 = i.document_sha256
             ORDER BY i.tenant, i.series, i.reserved_no"""))
        return {row.invoice_id: row for row in result}


def accepted(mock: MockIntegratorClient, tenant: str, number: str) -> bytes:
    response = mock.document(tenant, number)
    assert response.status_code == 200, response.text
    return response.content


@pytest.mark.usefixtures("profiled")
async def test_profiled_tenant_issues_ubl_tr_documents_gib_accepts(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    messages = [*sample_messages(24, tenant="acme", series="ABC", priority="batch", seed=11,
                                 run_id="ubl"),
                ubl_message("usd-1", currency="USD", exchange_rate="34.2150"),
                ubl_message("json-1", tenant="globex", series="GLX")]
    expected = {m["invoice_id"] for m in messages}
    async with running_worker(worker_settings) as worker:
        await publish(worker_settings, *messages)
        await await_until(lambda: all_in(engine, expected, "ISSUED"), 90,
                          message="every invoice ISSUED")
        assert worker.consuming
    stored = await documents(engine)
    ledger = {entry["number"]: entry for entry in mock_integrator.ledger()}
    assert len(ledger) == len(expected)  # one accepted document per number
    for invoice_id, row in stored.items():
        body = bytes(row.body)
        assert hashlib.sha256(body).hexdigest() == row.document_sha256 == row.issued_sha256
        assert ledger[row.number]["uuid"] == str(row.uuid)
        assert ledger[row.number]["invoice_id"] == invoice_id
        if row.tenant == "globex":  # no profile: the document is the message's JSON
            assert (row.profile_version, row.media_type) == (None, "application/json")
            assert mock_integrator.document("globex", row.number).json() == json.loads(body)
            continue
        assert (row.profile_version, row.media_type) == (1, "application/xml")
        assert len(body) > 2048  # above TOAST's threshold: stored compressed, with lz4 (0021)
        assert row.compression == "lz4"
        assert accepted(mock_integrator, "acme", row.number) == body  # exactly what was sent
        assert_valid(body)
        sealed = row.reserved_at.astimezone(IST)
        assert field(body, "cbc:ID") == row.number
        assert field(body, "cbc:UUID") == str(row.uuid)
        assert field(body, "cbc:IssueDate") == sealed.date().isoformat()
        assert row.number[3:7] == field(body, "cbc:IssueDate")[:4]  # the number's year
    assert field(bytes(stored["usd-1"].body), "cbc:DocumentCurrencyCode") == "USD"


BAD_UBL: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str]] = [
    ("no city", lambda m: {**m, "customer": {**m["customer"], "address": {
        k: v for k, v in m["customer"]["address"].items() if k != "city"}}},
     "customer.address.city"),
    ("no address", lambda m: {**m, "customer": {
        k: v for k, v in m["customer"].items() if k != "address"}}, "customer.address"),
    ("no tax office", lambda m: {**m, "customer": {
        k: v for k, v in m["customer"].items() if k != "tax_office"}}, "customer.tax_office"),
    ("TCKN without a person", lambda m: {**m, "customer": {
        **m["customer"], "tax_id": "10000000146"}}, "customer.person"),
    ("TCKN with a wrong check digit", lambda m: {**m, "customer": {
        **m["customer"], "tax_id": "10000000147",
        "person": {"first_name": "Ali", "family_name": "Veli"}}}, "customer.tax_id"),
    ("unknown unit code", lambda m: {**m, "lines": [{**m["lines"][0], "unit_code": "XYZ"}]},
     "unit_code"),
    ("unknown currency", lambda m: {**m, "currency": "ZZZ", "exchange_rate": "2"},
     "currency"),
    ("foreign currency without a rate", lambda m: {**m, "currency": "EUR"}, "exchange_rate"),
    ("unknown VAT rate", lambda m: {**m, "lines": [{**m["lines"][0], "vat_rate": "7"}]},
     "vat_rate"),
    ("series that cannot print GİB numbers", lambda m: {**m, "series": "MON"}, "series"),
]


@pytest.mark.usefixtures("profiled")
async def test_what_a_document_needs_is_checked_before_any_number_is_sealed(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    old = (datetime.now(IST).date() - timedelta(days=8)).isoformat()
    future = (datetime.now(IST).date() + timedelta(days=1)).isoformat()
    bad = [(name, change(ubl_message(f"bad-{index}")), where)
           for index, (name, change, where) in enumerate(BAD_UBL)]
    bad += [("issue date 8 days old", ubl_message("bad-old", issue_date=old), "issue_date"),
            ("issue date tomorrow", ubl_message("bad-future", issue_date=future), "issue_date"),
            ("issue date tomorrow, no profile",
             ubl_message("bad-future-json", tenant="globex", series="GLX", issue_date=future),
             "issue_date")]
    good = [ubl_message(f"good-{index}") for index in range(len(bad) + 1)]
    interleaved = [m for pair in zip(good, [m for _, m, _ in bad], strict=False)
                   for m in pair] + [good[-1]]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *interleaved)
        dead = await drain_dead(worker_settings, len(bad))
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in good}, "ISSUED"),
                          60, message="the good messages ISSUED")
    reasons = {m.message_id or json.loads(m.body)["invoice_id"]:
               str((m.headers or {})[HEADER_DEAD_REASON]) for m in dead}
    for name, message, where in bad:
        reason = reasons[message["invoice_id"]]
        assert where in reason, f"{name}: {reason}"
        assert message["customer"]["tax_id"] not in reason  # no tax id in a reason
    current = await rows(engine)
    assert {m["invoice_id"] for _, m, _ in bad}.isdisjoint(current)  # nothing stored for them
    assert await counter(engine) == len(good)  # and no number consumed


@pytest.mark.usefixtures("profiled")
async def test_numbers_and_issue_dates_agree_across_a_year_boundary(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    # A past boundary: GİB refuses an IssueDate after its own today, and every document here is
    # validated.
    now = [datetime(2025, 12, 31, 23, 59, 50, tzinfo=IST)]

    def clock() -> datetime:
        return now[0]

    async with running_worker(worker_settings, concurrency=4, clock=clock):
        await publish(worker_settings, *(ubl_message(f"dec-{i}", issue_date="2025-12-31")
                                         for i in range(4)))
        await await_until(lambda: all_in(engine, {f"dec-{i}" for i in range(4)}, "ISSUED"),
                          60, message="December's invoices ISSUED")
        now[0] = datetime(2026, 1, 1, 0, 0, 5, tzinfo=IST)
        await publish(worker_settings, *(ubl_message(f"jan-{i}", issue_date=day)
                                         for i, day in enumerate(["2025-12-31", "2026-01-01",
                                                                  "2026-01-01"])))
        await await_until(lambda: all_in(engine, {f"jan-{i}" for i in range(3)}, "ISSUED"),
                          60, message="January's invoices ISSUED")
        # A clock that goes back (another host's, say) within the year: the seal never does.
        now[0] = datetime(2026, 1, 1, 0, 0, 1, tzinfo=IST)
        await publish(worker_settings, ubl_message("jan-late", issue_date="2026-01-01"))
        await await_until(lambda: all_in(engine, {"jan-late"}, "ISSUED"), 60,
                          message="the late invoice ISSUED")
    stored = await documents(engine)
    by_year: dict[str, list[tuple[str, str]]] = {}
    for row in stored.values():
        assert_valid(bytes(row.body))
        issue_date = field(bytes(row.body), "cbc:IssueDate")
        assert issue_date is not None
        assert row.number[3:7] == issue_date[:4]
        by_year.setdefault(issue_date[:4], []).append((row.number, issue_date))
    assert sorted(by_year["2025"]) == [(f"ABC2025{n:09d}", "2025-12-31") for n in range(1, 5)]
    assert sorted(by_year["2026"]) == [(f"ABC2026{n:09d}", "2026-01-01") for n in range(1, 5)]
    seals = sorted((row.number, row.reserved_at) for row in stored.values())
    for year in ("2025", "2026"):
        times = [sealed for number, sealed in seals if number[3:7] == year]
        assert times == sorted(times)  # IssueDate (and the seal) never goes backwards
    assert stored["jan-late"].reserved_at == max(t for n, t in seals if n[3:7] == "2026")


async def test_a_profile_set_while_the_worker_runs_applies_to_the_next_seal(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    before = ubl_message("before")
    async with running_worker(worker_settings, concurrency=2):
        await publish(worker_settings, before)
        await await_until(lambda: all_in(engine, {"before"}, "ISSUED"), 60,
                          message="the first invoice ISSUED")
        # The worker cached "none".
        await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))
        person = {"tax_id": tckn(random.Random(3)), "name": "Ayşe Yılmaz",
                  "person": {"first_name": "Ayşe", "family_name": "Yılmaz"},
                  "address": {"district": "Konak", "city": "İzmir"}}
        await publish(worker_settings, ubl_message("after", customer=person),
                      ubl_message("after-no-city", customer={
                          **person, "address": {"district": "Konak"}}))
        dead = await drain_dead(worker_settings, 1)
        await await_until(lambda: all_in(engine, {"after"}, "ISSUED"), 60,
                          message="the second invoice ISSUED")
    stored = await documents(engine)
    assert (stored["before"].profile_version, stored["before"].media_type) == (
        None, "application/json")
    assert bytes(stored["before"].body) == canonical_json(stored["before"].payload)
    assert stored["before"].payload["customer"] == before["customer"]
    assert (stored["after"].profile_version, stored["after"].media_type) == (1, "application/xml")
    assert_valid(bytes(stored["after"].body))
    assert "customer.address.city" in str((dead[0].headers or {})[HEADER_DEAD_REASON])
    # Refused before its seal: never stored, or (when it was the one to find the profile stale)
    # its draft cancelled with the reason. Either way no number.
    refused = stored.get("after-no-city")
    assert refused is None or (refused.status, refused.number) == ("CANCELLED", None)
    assert await counter(engine) == 2


@pytest.mark.usefixtures("profiled")
async def test_the_issue_date_window_is_configurable(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    eight_days_ago = (datetime.now(IST).date() - timedelta(days=8)).isoformat()
    wider = worker_settings.with_overrides(issue_date_window_days=30)
    async with running_worker(wider, concurrency=2):
        await publish(wider, ubl_message("old-but-allowed", issue_date=eight_days_ago))
        await await_until(lambda: all_in(engine, {"old-but-allowed"}, "ISSUED"), 60,
                          message="the 8-day-old invoice ISSUED")
    body = bytes((await documents(engine))["old-but-allowed"].body)
    assert field(body, "cbc:IssueDate") == datetime.now(IST).date().isoformat()  # the seal's day


@pytest.mark.usefixtures("profiled")
async def test_invoice_show_document_prints_the_bytes_sent_or_what_the_next_send_sends(
        engine: AsyncEngine, worker_settings: Settings, gapless_env: dict[str, str],
        mock_integrator: MockIntegratorClient) -> None:
    async with running_worker(worker_settings, concurrency=2):
        await publish(worker_settings, ubl_message("sent-1"))
        await await_until(lambda: all_in(engine, {"sent-1"}, "ISSUED"), 30,
                          message="sent-1 ISSUED")
    number = (await rows(engine))["sent-1"].number
    shown = run_gapless(["invoice", "show", "sent-1", "--document"], gapless_env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.encode() == accepted(mock_integrator, "acme", number) + b"\n"
    assert shown.stderr == ""

    # Sealed under the profile, nothing sent yet: the document its next send will send.
    await upsert_draft(ledger(engine), Draft("sealed-1", "acme", "ABC", 4, ubl_message("sealed-1")))
    claim = await claim_for_sending(ledger(engine), "sealed-1", tenant="acme", lease_s=300,
                                    lock_timeout_ms=5000)
    assert claim.sending is not None
    shown = run_gapless(["invoice", "show", "sealed-1", "--document"], gapless_env)
    assert shown.returncode == 0, shown.stderr
    body = shown.stdout.encode().rstrip(b"\n")
    assert_valid(body)
    assert (field(body, "cbc:ID"), field(body, "cbc:UUID")) == (
        claim.sending.number, claim.sending.uuid)
    assert f"sha256 {hashlib.sha256(body).hexdigest()}" in shown.stderr
    assert "has sent no document yet" in shown.stderr

    # A draft without a number has no document.
    await upsert_draft(ledger(engine), Draft("draft-1", "acme", "ABC", 4, ubl_message("draft-1")))
    shown = run_gapless(["invoice", "show", "draft-1", "--document"], gapless_env)
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert "has no number yet" in shown.stderr


def kind_messages() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
    """A valid message of every document kind, and refusals of each kind's rules (with the
    field the reason names)."""
    ref = [{"number": "SUP2025000000012", "issue_date": today()}]
    zero = {"vat_rate": "0"}
    abroad = {"district": "Mitte", "city": "Berlin", "country": "Almanya"}

    def lines(**changes: Any) -> list[dict[str, Any]]:
        return [{**line, **changes} for line in ubl_message("x")["lines"]]

    good = [
        ubl_message("k-sale", lines=[{**lines()[0], "discount": "2.50"}, {**lines()[1], **zero}]),
        ubl_message("k-iade", type="IADE", billing_reference=ref),
        ubl_message("k-tevkifat", type="TEVKIFAT", lines=lines(withholding_code="612")),
        ubl_message("k-tevkifatiade", type="TEVKIFATIADE", billing_reference=ref,
                    lines=lines(withholding_code="624")),
        ubl_message("k-istisna", type="ISTISNA", lines=lines(vat_exemption_code="301", **zero)),
        ubl_message("k-ihrackayitli", type="IHRACKAYITLI",
                    lines=lines(vat_exemption_code="702", gtip="847130000000",
                                dib_line_code="D1234567890", **zero)),
        ubl_message("k-ozelmatrah", type="OZELMATRAH",
                    lines=lines(vat_exemption_code="806", **zero)),
        ubl_message("k-ihracat", profile="IHRACAT", type="ISTISNA", currency="EUR",
                    exchange_rate="37.5",
                    customer={"tax_id": "1460415308", "name": "Hansa Handel GmbH",
                              "address": abroad},
                    export={"incoterms": "CIF", "transport_mode": "1",
                            "delivery_address": abroad},
                    lines=lines(vat_exemption_code="301", gtip="847130000000", **zero)),
        ubl_message("k-kamu", profile="KAMU", payment={"iban": "TR330006100519786457841326"}),
        ubl_message("k-earsiv", profile="EARSIVFATURA", earsiv={"send_type": "KAGIT"}),
    ]
    bad = [
        (ubl_message("kb-ticari-iade", type="IADE", profile="TICARIFATURA",
                     billing_reference=ref), "type"),
        (ubl_message("kb-iade-no-ref", type="IADE"), "billing_reference"),
        (ubl_message("kb-iade-bad-ref", type="IADE", billing_reference=[
            {"number": "12", "issue_date": today()}]), "billing_reference.0.number"),
        (ubl_message("kb-unknown-exemption", lines=lines(vat_exemption_code="399", **zero)),
         "lines.0.vat_exemption_code"),
        (ubl_message("kb-unknown-withholding", type="TEVKIFAT",
                     lines=lines(withholding_code="699")), "lines.0.withholding_code"),
        (ubl_message("kb-rate", type="TEVKIFAT", lines=lines(withholding_code="612",
                                                               withholding_rate="50")),
         "lines.0.withholding_rate"),
        (ubl_message("kb-702", type="IHRACKAYITLI",
                     lines=lines(vat_exemption_code="702", **zero)), "lines.0.gtip"),
        (ubl_message("kb-kamu", profile="KAMU"), "payment"),
    ]
    return good, bad


@pytest.mark.usefixtures("profiled")
async def test_every_document_kind_is_issued_and_each_refusal_consumes_no_number(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    good, bad = kind_messages()
    interleaved = [m for pair in zip(good, [m for m, _ in bad], strict=False) for m in pair]
    interleaved += good[len(bad):]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *interleaved)
        dead = await drain_dead(worker_settings, len(bad))
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in good}, "ISSUED"),
                          60, message="every kind ISSUED")
    reasons = {json.loads(m.body)["invoice_id"]: str((m.headers or {})[HEADER_DEAD_REASON])
               for m in dead}
    for message, where in bad:
        assert reasons[message["invoice_id"]].startswith(f"{where}: "), reasons
    assert {m["invoice_id"] for m, _ in bad}.isdisjoint(await rows(engine))
    assert await counter(engine) == len(good)  # no number consumed by a refusal
    stored = await documents(engine)
    for message in good:
        body = bytes(stored[message["invoice_id"]].body)
        assert accepted(mock_integrator, "acme", stored[message["invoice_id"]].number) == body
        assert_valid(body)
        assert field(body, "cbc:InvoiceTypeCode") == message.get("type", "SATIS")
        assert field(body, "cbc:ProfileID") == message.get("profile", "TEMELFATURA")
    returned = bytes(stored["k-iade"].body)
    assert field(returned, "cac:BillingReference/cac:InvoiceDocumentReference/cbc:ID") == (
        "SUP2025000000012")
    audit = run_gapless(["audit", "--integrator"], integrated_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
