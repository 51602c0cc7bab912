"""The producer examples outside gapless (examples/producers: plain pika, and Node with amqplib)
publish to real RabbitMQ, and a real ``gapless worker`` issues what they sent.

Each example reads a JSON Lines file: plain sales of a tenant without an issuer profile (user,
batch and no priority), and every contract example of examples/messages for a tenant with an
issuer profile (UBL-TR documents of every kind). The worker runs against the mock integrator;
the database and the mock's ledger are the oracles: every invoice ISSUED with its number, each
at the priority its producer set in the AMQP property. In quorum mode user work goes to
``<prefix>.user``. A message to a queue nobody declared is reported unroutable (exit 1).

The Node example is installed from its lock file (``npm ci``) into a copy in the test's
temporary directory; the test is skipped only where ``node`` or ``npm`` is not installed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import ROOT, await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes

PRODUCERS = ROOT / "examples" / "producers"
#: The invoices among them (dispatch notes are issued end to end in
#: tests/integration/test_despatch_flow.py).
EXAMPLES = sorted(path for path in (ROOT / "examples" / "messages").glob("*.json")
                  if json.loads(path.read_text("utf-8")).get("document") != "despatch")
#: The tenant of the UBL-TR examples (an issuer profile), and of the plain sales (none).
UBL_TENANT = "ubl"
PLAIN_TENANT = "acme"
#: Customers of the examples that are e-Fatura users (the mock refuses an e-Fatura profile to
#: anyone else, and an e-Arşiv document to them).
EFATURA_USERS = ("9876543209", "4700123450", "1460415308")


def node_example(workdir: Path) -> list[str]:
    """The Node example installed (``npm ci``) in a copy under ``workdir``: its command."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the Node producer example cannot run")
    copy = workdir / "node-producer"
    copy.mkdir()
    for name in ("package.json", "package-lock.json", "producer.js"):
        shutil.copy2(PRODUCERS / "node" / name, copy / name)
    installed = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=copy,
                               capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, f"npm ci failed:\n{installed.stdout}\n{installed.stderr}"
    return ["node", str(copy / "producer.js")]


def producer_command(producer: str, workdir: Path) -> list[str]:
    if producer == "pika":
        return [sys.executable, str(PRODUCERS / "pika_producer.py")]
    return node_example(workdir)


def plain_sales(run: str) -> list[dict[str, Any]]:
    """Sales of the tenant without an issuer profile: user, batch and no priority."""
    minimal = json.loads((ROOT / "examples" / "messages" / "minimal.json").read_text("utf-8"))
    sales = []
    for index, priority in enumerate(["user", "batch", None, "user", "batch", None]):
        sale = {**minimal, "invoice_id": f"{run}-plain-{index}", "issue_date": today(),
                "tenant": PLAIN_TENANT}
        sale.pop("priority", None)
        if priority is not None:
            sale["priority"] = priority
        sales.append(sale)
    return sales


def kinds(run: str) -> list[dict[str, Any]]:
    """Every UBL-TR contract example, for the tenant with an issuer profile, dated today."""
    messages = []
    for path in EXAMPLES:
        if path.stem == "minimal":
            continue
        message = json.loads(path.read_text("utf-8"))
        message.update(invoice_id=f"{run}-{path.stem}", tenant=UBL_TENANT, issue_date=today())
        messages.append(message)
    return messages


async def define_tenants(engine: AsyncEngine, env: dict[str, str],
                         mock: MockIntegratorClient) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec(PLAIN_TENANT, "ABC"))
        await add_series(tx, build_series_spec(UBL_TENANT, "ABC"))
        await add_series(tx, build_series_spec(UBL_TENANT, "EAR"))
    done = run_gapless(["tenant", "set", UBL_TENANT, "--tax-id", "1234567808",
                        "--name", "Ubl Bilişim A.Ş.", "--tax-office", "Kadıköy",
                        "--street", "Rıhtım Cad. No:1", "--district", "Kadıköy",
                        "--city", "İstanbul", "--postal-zone", "34716"], env)
    assert done.returncode == 0, done.stderr
    mock.set_recipients({tax_id: [f"urn:mail:{tax_id}@example.com"]
                         for tax_id in EFATURA_USERS})


async def invoices(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text(
            "SELECT invoice_id, tenant, status, number, reserved_no, priority, last_error "
            "FROM invoices"))
        return {row.invoice_id: row for row in result}


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
@pytest.mark.parametrize("producer", ["pika", "node"])
async def test_the_producer_example_publishes_and_the_worker_issues_every_invoice(
        producer: str, queue_type: str, engine: AsyncEngine, settings: Settings,
        integrated_env: dict[str, str], procs: Processes,
        mock_integrator: MockIntegratorClient, tmp_path: Path) -> None:
    command = await asyncio.to_thread(producer_command, producer, tmp_path)
    env = {**integrated_env, "GAPLESS_QUEUE_TYPE": queue_type}
    procs.env = env
    await define_tenants(engine, env, mock_integrator)
    worker = procs.worker("worker", "--concurrency", "4")  # declares the queues
    run = f"{producer}-{queue_type}"
    messages = plain_sales(run) + kinds(run)
    jsonl = tmp_path / "messages.jsonl"
    jsonl.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages),
                     encoding="utf-8")

    published = await asyncio.to_thread(
        subprocess.run, [*command, "--file", str(jsonl)], env=env, capture_output=True,
        text=True, timeout=120, check=False)
    assert published.returncode == 0, published.stderr
    confirmed = [line for line in published.stdout.splitlines() if line.startswith("confirmed")]
    assert len(confirmed) == len(messages)
    user_queue = f"{settings.queue}.user" if queue_type == "quorum" else settings.queue
    for message, line in zip(messages, confirmed, strict=True):
        user = message.get("priority") == "user"
        assert line == (f"confirmed {message['invoice_id']} -> "
                        f"{user_queue if user else settings.queue} (priority {4 if user else 1})")

    ids = {m["invoice_id"] for m in messages}

    async def all_settled() -> bool:
        current = await invoices(engine)
        return ids <= set(current) and all(current[i].status in ("ISSUED", "REJECTED", "ERROR")
                                           for i in ids)

    await await_until(all_settled, 90, interval=0.2, message="every invoice settled")
    current = await invoices(engine)
    refused = {i: current[i].last_error for i in ids if current[i].status != "ISSUED"}
    assert refused == {}
    for message in messages:
        row = current[message["invoice_id"]]
        assert row.number is not None
        assert row.priority == (4 if message.get("priority") == "user" else 1)
    for tenant in (PLAIN_TENANT, UBL_TENANT):
        numbers = sorted(row.reserved_no for row in current.values() if row.tenant == tenant
                         and row.number.startswith("ABC"))
        assert numbers == list(range(1, len(numbers) + 1))  # gap-free per series
    ledger_numbers = {(e["tenant"], e["number"]): e["invoice_id"] for e in mock_integrator.ledger()}
    assert ledger_numbers == {(row.tenant, row.number): invoice_id
                              for invoice_id, row in current.items()}
    assert worker.terminate(timeout=30) == 0


@pytest.mark.parametrize("producer", ["pika", "node"])
def test_a_message_to_a_queue_nobody_declared_is_reported_unroutable(
        producer: str, queue_prefix: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    command = producer_command(producer, tmp_path)
    sale = {**json.loads((ROOT / "examples" / "messages" / "minimal.json").read_text("utf-8")),
            "invoice_id": "nowhere-1"}
    published = subprocess.run([*command, json.dumps(sale)], env=gapless_env,
                               capture_output=True, text=True, timeout=60, check=False)
    assert published.returncode == 1
    assert f"refused nowhere-1: unroutable: no queue '{queue_prefix}'" in published.stderr


@pytest.mark.parametrize("producer", ["pika", "node"])
def test_a_line_that_is_not_a_message_is_refused_before_publishing(
        producer: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    command = producer_command(producer, tmp_path)
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"invoice_id": "fine-1"}\n[1, 2]\n', encoding="utf-8")
    published = subprocess.run([*command, "--file", str(jsonl)], env=gapless_env,
                               capture_output=True, text=True, timeout=60, check=False)
    assert published.returncode == 2
    assert "line 2: must be a JSON object with a string invoice_id" in published.stderr
    assert published.stdout == ""
