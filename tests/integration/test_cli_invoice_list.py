"""``gapless invoice list`` against real PostgreSQL: the documents matching, newest first, as a
table or one JSON array with stable keys; filters by tenant, status and date; a limit with a
line telling that more match; a bad status or date is one line, exit 2. The listing's query is
served by an index (no sort of the table)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.base import Receipt
from gapless.ledger.invoices import Draft, mark_error, mark_issued, mark_rejected, upsert_draft
from gapless.ledger.queries import invoices as q
from tests.helpers import ledger, run_gapless, today
from tests.recovery_support import define_series, make_sending, message

KEYS = ["id", "invoice_id", "tenant", "series", "number", "status", "issue_date", "attempts",
        "last_error", "created_at", "updated_at", "document", "answer"]


async def populate(engine: AsyncEngine) -> dict[str, Any]:
    """Six documents of two tenants in every kind of state, received one day apart: a-1 six
    days ago ... g-2 today. Returns the sendings by invoice_id."""
    await define_series(engine)
    await define_series(engine, "globex", "GLX")
    sendings = {s.invoice_id: s for s in await make_sending(engine, ["a-1", "a-2", "a-3"])}
    sendings.update({s.invoice_id: s for s in await make_sending(
        engine, ["g-1"], tenant="globex", series="GLX")})
    for invoice_id in ("a-4",):
        await upsert_draft(ledger(engine), Draft(invoice_id, "acme", "ABC", 1,
                                                 message(invoice_id)))
    await upsert_draft(ledger(engine), Draft("g-2", "globex", "GLX", 1,
                                             message("g-2", tenant="globex", series="GLX")))
    db = ledger(engine)
    await mark_issued(db, sendings["a-1"].pk, Receipt("acme", sendings["a-1"].number, "a-1",
                                                      "ref-1"))
    await mark_error(db, sendings["a-2"], "integrator timed out", None)
    await mark_rejected(db, sendings["a-3"], "invalid tax id")
    ages = {"a-1": 6, "a-2": 5, "a-3": 4, "g-1": 3, "a-4": 2, "g-2": 0}
    async with engine.begin() as conn:
        # A reason as a SQL client may have written it: a terminal control in it.
        await conn.execute(text("UPDATE invoices SET last_error = last_error || E' \\x1b[31mred'"
                                " WHERE invoice_id = 'a-2'"))
        for invoice_id, days in ages.items():
            await conn.execute(text(
                "UPDATE invoices SET created_at = now() - make_interval(days => :days) "
                "WHERE invoice_id = :id"), {"days": days, "id": invoice_id})
    return sendings


def listed(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    result = run_gapless(["invoice", "list", "--json", *args], env)
    assert result.returncode == 0, result.stderr
    items: list[dict[str, Any]] = json.loads(result.stdout)
    return items


def usage_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("gapless: error (gapless invoice list): "), line
    for fragment in fragments:
        assert fragment in line, line


async def test_every_document_newest_first_as_a_table_and_as_json(
        engine: AsyncEngine, gapless_env: dict[str, str]) -> None:
    sendings = await populate(engine)

    shown = run_gapless(["invoice", "list"], {**gapless_env, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    order = [next(i for i, line in enumerate(lines) if f" {invoice_id} " in line)
             for invoice_id in ("g-2", "a-4", "g-1", "a-3", "a-2", "a-1")]
    assert order == sorted(order)  # newest first
    for header in ("invoice_id", "tenant", "series", "number", "status", "issue date",
                   "updated", "reason"):
        assert header in shown.stdout
    row = {invoice_id: next(line for line in lines if f" {invoice_id} " in line)
           for invoice_id in sendings}
    assert "ERROR" in row["a-2"]
    assert "integrator timed out \\x1b[31mred" in row["a-2"]
    assert "REJECTED" in row["a-3"]
    assert "invalid tax id" in row["a-3"]
    assert sendings["a-1"].number in row["a-1"]
    assert "ISSUED" in row["a-1"]
    assert today() in row["a-1"]
    assert "\x1b" not in shown.stdout  # a value's terminal control is shown, never obeyed
    assert "more documents match" not in shown.stdout

    items = listed(gapless_env)
    assert [item["invoice_id"] for item in items] == ["g-2", "a-4", "g-1", "a-3", "a-2", "a-1"]
    assert all(list(item) == KEYS for item in items)  # the same keys, in the same order
    by_id = {item["invoice_id"]: item for item in items}
    assert (by_id["a-3"]["status"], by_id["a-3"]["last_error"], by_id["a-3"]["number"]) == (
        "REJECTED", "invalid tax id", sendings["a-3"].number)
    assert (by_id["a-4"]["status"], by_id["a-4"]["number"]) == ("RECEIVED", None)
    assert by_id["g-1"]["tenant"] == "globex"
    assert by_id["g-1"]["series"] == "GLX"
    assert by_id["a-1"]["issue_date"] == today()
    created = [datetime.fromisoformat(item["created_at"]) for item in items]
    assert created == sorted(created, reverse=True)


async def test_filters_by_tenant_status_and_date(engine: AsyncEngine,
                                                 gapless_env: dict[str, str]) -> None:
    await populate(engine)

    def ids(*args: str) -> list[str]:
        return [item["invoice_id"] for item in listed(gapless_env, *args)]

    assert ids("--tenant", "globex") == ["g-2", "g-1"]
    assert ids("--status", "error", "--status", "REJECTED") == ["a-3", "a-2"]
    assert ids("--tenant", "acme", "--status", "RECEIVED") == ["a-4"]
    since = (datetime.now().astimezone() - timedelta(days=3, hours=12)).date().isoformat()
    assert set(ids("--since", since)) >= {"g-2", "a-4", "g-1"}
    assert "a-3" not in ids("--since", (datetime.now().astimezone() - timedelta(days=3))
                            .isoformat(timespec="seconds"))
    assert ids("--since", "2999-01-01") == []
    assert ids("--tenant", "nobody") == []
    empty = run_gapless(["invoice", "list", "--tenant", "nobody"], gapless_env)
    assert (empty.returncode, empty.stdout.strip()) == (0, "no documents match")


async def test_a_limit_shows_the_newest_and_says_more_match(
        engine: AsyncEngine, gapless_env: dict[str, str]) -> None:
    await populate(engine)
    as_json = run_gapless(["invoice", "list", "--json", "--limit", "2"], gapless_env)
    assert as_json.returncode == 0, as_json.stderr
    assert [item["invoice_id"] for item in json.loads(as_json.stdout)] == ["g-2", "a-4"]
    assert as_json.stderr.strip() == (
        "showing the newest 2; more documents match (narrow with --tenant, --status or "
        "--since, or raise --limit)")
    table = run_gapless(["invoice", "list", "--limit", "2"], {**gapless_env, "COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert table.stdout.strip().splitlines()[-1].startswith("showing the newest 2; more")
    exact = run_gapless(["invoice", "list", "--json", "--limit", "6"], gapless_env)
    assert (len(json.loads(exact.stdout)), exact.stderr) == (6, "")


@pytest.mark.parametrize(("args", "fragments"), [
    (["--status", "ERRORR"], ("--status: unknown status 'ERRORR'", "REJECTED")),
    (["--since", "2026-13-01"], ("--since: '2026-13-01' is not a date",)),
    (["--since", "yesterday"], ("--since: 'yesterday' is not a date",)),
    (["--limit", "0"], ("--limit",)),
])
def test_bad_filters_are_one_line_and_exit_2(gapless_env: dict[str, str], args: list[str],
                                             fragments: tuple[str, ...]) -> None:
    usage_error(run_gapless(["invoice", "list", *args], gapless_env), *fragments)


async def test_the_listing_reads_the_newest_rows_by_index_without_sorting_the_table(
        engine: AsyncEngine) -> None:
    await define_series(engine)
    async with engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO invoices (invoice_id, tenant, series, payload, created_at) "
            "SELECT 'bulk-' || n, 'acme', 'ABC', '{}'::jsonb, "
            "       now() - make_interval(secs => n) FROM generate_series(1, 20000) AS n"))
        await conn.execute(text("ANALYZE invoices"))

    async def plan(**params: Any) -> str:
        values = {"tenant": None, "statuses": None, "since": None, "limit": 101,
                  "answer": None, **params}
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
            await cursor.execute("EXPLAIN " + q.LIST_INVOICES, values)
            return "\n".join(row[0] for row in await cursor.fetchall())

    for params in ({}, {"since": datetime.now().astimezone() - timedelta(hours=1)},
                   {"tenant": "acme"}):
        shown = await plan(**params)
        assert "invoices_created_idx" in shown, shown
        assert "Sort" not in shown, shown
