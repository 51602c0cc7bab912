"""What the worker still refuses before any number is visible: published straight to RabbitMQ
(past the API's checks), a message whose issue_date is outside the window is dead-lettered by a
real worker, and ``GET /v1/invoices/{id}`` answers ``REFUSED`` with the reason while the feed
carries a ``refused`` event. No number is used; the same id, fixed and issued, then shows its
invoice. Real PostgreSQL, RabbitMQ, the mock integrator over HTTP and a ``gapless api`` process."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.ledger.database import Database
from gapless.ledger.refusals import get_refusal, record_refusal
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until, ledger, today
from tests.integration.test_api import define_series, new_token
from tests.mock_client import MockIntegratorClient
from tests.poison_support import publish_raw
from tests.worker_support import counter, drain_dead, publish, running_worker, sale


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=2.0)


class Api:
    def __init__(self, url: str, token: str, http: httpx.AsyncClient) -> None:
        self.url, self.http = url, http
        self.headers = {"Authorization": f"Bearer {token}"}

    async def invoice(self, invoice_id: str) -> httpx.Response:
        return await self.http.get(f"{self.url}/v1/invoices/{invoice_id}",
                                   params={"tenant": "acme"}, headers=self.headers)

    async def events(self) -> list[dict[str, Any]]:
        answer = await self.http.get(f"{self.url}/v1/events", params={"tenant": "acme"},
                                     headers=self.headers)
        assert answer.status_code == 200, answer.text
        results: list[dict[str, Any]] = answer.json()["results"]
        return results


@pytest.fixture
async def api(api_servers: ApiServers, engine: AsyncEngine) -> AsyncIterator[Api]:
    await define_series(engine)
    token = new_token()
    url, _ = api_servers.start(token)
    async with httpx.AsyncClient(timeout=15) as http:
        yield Api(url, token, http)


def stale(invoice_id: str) -> dict[str, Any]:
    message = sale(invoice_id)
    message["issue_date"] = (dt.date.fromisoformat(today()) - dt.timedelta(days=30)).isoformat()
    return message


async def test_a_worker_refusal_is_refused_in_get_and_the_feed_then_the_fixed_invoice_wins(
        api: Api, worker_settings: Settings, engine: AsyncEngine) -> None:
    async with running_worker(worker_settings):
        await publish(worker_settings, stale("LATE-1"))
        dead = await drain_dead(worker_settings, 1)
        reason = str(dead[0].headers[HEADER_DEAD_REASON])
        assert reason.startswith("issue_date: ")

        async def refused() -> httpx.Response | None:
            answer = await api.invoice("LATE-1")
            return answer if answer.status_code == 200 else None

        answer = await await_until(refused, 30, message="GET to answer REFUSED")
        body = answer.json()
        assert body["status"] == "REFUSED"
        assert body["reason"] == reason
        assert (body["invoice_id"], body["tenant"], body["series"]) == ("LATE-1", "acme", "ABC")
        events = [e for e in await api.events() if e["invoice_id"] == "LATE-1"]
        assert [(e["kind"], e["to_status"], e["detail"], e["actor"]) for e in events] == [
            ("refused", "REFUSED", reason, "worker")]
        assert events[0]["sequence_id"] > 0
        assert await counter(engine) == 0  # no number used

        await publish(worker_settings, sale("LATE-1"))

        async def issued() -> dict[str, Any] | None:
            answer = await api.invoice("LATE-1")
            found: dict[str, Any] = answer.json()
            return found if found.get("status") == "ISSUED" else None

        invoice = await await_until(issued, 30, message="the fixed invoice to be ISSUED")
    assert invoice["reserved_no"] == 1
    assert await counter(engine) == 1
    kinds = [e["to_status"] for e in await api.events() if e["invoice_id"] == "LATE-1"]
    assert kinds[0] == "REFUSED"
    assert kinds[-1] == "ISSUED"


async def test_an_unreadable_message_is_dead_lettered_without_a_refusal(
        api: Api, worker_settings: Settings, engine: AsyncEngine) -> None:
    """Only a message whose tenant and invoice_id are the contract's is recorded."""
    broken = sale("BROKEN-1")
    broken["lines"] = []
    async with running_worker(worker_settings):
        await publish_raw(worker_settings, json.dumps(broken).encode(), message_id="BROKEN-1")
        await drain_dead(worker_settings, 1)
    assert (await api.invoice("BROKEN-1")).status_code == 404
    assert await get_refusal(ledger(engine), "acme", "BROKEN-1") is None


async def test_a_repeated_refusal_keeps_the_newest_reason_and_adds_an_event(
        api: Api, engine: AsyncEngine) -> None:
    db: Database = ledger(engine)
    await record_refusal(db, "acme", "AGAIN-1", None, "series: first\nreason")
    await record_refusal(db, "acme", "AGAIN-1", None, "x" * 5000)
    refusal = await get_refusal(db, "acme", "AGAIN-1")
    assert refusal is not None
    assert refusal.series is None
    assert refusal.reason.startswith("xxx")
    assert len(refusal.reason) < 5000
    body = (await api.invoice("AGAIN-1")).json()
    assert (body["status"], body["reason"], body["series"]) == ("REFUSED", refusal.reason, None)
    details = [e["detail"] for e in await api.events() if e["invoice_id"] == "AGAIN-1"]
    assert details == ["series: first reason", refusal.reason]


async def test_a_refusal_that_cannot_be_recorded_is_still_dead_lettered(
        api: Api, worker_settings: Settings, engine: AsyncEngine) -> None:
    """Recording never stands in the way of the dead-lettering: with the table gone (a database
    error on every recording), the message is dead-lettered with its reason all the same."""
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE refusals"))
    async with running_worker(worker_settings):
        await publish(worker_settings, stale("LATE-2"))
        dead = await drain_dead(worker_settings, 1)
    assert str(dead[0].headers[HEADER_DEAD_REASON]).startswith("issue_date: ")
    assert await counter(engine) == 0


async def test_a_dispatch_note_in_an_invoice_series_is_dead_lettered_before_any_number(
        worker_settings: Settings, engine: AsyncEngine) -> None:
    """A dispatch note (published past the API) that names an invoice series is dead-lettered
    naming why, and no counter moves."""
    from tests.integration.test_api_refusals import despatch_note

    await define_series(engine)
    async with running_worker(worker_settings):
        await publish(worker_settings, {**despatch_note("NOTE-1"), "series": "ABC"})
        dead = await drain_dead(worker_settings, 1)
    reason = str(dead[0].headers[HEADER_DEAD_REASON])
    assert reason.startswith("series: ABC numbers invoices (channel any); a dispatch note needs "
                             "a series of channel edespatch")
    assert await counter(engine) == 0
