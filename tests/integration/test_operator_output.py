"""Operator commands show data from the ledger and the dead queue as text (STYLE 19): an
invoice_id that looks like rich markup, a customer name or a reason holding terminal escapes, a
hyperlink in markup or a right-to-left override — and dead bodies that are nested 10,000 deep or
not UTF-8 — never crash ``gapless audit``, ``invoice show`` or ``dead list | replay``, and never
reach the terminal as anything but visible text."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher
from gapless.ledger.invoices import Draft, claim_for_sending, mark_rejected, upsert_draft
from gapless.settings import Settings
from tests.helpers import ledger, run_gapless, today
from tests.recovery_support import define_series, message

INVOICE_ID = "x[/]y[bold]"
HOSTILE = "\x1b[31mred\x1b[0m [link=http://e.x]click[/link] \u202eevil\u202c"
#: What must never reach an operator's terminal raw: ESC and every other C0 control but the
#: line break, DEL and the C1 controls, bidirectional controls, line and paragraph separators.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                    "\u202a-\u202e\u2066-\u2069]")


def shown(result: subprocess.CompletedProcess[str], *codes: int) -> str:
    """stdout and stderr of a command that ended as the CLI ends (no traceback), checked to be
    text only."""
    assert result.returncode in (codes or (0,)), (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    both = result.stdout + result.stderr
    assert UNSAFE.findall(both) == [], both
    return both


@pytest.fixture
async def hostile_invoice(engine: AsyncEngine, gapless_env: dict[str, str]) -> dict[str, str]:
    """A REJECTED invoice whose id looks like markup, whose customer name and note hold an
    escape sequence, a hyperlink in markup and a right-to-left override, and whose reason
    (what the integrator said) holds them too; the environment to look at it with."""
    await define_series(engine)
    payload = message(INVOICE_ID)
    payload["customer"]["name"] = f"Acme {HOSTILE}"
    payload["note"] = HOSTILE
    await upsert_draft(ledger(engine), Draft(INVOICE_ID, "acme", "ABC", 4, payload))
    claim = await claim_for_sending(ledger(engine), INVOICE_ID, tenant="acme", lease_s=300,
                                    lock_timeout_ms=5000)
    assert claim.sending is not None
    await mark_rejected(ledger(engine), claim.sending, "customer refused")
    # gapless stores a reason as one printable line; the database may still hold anything
    # (older rows, SQL clients of other kinds), and the CLI must show that as text too.
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET last_error = :reason WHERE invoice_id = :id"),
                           {"reason": f"customer refused: {HOSTILE}", "id": INVOICE_ID})
    return {**gapless_env, "COLUMNS": "250"}


async def test_audit_prints_ledger_values_as_text(hostile_invoice: dict[str, str]) -> None:
    audit = shown(run_gapless(["audit", "--no-chain", "--limit", "5"], hostile_invoice))
    assert INVOICE_ID in audit
    assert r"\x1b[31mred\x1b[0m [link=http://e.x]click[/link] \u202eevil\u202c" in audit

    audit_json = run_gapless(["audit", "--no-chain", "--json"], hostile_invoice)
    shown(audit_json)
    assert any(n["invoice_id"] == INVOICE_ID
               for n in json.loads(audit_json.stdout)["not_issued"])


async def test_invoice_show_prints_ledger_values_as_text(
        hostile_invoice: dict[str, str]) -> None:
    text = shown(run_gapless(["invoice", "show", INVOICE_ID, "--with-payload"],
                             hostile_invoice))
    assert f"invoice {INVOICE_ID}" in text
    assert r"customer refused: \x1b[31mred" in text
    assert "[link=http://e.x]click[/link]" in text
    assert r"Acme \u001b[31mred\u001b[0m" in text  # the payload, as JSON escapes

    as_json = run_gapless(["invoice", "show", INVOICE_ID, "--json", "--with-payload"],
                          hostile_invoice)
    shown(as_json)
    data = json.loads(as_json.stdout)
    assert data["invoice_id"] == INVOICE_ID
    assert data["last_error"] == f"customer refused: {HOSTILE}"
    assert data["payload"]["note"] == HOSTILE

    void = shown(run_gapless(["invoice", "void", INVOICE_ID, "--reason", HOSTILE],
                             hostile_invoice))
    assert f"invoice {INVOICE_ID!r}: VOIDED" in void
    missing = shown(run_gapless(["invoice", "show", f"{INVOICE_ID}\u202e"], hostile_invoice), 1)
    assert r"x[/]y[bold]\u202e" in missing


#: An invoice_id a dead body may hold (nothing checked it): a terminal hyperlink, no space.
ESCAPING_ID = "esc\x1b]8;;http://e.x\x07click\x1b]8;;\x07\u202e"


def nested(depth: int) -> bytes:
    return b'{"invoice_id": "deep", "x": ' + b"[" * depth + b"]" * depth + b"}"


async def test_dead_list_and_replay_describe_bodies_they_cannot_read(
        settings: Settings, gapless_env: dict[str, str]) -> None:
    readable = json.dumps({"invoice_id": INVOICE_ID, "tenant": "acme", "series": "ABC",
                           "issue_date": today(), "customer": {"name": HOSTILE}}).encode()
    async with Publisher(settings) as publisher:
        await publisher.dead_letter(readable, reason=f"lines: field required {HOSTILE}",
                                    content_type="application/json")
        await publisher.dead_letter(nested(10_000), reason="body nests too deeply",
                                    content_type="application/json")
        await publisher.dead_letter(b'{"invoice_id": "\xff\xfe"}', reason="not UTF-8",
                                    content_type="application/json")
        await publisher.dead_letter(json.dumps({"invoice_id": ESCAPING_ID}).encode(),
                                    reason="lines: field required",
                                    content_type="application/json",
                                    message_id=f"id{HOSTILE}")
    # Log lines as an operator sees them on a terminal.
    env = {**gapless_env, "COLUMNS": "250", "GAPLESS_LOG_FORMAT": "console"}

    table = shown(run_gapless(["dead", "list"], env))
    assert INVOICE_ID in table
    # The worker's copy already wrote the reason's controls as spaces (gapless.amqp.headers);
    # what is left is shown as text, the override escaped.
    assert r"[31mred [0m [link=http://e.x]click[/link] \u202eevil" in table
    assert table.count("(unreadable body)") == 2
    assert "nests more than 16 levels deep" in table
    assert "body is not valid UTF-8" in table

    listed = run_gapless(["dead", "list", "--json"], env)
    shown(listed)
    letters = json.loads(listed.stdout)["messages"]
    assert [(m["invoice_id"], m["body_problem"]) for m in letters] == [
        (INVOICE_ID, None), (None, "body nests more than 16 levels deep"),
        (None, "body is not valid UTF-8"), (ESCAPING_ID, None)]

    one = shown(run_gapless(["dead", "replay", "--invoice-id", INVOICE_ID], env))
    assert f"replayed {INVOICE_ID}" in one
    rest = shown(run_gapless(["dead", "replay", "--all"], env))
    assert "replayed a message without an invoice_id (body nests more than 16 levels deep)" in rest
    assert "replayed a message without an invoice_id (body is not valid UTF-8)" in rest
    assert r"replayed esc\x1b]8;;http://e.x\x07click\x1b]8;;\x07\u202e" in rest
    depths = await queue_depths(settings)
    assert (depths[settings.queue], depths[f"{settings.queue}.dead"]) == (4, 0)
