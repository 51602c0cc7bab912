"""The API end to end: ``gapless api``, ``gapless worker`` and ``gapless mock-integrator`` as real
processes. An invoice POSTed to the API is published, issued by the worker at the integrator,
visible at its status URL as ISSUED, and its history arrives on the feed in commit order.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.conftest import ApiServers
from tests.helpers import GaplessProcess, await_until, ledger, today, wait_until
from tests.mock_client import MockIntegratorClient


def invoice_message(invoice_id: str, tax_id: str = "1234567890") -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": "acme", "series": "ABC",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": tax_id, "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}


async def test_posted_invoice_reaches_issued_and_its_history_is_on_the_feed(
        api_servers: ApiServers, engine: AsyncEngine, integrated_env: dict[str, str],
        mock_integrator: MockIntegratorClient, log_dir: Path) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    token = secrets.token_urlsafe(24)
    url, _ = api_servers.start(f"acme:{token}")
    worker = GaplessProcess(["worker", "--concurrency", "4"], integrated_env, log_dir, "worker")
    try:
        wait_until(lambda: "worker_started" in worker.output() or not worker.alive(), 60,
                   message="the worker to start")
        assert worker.alive(), worker.output()[-3000:]
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=15, headers=headers) as http:
            accepted = await http.post(f"{url}/v1/invoices", json=invoice_message("flow-1"))
            assert accepted.status_code == 202, accepted.text
            status_url = accepted.json()["status_url"]
            assert accepted.headers["Location"] == status_url

            async def issued() -> dict[str, Any] | None:
                response = await http.get(status_url)
                if response.status_code == 404:
                    return None  # accepted, not stored yet: keep polling
                assert response.status_code == 200, response.text
                body: dict[str, Any] = response.json()
                return body if body["status"] == "ISSUED" else None

            invoice = await await_until(issued, 60, interval=0.2,
                                        message="the invoice to be ISSUED")
            assert invoice["number"].startswith("ABC")
            assert invoice["integrator_ref"]
            assert invoice["attempts"] == 1
            assert [e["kind"] for e in invoice["events"]] == ["received", "reserved",
                                                              "sending", "issued"]
            assert {e["actor"] for e in invoice["events"]} == {"worker"}

            # The integrator holds exactly this document under this number.
            accepted = mock_integrator.ledger()
            assert [(d["number"], d["invoice_id"]) for d in accepted] == [
                (invoice["number"], "flow-1")]

            # Posting it again is harmless: 202, same status URL, nothing published.
            again = await http.post(f"{url}/v1/invoices", json=invoice_message("flow-1"))
            assert again.status_code == 202
            assert again.json()["status_url"] == status_url
            assert again.json()["published"] is False
            assert again.json()["status"] == "ISSUED"

            # A permanent rejection is visible with its reason.
            rejected = await http.post(f"{url}/v1/invoices",
                                       json=invoice_message("flow-2", tax_id="0000000000"))
            assert rejected.status_code == 202

            async def settled() -> dict[str, Any] | None:
                response = await http.get(rejected.json()["status_url"])
                body: dict[str, Any] = response.json()
                ok = response.status_code == 200 and body["status"] == "REJECTED"
                return body if ok else None

            refusal = await await_until(settled, 60, interval=0.2,
                                        message="the invoice to be REJECTED")
            assert refusal["last_error"]
            assert refusal["number"]  # the number stays pinned on a rejected invoice

            # The feed holds both histories in commit order, each event once.
            feed = (await http.get(f"{url}/v1/events", params={"limit": 500})).json()
            kinds = [(e["invoice_id"], e["kind"]) for e in feed["results"]]
            assert [k for i, k in kinds if i == "flow-1"] == ["received", "reserved", "sending",
                                                              "issued"]
            assert [k for i, k in kinds if i == "flow-2"][-1] == "rejected"
            ids = [e["sequence_id"] for e in feed["results"]]
            assert ids == sorted(set(ids))
        assert worker.terminate() == 0
    finally:
        worker.close()
