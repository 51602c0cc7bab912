"""Dispatch notes and invoices end to end under faults: real ``gapless worker`` and ``gapless
recovery`` processes, real RabbitMQ and PostgreSQL, the mock integrator over HTTP with transient
errors and lost responses, and a worker killed with ``kill -9`` mid-run. Notes go to registered
e-İrsaliye users (one alias; two, the note naming the second) and to GİB's box; invoices then
bill notes issued earlier in the run, and receivers answer notes at the mock. The oracles: the
database, the mock's ledger, the stored documents, ``gapless audit --integrator`` and the API
(the answers arrive there within recovery's polling)."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.demo.samples import vkn
from gapless.message import GIB_DESPATCH_BOX
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until, run_gapless
from tests.integration.test_api import new_token
from tests.integration.test_despatch_flow import note, tenant  # noqa: F401 (a fixture)
from tests.integration.test_routing import message
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes
from tests.ubl import parse_ubl
from tests.worker_support import all_in, publish_many

#: Retries enough that the fault rates never exhaust them, a breaker that does not trip on a
#: chance run, and a short lease so that recovery takes over what the killed worker held.
KNOBS = {"GAPLESS_RETRY_ATTEMPTS": "10", "GAPLESS_RETRY_WAIT_S": "0.05",
         "GAPLESS_BREAKER_FAIL_MAX": "100", "GAPLESS_LEASE_S": "3"}
#: Recovery asks about GİB's verdict and the receiver's answer within a second or two.
POLLING = {"GAPLESS_GIB_POLL_FIRST_S": "0.5", "GAPLESS_GIB_POLL_MAX_EFATURA_S": "1",
           "GAPLESS_ANSWER_POLL_MAX_S": "1"}
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"


async def stored(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.series, i.reserved_no, i.number, i.status, i.payload,
                   i.document, i.reserved_at AT TIME ZONE 'Europe/Istanbul' AS sealed, d.body
              FROM invoices i
              LEFT JOIN invoice_documents d ON d.invoice_pk = i.id
                                           AND d.sha256 = i.document_sha256"""))
        return {row.invoice_id: row for row in result}


async def issued_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(
            "SELECT count(*) FROM invoices WHERE status = 'ISSUED'"))).scalar_one())


@pytest.mark.usefixtures("tenant")
async def test_notes_and_invoices_under_faults_and_a_kill_are_each_accepted_once(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient, integrated_env: dict[str, str],
        api_servers: ApiServers) -> None:
    rng = random.Random(31)
    one, two, efatura = vkn(rng), vkn(rng), vkn(rng)
    unregistered = [vkn(rng) for _ in range(2)]
    aliases = {one: ["urn:mail:irsaliyepk@one.example"],
               two: ["urn:mail:irsaliyepk@two.example", "urn:mail:depo@two.example"]}
    mock_integrator.set_recipients({
        one: {"invoice": ["urn:mail:defaultpk@one.example"], "despatch": aliases[one]},
        two: {"despatch": aliases[two]},
        efatura: {"invoice": ["urn:mail:defaultpk@efatura.example"]}})
    mock_integrator.set_faults(latency_ms=[20, 120], transient_rate=0.15,
                               lost_response_rate=0.15)
    receivers = [one, two, *unregistered]
    notes = [note(f"n-{n:03d}", receivers[n % len(receivers)]) for n in range(40)]
    notes.append(note("n-second", two, alias=aliases[two][1]))
    invoices = [message(f"i-{n:03d}", rng.choice([efatura, one, *unregistered]))
                for n in range(30)]
    first = [*notes, *invoices]
    rng.shuffle(first)

    doomed = procs.worker("doomed", "--concurrency", "8", env=KNOBS)
    procs.recovery("recovery", "--interval", "1", "--stuck-after", "3",
                   env={**KNOBS, **POLLING})
    await publish_many(settings, first)
    await await_until(lambda: _at_least(engine, 15), 90, interval=0.2,
                      message="some documents ISSUED before the kill")
    doomed.kill9()
    procs.worker("survivor", "--concurrency", "8", env=KNOBS)
    await await_until(lambda: all_in(engine, {m["invoice_id"] for m in first}, "ISSUED"), 150,
                      interval=0.5, message="every note and invoice ISSUED")

    # invoices that bill notes issued earlier in the run
    rows = await stored(engine)
    billed = [rows[sent["invoice_id"]] for sent in notes[:5]]
    referencing = [message(f"bill-{n}", efatura, despatch_references=[
        {"number": row.number, "issue_date": row.sealed.date().isoformat()}])
        for n, row in enumerate(billed)]
    await publish_many(settings, referencing)
    everything = {m["invoice_id"] for m in [*first, *referencing]}
    await await_until(lambda: all_in(engine, everything, "ISSUED"), 90, interval=0.5,
                      message="the billing invoices ISSUED")
    mock_integrator.set_faults(transient_rate=0.0, lost_response_rate=0.0)

    rows = await stored(engine)
    ledger = mock_integrator.ledger()
    accepted = {entry["number"]: entry for entry in ledger}
    assert len(ledger) == len(everything)  # each document accepted exactly once
    assert {entry["invoice_id"] for entry in ledger} == everything
    for series in ("IRS", "EFA", "EAR"):  # each series gap-free, whatever the faults
        numbers = sorted(r.reserved_no for r in rows.values() if r.series == series)
        assert numbers == list(range(1, len(numbers) + 1)), series
    for sent in notes:
        row = rows[sent["invoice_id"]]
        tax_id = sent["customer"]["tax_id"]
        want = sent["customer"].get("alias") or (aliases[tax_id][0] if tax_id in aliases
                                                 else GIB_DESPATCH_BOX)
        assert (row.series, row.document) == ("IRS", "despatch")
        assert (accepted[row.number]["alias"], accepted[row.number]["document"]) == (
            want, "despatch")
    for n, row in enumerate(billed):
        document = parse_ubl(bytes(rows[f"bill-{n}"].body))
        assert document.findtext(f"{{{CAC}}}DespatchDocumentReference/{{{CBC}}}ID") == row.number
    assert mock_integrator.stats()["transient"] > 0  # the faults did happen
    audit = run_gapless(["audit", "--integrator"], integrated_env, timeout=120)
    assert audit.returncode == 0, audit.stdout + audit.stderr

    # receivers answer two notes at the mock: the API shows each within recovery's polling
    answers = {billed[0].invoice_id: {"code": "KISMIKABUL", "lines": [
                   {"line": 1, "received": "1", "short": "0", "rejected": "1",
                    "reason": "damaged"}]},
               billed[1].invoice_id: {"code": "KABUL", "lines": []}}
    async with engine.connect() as conn:
        uuids = {row.invoice_id: str(row.uuid) for row in await conn.execute(text(
            "SELECT invoice_id, uuid FROM invoices WHERE invoice_id = ANY(:ids)"),
            {"ids": list(answers)})}
    mock_integrator.set_answers({uuids[k]: v for k, v in answers.items()})
    token = new_token()
    url, _ = api_servers.start(token)
    async with httpx.AsyncClient(timeout=15) as http:
        async def shown() -> bool:
            got = [(await http.get(f"{url}/v1/invoices/{invoice_id}",
                                   headers={"Authorization": f"Bearer {token}"})).json()
                   for invoice_id in answers]
            return all(item["answer"] is not None and item["answer"]["code"] == want["code"]
                       for item, want in zip(got, answers.values(), strict=True))

        await await_until(shown, 30, interval=0.5, message="the answers in the API")


async def _at_least(engine: AsyncEngine, count: int) -> bool:
    return await issued_count(engine) >= count
