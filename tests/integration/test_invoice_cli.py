"""``gapless invoice show|retry|void|cancel`` against real PostgreSQL and the mock integrator:
each does its job, and refuses the wrong state (exit 1) or bad usage (exit 2) in one line."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from gapless.integrator.base import Receipt
from gapless.ledger.invoices import Draft, mark_error, mark_issued, mark_rejected, upsert_draft
from tests.helpers import ledger, run_gapless
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import (
    GOOD_TAX_ID,
    REJECTED_TAX_ID,
    define_series,
    events,
    invoice_rows,
    last_no,
    make_sending,
    message,
    post,
)


def one_line_error(result: object, code: int, *fragments: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


async def test_show_prints_state_number_and_history(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    [sending] = await make_sending(engine, ["inv-1"])
    ref = post(mock_integrator, sending)
    await mark_issued(ledger(engine), sending.pk, Receipt("acme", sending.number, "inv-1", ref))

    shown = run_gapless(["invoice", "show", "inv-1"], {**integrated_env, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    for fragment in ("ISSUED", sending.number, ref, "received", "reserved", "issued",
                     "SATIS/TEMELFATURA"):  # a message without type or profile: the defaults
        assert fragment in shown.stdout
    assert "returns" not in shown.stdout
    assert GOOD_TAX_ID not in shown.stdout  # the payload only on request
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80

    as_json = run_gapless(["invoice", "show", "inv-1", "--json"], integrated_env)
    data = json.loads(as_json.stdout)
    assert (data["status"], data["number"], data["integrator_ref"], data["attempts"]) == (
        "ISSUED", sending.number, ref, 1)
    assert [e["kind"] for e in data["events"]] == ["received", "reserved", "sending", "issued"]
    assert (data["type"], data["profile"], data["billing_reference"]) == (
        "SATIS", "TEMELFATURA", [])
    assert (data["discounts"], data["withheld"]) == (None, None)  # a JSON document: no summary
    assert "payload" not in data
    with_payload = json.loads(run_gapless(["invoice", "show", "inv-1", "--json",
                                           "--with-payload"], integrated_env).stdout)
    assert with_payload["payload"]["customer"]["tax_id"] == GOOD_TAX_ID

    one_line_error(run_gapless(["invoice", "show", "nope"], integrated_env), 1,
                   "no invoice with invoice_id 'nope'")


async def test_retry_with_a_corrected_payload_issues_the_rejected_invoice_under_its_number(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], tmp_path: Path) -> None:
    await define_series(engine)
    [sending] = await make_sending(engine, ["inv-bad"], tax_id=REJECTED_TAX_ID)
    rejected = mock_integrator.post({"tenant": "acme", "number": sending.number,
                                     "invoice_id": "inv-bad", "document": sending.payload})
    assert rejected.status_code == 422
    await mark_rejected(ledger(engine), sending, rejected.json()["reason"])

    # Retrying as-is is rejected again, and says so.
    again = run_gapless(["invoice", "retry", "inv-bad"], integrated_env)
    assert again.returncode == 1
    assert "REJECTED again: invalid tax id" in again.stdout

    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(message("inv-bad", tax_id=GOOD_TAX_ID)))
    result = run_gapless(["invoice", "retry", "inv-bad", "--payload", str(fixed)],
                         integrated_env)

    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "ISSUED" in result.stdout
    row = (await invoice_rows(engine))["inv-bad"]
    assert (row.status, row.number, row.reserved_no) == (Status.ISSUED, sending.number, 1)
    assert await last_no(engine) == 1  # no new number
    [entry] = mock_integrator.ledger()
    assert (entry["number"], entry["invoice_id"], entry["ref"]) == (
        sending.number, "inv-bad", row.integrator_ref)
    kinds = [(e.kind, e.actor) for e in await events(engine, "inv-bad")]
    assert kinds[-4:] == [("retried", "operator"), ("rejected", "operator"),
                          ("retried", "operator"), ("issued", "operator")]


async def test_retry_of_an_error_asks_the_integrator_first(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    [sending] = await make_sending(engine, ["inv-lost"])
    ref = post(mock_integrator, sending)  # it arrived; the worker saw only a 500
    await mark_error(ledger(engine), sending, "TransientIntegratorError: HTTP 500", None)

    result = run_gapless(["invoice", "retry", "inv-lost"], integrated_env)

    assert result.returncode == 0, result.stderr
    assert "already had it" in result.stdout
    row = (await invoice_rows(engine))["inv-lost"]
    assert (row.status, row.integrator_ref) == (Status.ISSUED, ref)
    assert mock_integrator.stats()["posts"] == 1  # not sent again


async def test_retry_refuses_bad_payloads_and_wrong_states(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], tmp_path: Path) -> None:
    await define_series(engine)
    [sending] = await make_sending(engine, ["inv-r"], tax_id=REJECTED_TAX_ID)
    await mark_rejected(ledger(engine), sending, "invalid tax id")
    other_tenant = tmp_path / "other.json"
    other_tenant.write_text(json.dumps(message("inv-r", tenant="beta")))
    no_lines = tmp_path / "no-lines.json"
    no_lines.write_text(json.dumps({**message("inv-r"), "lines": []}))
    not_json = tmp_path / "broken.json"
    not_json.write_text("{not json")

    one_line_error(run_gapless(["invoice", "retry", "inv-r", "--payload", str(other_tenant)],
                               integrated_env), 2, "must keep tenant 'acme'")
    one_line_error(run_gapless(["invoice", "retry", "inv-r", "--payload", str(no_lines)],
                               integrated_env), 2, "not a valid invoice message", "lines")
    one_line_error(run_gapless(["invoice", "retry", "inv-r", "--payload", str(not_json)],
                               integrated_env), 2, "not valid JSON")
    one_line_error(run_gapless(["invoice", "retry", "inv-r", "--payload",
                                str(tmp_path / "missing.json")], integrated_env), 2,
                   "cannot read")
    assert (await invoice_rows(engine))["inv-r"].status == Status.REJECTED  # untouched
    assert mock_integrator.stats()["posts"] == 0

    [issued] = await make_sending(engine, ["inv-ok"])
    await mark_issued(ledger(engine), issued.pk, Receipt("acme", issued.number, "inv-ok", "r"))
    one_line_error(run_gapless(["invoice", "retry", "inv-ok"], integrated_env), 1,
                   "cannot retry invoice 'inv-ok': it is ISSUED")
    one_line_error(run_gapless(["invoice", "retry", "ghost"], integrated_env), 1,
                   "no invoice with invoice_id 'ghost'")


async def test_void_keeps_the_number_accounted_for(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    rejected, issued = await make_sending(engine, ["inv-v", "inv-i"])
    await mark_rejected(ledger(engine), rejected, "customer not registered")
    await mark_issued(ledger(engine), issued.pk, Receipt("acme", issued.number, "inv-i", "r"))

    result = run_gapless(["invoice", "void", "inv-v", "--reason", "issued on paper"],
                         integrated_env)

    assert result.returncode == 0, result.stderr
    assert rejected.number in result.stdout
    row = (await invoice_rows(engine))["inv-v"]
    assert (row.status, row.number, row.last_error) == (Status.VOIDED, rejected.number,
                                                        "issued on paper")
    assert (await events(engine, "inv-v"))[-1].kind == "voided"
    audited = run_gapless(["audit", "--json"], integrated_env)
    assert audited.returncode == 0  # a voided number is accounted for, not a gap
    [not_issued] = json.loads(audited.stdout)["not_issued"]
    assert (not_issued["status"], not_issued["reason"]) == ("VOIDED", "issued on paper")

    one_line_error(run_gapless(["invoice", "void", "inv-i", "--reason", "x"], integrated_env),
                   1, "cannot void invoice 'inv-i': it is ISSUED")
    one_line_error(run_gapless(["invoice", "void", "inv-v"], integrated_env), 2, "--reason")
    one_line_error(run_gapless(["invoice", "void", "inv-v", "--reason", "  "], integrated_env),
                   2, "--reason must not be empty")


async def test_cancel_only_before_a_number_is_reserved(
        engine: AsyncEngine, integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await upsert_draft(ledger(engine), Draft("inv-c", "acme", "ABC", 1, message("inv-c")))
    await make_sending(engine, ["inv-numbered"])

    result = run_gapless(["invoice", "cancel", "inv-c", "--reason", "customer withdrew"],
                         integrated_env)

    assert result.returncode == 0, result.stderr
    rows = await invoice_rows(engine)
    assert (rows["inv-c"].status, rows["inv-c"].number) == (Status.CANCELLED, None)
    assert await last_no(engine) == 1  # only inv-numbered consumed a number
    one_line_error(run_gapless(["invoice", "cancel", "inv-numbered"], integrated_env), 1,
                   "cannot cancel invoice 'inv-numbered': it is SENDING and holds number")
    one_line_error(run_gapless(["invoice", "cancel", "inv-c"], integrated_env), 1,
                   "it is CANCELLED")
    assert run_gapless(["invoice", "nonsense"], integrated_env).returncode == 2


async def test_an_invoice_id_two_tenants_hold_needs_the_tenant(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    """invoice_id is unique per tenant: a command naming an id two tenants hold is a usage
    error naming them (exit 2, one line) until --tenant says which; an id one tenant holds
    needs no --tenant."""
    await define_series(engine)
    await define_series(engine, "globex", "GLX")
    [acme] = await make_sending(engine, ["shared"])
    [globex] = await make_sending(engine, ["shared"], tenant="globex", series="GLX")
    await mark_issued(ledger(engine), acme.pk, Receipt("acme", acme.number, "shared", "r-a"))
    await mark_rejected(ledger(engine), globex, "customer not registered")

    for command in (["show", "shared"], ["show", "shared", "--document"],
                    ["void", "shared", "--reason", "issued on paper"],
                    ["cancel", "shared"], ["retry", "shared"]):
        one_line_error(run_gapless(["invoice", *command], integrated_env), 2,
                       "invoice_id 'shared' is held by tenants acme, globex",
                       "name one with --tenant")

    for tenant, number, status in (("acme", acme.number, "ISSUED"),
                                   ("globex", globex.number, "REJECTED")):
        shown = run_gapless(["invoice", "show", "shared", "--tenant", tenant, "--json"],
                            integrated_env)
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert (data["tenant"], data["number"], data["status"]) == (tenant, number, status)

    voided = run_gapless(["invoice", "void", "shared", "--tenant", "globex", "--reason",
                          "issued on paper"], integrated_env)
    assert voided.returncode == 0, voided.stderr
    assert globex.number in voided.stdout
    async with engine.connect() as conn:
        rows = {row.tenant: row for row in (await conn.execute(text(
            "SELECT tenant, status, number FROM invoices WHERE invoice_id = 'shared'"))).all()}
    assert {tenant: (row.status, row.number) for tenant, row in rows.items()} == {
        "acme": ("ISSUED", acme.number), "globex": ("VOIDED", globex.number)}

    one_line_error(run_gapless(["invoice", "show", "shared", "--tenant", "initech"],
                               integrated_env), 1, "no invoice with invoice_id 'shared'")
    [alone] = await make_sending(engine, ["alone"], tenant="globex", series="GLX")
    shown = run_gapless(["invoice", "show", "alone", "--json"], integrated_env)
    assert shown.returncode == 0, shown.stderr
    assert (json.loads(shown.stdout)["tenant"], json.loads(shown.stdout)["number"]) == (
        "globex", alone.number)
