"""The API refuses at once — 422 naming the field, nothing published — what the worker would
refuse before any number: an unknown tenant or series, a series whose channel does not fit the
message, no default series the message could take, an issue_date outside the window, a UBL-TR
document that cannot be made; in a batch, per item. A real ``gapless api`` process over HTTP,
real PostgreSQL and RabbitMQ (the queue's depth is read from the broker)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.documents import build_issuer
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import ledger, today
from tests.integration.test_api import define_series, invoice_message, issued_invoice, new_token

#: The example messages of docs/message.md.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "messages"

ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
          "postal_zone": "34716"}


def days_ago(days: int) -> str:
    return (dt.date.fromisoformat(today()) - dt.timedelta(days=days)).isoformat()


def ubl_message(invoice_id: str, tenant: str = "ubl", **changes: Any) -> dict[str, Any]:
    """A message of the profiled tenant that makes a valid UBL-TR document (no series: routing
    chooses)."""
    data: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": tenant, "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": "1234567890", "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}]}
    data.update(changes)
    return data


def despatch_note(invoice_id: str) -> dict[str, Any]:
    """The contract's dispatch note (examples/messages/despatch.json), for tenant acme, today."""
    data: dict[str, Any] = json.loads(EXAMPLES.joinpath("despatch.json").read_text("utf-8"))
    data.update(invoice_id=invoice_id, tenant="acme", issue_date=today())
    data["despatch"]["despatch_date"] = today()
    return data


class Client:
    def __init__(self, url: str, token: str, http: httpx.AsyncClient) -> None:
        self.url, self.http = url, http
        self.headers = {"Authorization": f"Bearer {token}"}

    async def post(self, message: dict[str, Any]) -> httpx.Response:
        return await self.http.post(f"{self.url}/v1/invoices", json=message,
                                    headers=self.headers)

    async def batch(self, messages: list[dict[str, Any]]) -> httpx.Response:
        return await self.http.post(f"{self.url}/v1/invoices/batch", json=messages,
                                    headers=self.headers)


@pytest.fixture
async def client(api_servers: ApiServers, engine: AsyncEngine) -> AsyncIterator[Client]:
    """An all-tenant client of an API whose tenants are: acme (series ABC, no profile, no
    default), ubl (an issuer profile; defaults EFA for e-Fatura and EAR for e-Arşiv; series ANY
    without routing) and half (an issuer profile; only an e-Fatura default, EFH)."""
    await define_series(engine)
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("ubl", "EFA", channel="efatura", default=True))
        await add_series(tx, build_series_spec("ubl", "EAR", channel="earsiv", default=True))
        await add_series(tx, build_series_spec("ubl", "ANY"))
        await add_series(tx, build_series_spec("ubl", "IRS", channel="edespatch"))
        await add_series(tx, build_series_spec("half", "EFH", channel="efatura", default=True))
    await set_profile(ledger(engine), "ubl", build_issuer(**ISSUER))
    await set_profile(ledger(engine), "half", build_issuer(**ISSUER))
    token = new_token()
    url, _ = api_servers.start(token)
    async with httpx.AsyncClient(timeout=15) as http:
        yield Client(url, token, http)


async def queue_depth(settings: Settings) -> int:
    """How many messages wait in the test's work queue (the broker's count)."""
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(settings.queue, passive=True)
        count = queue.declaration_result.message_count
    return int(count or 0)


REFUSALS = [
    pytest.param(invoice_message("R-1", tenant="nobody"),
                 "tenant: unknown tenant 'nobody'", id="unknown-tenant"),
    pytest.param(invoice_message("R-2", series="ZZZ"),
                 "series: tenant 'acme' has no series 'ZZZ'", id="unknown-series"),
    pytest.param({k: v for k, v in invoice_message("R-3").items() if k != "series"},
                 "series: required (tenant 'acme' has no default series)", id="no-default"),
    pytest.param(invoice_message("R-4", issue_date=days_ago(30)),
                 "issue_date: ", id="date-too-old"),
    pytest.param(invoice_message("R-5", issue_date=days_ago(-2)),
                 "issue_date: ", id="date-in-future"),
    pytest.param(ubl_message("R-6", series="EFA", profile="EARSIVFATURA"),
                 "series: EFA numbers efatura documents", id="channel-does-not-fit"),
    pytest.param(ubl_message("R-7", series="EAR", customer={
        "tax_id": "1234567890", "name": "Example Ltd", "tax_office": "Çankaya",
        "alias": "urn:mail:defaultpk@example.com",
        "address": {"district": "Çankaya", "city": "Ankara"}}),
                 "series: EAR numbers earsiv documents", id="alias-in-earsiv-series"),
    pytest.param(ubl_message("R-8", tenant="half", profile="EARSIVFATURA"),
                 "series: tenant 'half' has no default series of channel earsiv",
                 id="no-default-of-the-channel"),
    pytest.param(ubl_message("R-9", series="ANY", customer={"tax_id": "1234567890",
                                                            "name": "Example Ltd"}),
                 "customer.", id="ubl-document-check"),
    pytest.param(ubl_message("R-10", issue_date=days_ago(30)), "issue_date: ",
                 id="date-window-routed"),
    pytest.param({**despatch_note("R-11"), "series": "ABC"},
                 "series: ABC (channel any) does not number dispatch notes; use a series of "
                 "channel edespatch", id="dispatch-note-in-an-invoice-series"),
    pytest.param(despatch_note("R-12"), "series: tenant 'acme' has no default series of channel "
                 "edespatch", id="dispatch-note-without-edespatch-series"),
    pytest.param(ubl_message("R-13", series="IRS"),
                 "series: IRS (channel edespatch) does not number invoices; use a series of "
                 "channel any or earsiv or efatura", id="invoice-in-an-edespatch-series"),
    pytest.param(invoice_message("DR-1", despatch_references=[
        {"number": "IRS2026000000004", "issue_date": days_ago(-2)}]),
                 "despatch_references.0.issue_date: ", id="despatch-reference-in-future"),
    pytest.param(ubl_message("DR-2", despatch_references=[
        {"number": "IRS2026000000004", "issue_date": days_ago(1)},
        {"number": "IRS2026000000005", "issue_date": days_ago(-2)}]),
                 "despatch_references.1.issue_date: ", id="despatch-reference-in-future-routed"),
    pytest.param(ubl_message("DR-3", profile="TEMELFATURA", earsiv={"is_despatch": True}),
                 "earsiv.is_despatch: only for an invoice that goes e-Arşiv",
                 id="is-despatch-on-an-efatura"),
]


@pytest.mark.parametrize(("message", "detail"), REFUSALS)
async def test_each_refusal_is_422_naming_the_field_and_nothing_is_published(
        client: Client, settings: Settings, message: dict[str, Any], detail: str) -> None:
    answer = await client.post(message)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(detail), answer.json()
    assert "1234567890" not in answer.text  # no tax id in the reason
    assert await queue_depth(settings) == 0


async def test_what_the_worker_may_take_is_published(client: Client,
                                                     settings: Settings) -> None:
    """The control: the same checks let valid messages through (a routed one whose channel the
    integrator decides, a plain one, one whose default exists for its channel)."""
    for message in (invoice_message("OK-1"), ubl_message("OK-2"),
                    ubl_message("OK-3", tenant="half"),
                    ubl_message("OK-4", series="EAR", issue_date=days_ago(3))):
        answer = await client.post(message)
        assert answer.status_code == 202, answer.text
        assert answer.json()["published"] is True
    assert await queue_depth(settings) == 4


async def test_dispatch_notes_billed_and_is_despatch_pass_where_the_worker_may_take_them(
        client: Client, settings: Settings) -> None:
    """A reference dated today, and is_despatch on a message routing may still make e-Arşiv,
    are published (the worker decides the channel)."""
    for message in (invoice_message("DR-OK-1", despatch_references=[
                        {"number": "IRS2026000000004", "issue_date": today()}]),
                    ubl_message("DR-OK-2", earsiv={"is_despatch": True}, despatch_references=[
                        {"number": "IRS2026000000004", "issue_date": days_ago(2)}])):
        answer = await client.post(message)
        assert answer.status_code == 202, answer.text
    assert await queue_depth(settings) == 2


async def test_an_invoice_the_database_holds_is_answered_as_it_stands(
        client: Client, settings: Settings, engine: AsyncEngine) -> None:
    """A redelivery of a sealed invoice goes on, even when its message would now be refused."""
    await issued_invoice(engine, "SEALED-1")
    answer = await client.post(invoice_message("SEALED-1", issue_date=days_ago(30)))
    assert answer.status_code == 202, answer.text
    assert answer.json()["published"] is False
    assert answer.json()["status"] == "ISSUED"
    assert await queue_depth(settings) == 0


async def test_a_batch_refuses_per_item_and_publishes_the_rest(client: Client,
                                                                settings: Settings) -> None:
    answer = await client.batch([
        invoice_message("B-1"),
        invoice_message("B-2", issue_date=days_ago(30)),
        invoice_message("B-3", series="ZZZ"),
        ubl_message("B-4", series="EFA", profile="EARSIVFATURA"),
        ubl_message("B-5"),
        invoice_message("B-2", issue_date=days_ago(30)),  # repeats a refused item
    ])
    assert answer.status_code == 200, answer.text
    body = answer.json()
    results = body["results"]
    assert [r["status"] for r in results] == [202, 422, 422, 422, 202, 422]
    assert results[1]["error"].startswith("issue_date: ")
    assert results[2]["error"] == "series: tenant 'acme' has no series 'ZZZ'"
    assert results[3]["error"].startswith("series: EFA numbers efatura documents")
    assert results[5]["error"] == results[1]["error"]
    assert [r["published"] for r in results] == [True, False, False, False, True, False]
    assert (body["accepted"], body["published"]) == (2, 2)
    assert await queue_depth(settings) == 2
