"""E-invoices through real ``gapless worker`` and ``gapless recovery`` processes, when things go
wrong: a lost response, a worker killed right after the seal, a duplicated message. Each ends with
exactly one accepted document per number at the integrator, whose ID and UUID are the invoice's,
byte for byte the document the database stores — and GİB's XSD and schematron accept it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.demo.samples import sample_messages
from gapless.documents import build_issuer
from gapless.ledger.tenants import set_profile
from tests.faults import fault_env
from tests.helpers import await_until, ledger, run_gapless, wait_until
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes, count_status, define_series, recovery_once
from tests.ubl import assert_valid, field

ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul"}


@pytest.fixture
async def profiled(engine: AsyncEngine) -> None:
    await define_series(engine)
    await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))


def publish_file(env: dict[str, str], tmp_path: Path, messages: list[dict[str, Any]]) -> None:
    path = tmp_path / "invoices.jsonl"
    path.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages),
                    encoding="utf-8")
    result = run_gapless(["publish", "--file", str(path), "--no-progress"], env)
    assert result.returncode == 0, result.stderr


async def stored_documents(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.status, i.number, i.uuid, i.attempts, d.body
              FROM invoices i
              JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256"""))
        return {row.invoice_id: row for row in result}


async def assert_one_document_per_number(engine: AsyncEngine, mock: MockIntegratorClient,
                                         expected: int) -> dict[str, Any]:
    """Every invoice ISSUED; the ledger holds one document per number, the invoice's own (number,
    UUID), byte for byte the stored one, and valid for GİB."""
    stored = await stored_documents(engine)
    assert len(stored) == expected
    ledger = mock.ledger()
    assert len(ledger) == len({entry["number"] for entry in ledger}) == expected
    by_number = {entry["number"]: entry for entry in ledger}
    for invoice_id, row in stored.items():
        assert row.status == "ISSUED"
        entry = by_number[row.number]
        assert (entry["invoice_id"], entry["uuid"]) == (invoice_id, str(row.uuid))
        body = mock.document("acme", row.number).content
        assert body == bytes(row.body)
        assert (field(body, "cbc:ID"), field(body, "cbc:UUID")) == (row.number, str(row.uuid))
        assert_valid(body)
    return stored


@pytest.mark.usefixtures("profiled")
async def test_lost_responses_are_repaired_and_the_stored_document_is_the_one_accepted(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes) -> None:
    count = 12
    mock_integrator.set_faults(lost_response_rate=1.0, lost_response_mode="timeout",
                               lost_response_delay_s=120)
    worker = procs.worker("worker", "--concurrency", "16",
                          env={"GAPLESS_INTEGRATOR_TIMEOUT_S": "120"})
    result = run_gapless(["publish", "--demo", str(count), "--tenant", "acme", "--series", "ABC",
                          "--no-progress"], integrated_env)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: len(mock_integrator.ledger()) == count, 60,
               message="every document accepted (the answers withheld)")
    worker.kill9()  # the documents are at the integrator; the database never heard
    assert await count_status(engine, "SENDING") == count
    mock_integrator.set_faults(lost_response_rate=0.0)

    summary = recovery_once(integrated_env)

    assert f"repaired {count}, resent 0" in summary.stdout
    await assert_one_document_per_number(engine, mock_integrator, count)
    assert mock_integrator.stats()["posts"] == count  # nothing sent twice


@pytest.mark.usefixtures("profiled")
async def test_a_worker_killed_after_the_seal_leaves_recovery_the_same_document_to_send(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes, tmp_path: Path) -> None:
    messages = list(sample_messages(3, tenant="acme", series="ABC", priority="user", seed=5,
                                    run_id="kill"))
    publish_file(integrated_env, tmp_path, messages[:1])
    procs.doomed_worker("doomed", "--concurrency", "1",
                        env=fault_env(kill_at="after_reserve_commit:1"))  # returns once dead
    async with engine.connect() as conn:
        sealed = (await conn.execute(text(
            "SELECT number, uuid, document_sha256 FROM invoices"))).one()
    assert sealed.document_sha256 is None  # sealed, nothing sent, nothing stored
    assert mock_integrator.ledger() == []
    publish_file(integrated_env, tmp_path, messages[1:])
    procs.worker("worker", "--concurrency", "4")

    wait_until(lambda: len(mock_integrator.ledger()) == 2, 60, message="the others issued")
    recovery_once(integrated_env)  # the orphan: resent under its number and UUID

    stored = await assert_one_document_per_number(engine, mock_integrator, 3)
    orphan = stored[messages[0]["invoice_id"]]
    assert (orphan.number, orphan.uuid) == (sealed.number, sealed.uuid)


@pytest.mark.usefixtures("profiled")
async def test_duplicate_messages_send_one_document_per_invoice(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], procs: Processes, tmp_path: Path) -> None:
    messages = list(sample_messages(10, tenant="acme", series="ABC", priority="batch", seed=9,
                                    run_id="dup"))
    mock_integrator.set_faults(latency_ms=[20, 60], lost_response_rate=0.2,
                               lost_response_mode="500")
    for name in ("worker-1", "worker-2"):
        procs.worker(name, "--concurrency", "8")
    # Lost answers end ERROR when the retries run out; recovery asks first, then repairs.
    procs.recovery("recovery", "--interval", "0.5", "--stuck-after", "30")
    publish_file(integrated_env, tmp_path, messages * 3)  # every message three times

    async def settled() -> bool:
        return await count_status(engine, "ISSUED") == len(messages)

    await await_until(settled, 90, interval=0.2, message="every invoice ISSUED")
    await assert_one_document_per_number(engine, mock_integrator, len(messages))
