"""Invoices that bill dispatch notes, end to end (a worker in-process against real RabbitMQ,
PostgreSQL and the mock integrator over HTTP): an invoice naming a dispatch note dated after
today in the series' time zone, and one routed e-Fatura that says ``earsiv.is_despatch``, are
dead-lettered before any number — nothing stored, the counter untouched, the audit clean — while
the same facts where the contract allows them are issued: the e-Fatura names its dispatch notes
(``cac:DespatchDocumentReference``), the e-Arşiv invoice carries ``IS_DESPATCH``."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.settings import Settings
from tests.helpers import await_until, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.ubl import NS, assert_valid, field, parse_ubl
from tests.worker_support import (
    all_in,
    counter,
    drain_dead,
    publish,
    routed_message,
    routed_tenant,
    rows,
    running_worker,
)

#: An e-Fatura user (registered at the mock) and a customer who is not.
USER, OTHER = "4840847211", "5950193314"


def day(offset: int) -> str:
    """Today in the series' time zone (Europe/Istanbul), moved by ``offset`` days. Futures are
    two days ahead, so a run across midnight cannot make one today."""
    return (dt.date.fromisoformat(today()) + dt.timedelta(days=offset)).isoformat()


def message(invoice_id: str, tax_id: str, **changes: Any) -> dict[str, Any]:
    """A message with no series and no profile (routing chooses both), of 12 widgets."""
    return routed_message(invoice_id, tax_id, quantity="12", **changes)


@pytest.fixture
async def routed(engine: AsyncEngine) -> None:
    """Tenant acme with an issuer profile, an e-Fatura series EFA and an e-Arşiv series EAR,
    both defaults, and a series ANY without routing."""
    await routed_tenant(engine)


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=2.0)


async def documents(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.series, i.reserved_no, i.payload, d.body
              FROM invoices i
              JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
        """))
        return {row.invoice_id: row for row in result}


@pytest.mark.usefixtures("routed")
async def test_refused_before_any_number_and_issued_where_the_contract_allows(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    mock_integrator.set_recipients({USER: ["urn:mail:defaultpk@a.example"]})
    future = [{"number": "IRS2026000000004", "issue_date": day(-3)},
              {"number": "IRS2026000000005", "issue_date": day(2)}]
    refused = [
        (message("f-efatura", USER, despatch_references=future),
         f"despatch_references.1.issue_date: {day(2)} is after today"),
        (message("f-earsiv", OTHER, despatch_references=future),
         f"despatch_references.1.issue_date: {day(2)} is after today"),
        (message("f-any", OTHER, series="ANY", profile="TEMELFATURA",
                 despatch_references=future),
         f"despatch_references.1.issue_date: {day(2)} is after today"),
        (message("d-efatura", USER, earsiv={"is_despatch": True}),
         "earsiv.is_despatch: only for an invoice that goes e-Arşiv (EARSIVFATURA), not a "
         "TEMELFATURA one"),
        (message("d-ticari", USER, profile="TICARIFATURA", earsiv={"is_despatch": True}),
         "earsiv.is_despatch: only for an invoice that goes e-Arşiv (EARSIVFATURA), not a "
         "TICARIFATURA one"),
    ]
    billed = [{"number": "IRS2026000000004", "issue_date": day(-3)},
              {"number": "IRS2026000000006", "issue_date": today()}]
    issued = [message("g-efatura", USER, despatch_references=billed),
              message("g-earsiv", OTHER, earsiv={"is_despatch": True},
                      despatch_references=billed[:1])]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *[sent for sent, _ in refused])
        dead = await drain_dead(worker_settings, len(refused))
        assert await counter(engine) == 0  # no number used
        assert await rows(engine) == {}  # nothing stored
        await publish(worker_settings, *issued)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in issued}, "ISSUED"),
                          30, message="the allowed ones ISSUED")
    reasons = {json.loads(m.body)["invoice_id"]: str((m.headers or {})[HEADER_DEAD_REASON])
               for m in dead}
    for sent, reason in refused:
        assert reasons[sent["invoice_id"]].startswith(reason), reasons
        assert USER not in reasons[sent["invoice_id"]]
        assert OTHER not in reasons[sent["invoice_id"]]
    stored = await documents(engine)
    assert set(stored) == {"g-efatura", "g-earsiv"}
    efatura, earsiv = bytes(stored["g-efatura"].body), bytes(stored["g-earsiv"].body)
    for body in (efatura, earsiv):
        assert_valid(body)
    assert (stored["g-efatura"].series, field(efatura, "cbc:ProfileID")) == ("EFA", "TEMELFATURA")
    assert (stored["g-earsiv"].series, field(earsiv, "cbc:ProfileID")) == ("EAR", "EARSIVFATURA")
    assert [(ref.findtext("cbc:ID", namespaces=NS), ref.findtext("cbc:IssueDate", namespaces=NS))
            for ref in parse_ubl(efatura).findall("cac:DespatchDocumentReference", NS)] == [
        (ref["number"], ref["issue_date"]) for ref in billed]
    codes = [ref.findtext("cbc:DocumentTypeCode", namespaces=NS)
             for ref in parse_ubl(earsiv).findall("cac:AdditionalDocumentReference", NS)]
    assert "IS_DESPATCH" in codes
    assert field(earsiv, "cac:DespatchDocumentReference/cbc:ID") == "IRS2026000000004"
    # each series numbered from 1, nothing skipped for the refused ones
    assert (stored["g-efatura"].reserved_no, stored["g-earsiv"].reserved_no) == (1, 1)
    assert {entry["invoice_id"] for entry in mock_integrator.ledger()} == {"g-efatura",
                                                                           "g-earsiv"}
    audit = run_gapless(["audit", "--integrator"], integrated_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
