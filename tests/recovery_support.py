"""Helpers shared by the recovery, audit and operator-command tests: valid messages, orphans made
with the real domain operations, and looks at the database and the mock integrator."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.invoices import ClaimKind, Draft, Sending, claim_for_sending, upsert_draft
from gapless.ledger.series import add_series
from gapless.message import validate_message
from gapless.numbers import build_series_spec
from tests.helpers import GaplessProcess, ledger, run_gapless, today, wait_until
from tests.mock_client import MockIntegratorClient

GOOD_TAX_ID = "1234567890"
REJECTED_TAX_ID = "0000000000"


def message(invoice_id: str, *, tenant: str = "acme", series: str = "ABC",
            tax_id: str = GOOD_TAX_ID) -> dict[str, Any]:
    """A valid contract message (as the payload the worker stores)."""
    return validate_message({
        "invoice_id": invoice_id, "tenant": tenant, "series": series, "priority": "user",
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": tax_id, "name": "Example Ltd"},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}],
    }).payload()


async def define_series(engine: AsyncEngine, tenant: str = "acme", code: str = "ABC") -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec(tenant, code))


async def make_sending(engine: AsyncEngine, invoice_ids: Sequence[str], *,
                       tenant: str = "acme", series: str = "ABC",
                       tax_id: str = GOOD_TAX_ID) -> list[Sending]:
    """Invoices as a worker leaves them after step 2: number pinned, SENDING, lease taken."""
    out = []
    for invoice_id in invoice_ids:
        await upsert_draft(ledger(engine), Draft(invoice_id, tenant, series, 4,
                                         message(invoice_id, tenant=tenant, series=series,
                                                 tax_id=tax_id)))
        claim = await claim_for_sending(ledger(engine), invoice_id, tenant=tenant, lease_s=300,
                                        lock_timeout_ms=5000)
        assert claim.kind is ClaimKind.SEND
        assert claim.sending is not None
        out.append(claim.sending)
    return out


async def make_orphans(engine: AsyncEngine, invoice_ids: Sequence[str]) -> list[Sending]:
    """:func:`make_sending`, then every SENDING lease aged an hour: orphans for recovery."""
    orphans = await make_sending(engine, invoice_ids)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET sending_since = now() - interval '1 hour'"))
    return orphans


def post(mock: MockIntegratorClient, sending: Sending, *,
         invoice_id: str | None = None) -> str:
    """Send a document to the mock directly (as a worker whose answer was then lost)."""
    response = mock.post({"tenant": sending.tenant, "number": sending.number,
                          "invoice_id": invoice_id or sending.invoice_id,
                          "uuid": sending.uuid if invoice_id is None else None,
                          "document": sending.payload})
    assert response.status_code == 201, response.text
    return str(response.json()["ref"])


async def invoice_rows(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT id, invoice_id, tenant, series, status, reserved_no, number, attempts, "
            "last_error, integrator_ref, sending_since, next_attempt_at FROM invoices"))).all()
    return {row.invoice_id: row for row in rows}


async def last_no(engine: AsyncEngine, tenant: str = "acme", series: str = "ABC") -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(text(
            "SELECT coalesce(sum(last_no), 0) FROM number_counters "
            "WHERE tenant = :t AND series = :s"), {"t": tenant, "s": series})).scalar_one()
    return int(value)


async def events(engine: AsyncEngine, invoice_id: str) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(
            "SELECT kind, from_status, to_status, attempts, actor, detail FROM invoice_events "
            "WHERE invoice_id = :i ORDER BY id"), {"i": invoice_id})).all())


def recovery_once(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``gapless recovery --once --stuck-after 0`` (every SENDING row is an orphan)."""
    result = run_gapless(["recovery", "--once", "--stuck-after", "0", *args], env)
    assert result.returncode == 0, result.stderr
    return result


def audit(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    result = run_gapless(["audit", "--json", *args], env)
    assert result.returncode in (0, 1), result.stderr
    try:
        return result.returncode, json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"not JSON: {result.stdout!r} {result.stderr!r}") from None


def kinds(report: dict[str, Any]) -> set[str]:
    return {v["kind"] for v in report["violations"]}


class Processes:
    """``gapless`` subprocesses of one test (workers, recovery); whatever is left is killed."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started: list[GaplessProcess] = []

    def start(self, name: str, args: Sequence[str], *, env: dict[str, str] | None = None,
              ready: str | None = None) -> GaplessProcess:
        proc = GaplessProcess(list(args), {**self.env, **(env or {})}, self.log_dir, name)
        self.started.append(proc)
        if ready is not None:
            wait_until(lambda: ready in proc.output() or not proc.alive(), 60,
                       message=f"{name} to log {ready}")
            assert proc.alive(), proc.output()[-3000:]
        return proc

    def worker(self, name: str, *args: str, env: dict[str, str] | None = None) -> GaplessProcess:
        return self.start(name, ["worker", *args], env=env, ready="worker_started")

    def doomed_worker(self, name: str, *args: str, env: dict[str, str]) -> GaplessProcess:
        """A worker set to kill itself at a fault point; returns once it has."""
        proc = self.start(name, ["worker", *args], env=env)
        # It may die before it logs worker_started (it consumes first, then says so).
        wait_until(lambda: not proc.alive(), 60, message=f"{name} to kill itself")
        assert log_events(proc, "fault_kill"), proc.output()[-3000:]
        return proc

    def recovery(self, name: str, *args: str,
                 env: dict[str, str] | None = None) -> GaplessProcess:
        return self.start(name, ["recovery", *args], env=env, ready="recovery_round_started")

    def close(self) -> None:
        for proc in self.started:
            proc.close()


def log_events(proc: GaplessProcess, name: str) -> list[dict[str, Any]]:
    """The JSON log records of ``proc`` whose event is ``name``."""
    found = []
    for line in proc.output().splitlines():
        if name in line and line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == name:
                found.append(record)
    return found


def publish_demo(env: dict[str, str], count: int) -> None:
    result = run_gapless(["publish", "--demo", str(count), "--no-progress"], env)
    assert result.returncode == 0, result.stderr


async def count_status(engine: AsyncEngine, *statuses: str) -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(text(
            "SELECT count(*) FROM invoices WHERE status = ANY(:s)"),
            {"s": list(statuses)})).scalar_one()
    return int(value)
