"""Dispatch notes end to end (the worker in-process against real RabbitMQ, PostgreSQL and the
mock integrator over HTTP): each note is numbered gap-free in the tenant's ``edespatch`` series,
rendered as a GİB-valid DespatchAdvice, sent to the receiver's e-İrsaliye alias (one, or the one
named of two) or to GİB's box, with the alias pinned with the number — interleaved with
invoices, whose series and routing it never touches. What contradicts the rules is refused
before any number."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.demo.samples import vkn
from gapless.ledger.series import add_series
from gapless.message import GIB_DESPATCH_BOX
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import await_until, ledger, run_gapless
from tests.integration.test_api_refusals import despatch_note
from tests.mock_client import MockIntegratorClient
from tests.ubl import assert_valid, assert_valid_despatch, field
from tests.worker_support import (
    all_in,
    counter,
    drain_dead,
    publish,
    routed_tenant,
    rows,
    running_worker,
)
from tests.worker_support import (
    routed_message as message,
)


def note(invoice_id: str, tax_id: str, **customer: Any) -> dict[str, Any]:
    """The contract's dispatch note to ``tax_id`` (no series: the tenant's edespatch default)."""
    data = despatch_note(invoice_id)
    data.pop("series", None)
    data["customer"] = {**data["customer"], "tax_id": tax_id, **customer}
    return data


@pytest.fixture
async def tenant(engine: AsyncEngine) -> None:
    """Tenant acme with an issuer profile; defaults EFA (e-Fatura), EAR (e-Arşiv) and IRS
    (dispatch notes)."""
    await routed_tenant(engine, despatch=True)


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=2.0, breaker_reset_timeout_s=0.5)


async def stored(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.series, i.reserved_no, i.number, i.status, i.payload,
                   i.document, d.body, d.format
              FROM invoices i
              LEFT JOIN invoice_documents d ON d.invoice_pk = i.id
                                           AND d.sha256 = i.document_sha256"""))
        return {row.invoice_id: row for row in result}


@pytest.mark.usefixtures("tenant")
async def test_notes_and_invoices_interleaved_each_in_its_series_and_at_its_alias(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], tmp_path: Path) -> None:
    rng = random.Random(30)
    customers = [vkn(rng) for _ in range(9)]
    # three e-İrsaliye users (one with two aliases), three e-Fatura users only, three neither
    despatch_users = {customers[0]: ["urn:mail:irsaliyepk@c0.example"],
                      customers[1]: ["urn:mail:irsaliyepk@c1.example",
                                     "urn:mail:depo@c1.example"],
                      customers[2]: ["urn:mail:irsaliyepk@c2.example"]}
    mock_integrator.set_recipients(
        {tax_id: {"invoice": [f"urn:mail:defaultpk@c{n}.example"],
                  **({"despatch": despatch_users[tax_id]} if tax_id in despatch_users else {})}
         for n, tax_id in enumerate(customers[:6])})
    notes = [note(f"n-{n}", customers[n % len(customers)]) for n in range(36)]
    notes.append(note("n-second", customers[1], alias="urn:mail:depo@c1.example"))
    invoices = [message(f"i-{n}", customers[n % len(customers)]) for n in range(27)]
    sent = [*notes, *invoices]
    rng.shuffle(sent)
    async with running_worker(worker_settings, concurrency=8):
        await publish(worker_settings, *sent)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in sent}, "ISSUED"),
                          120, message="every document ISSUED")
    rows_ = await stored(engine)
    accepted = {entry["number"]: entry for entry in mock_integrator.ledger()}
    for sent_note in notes:
        row = rows_[sent_note["invoice_id"]]
        tax_id = sent_note["customer"]["tax_id"]
        body = bytes(row.body)
        assert_valid_despatch(body)
        assert (row.series, row.document) == ("IRS", "despatch")
        assert row.number.startswith("IRS")
        assert field(body, "cbc:ID") == row.number
        want = sent_note["customer"].get("alias") or (
            despatch_users[tax_id][0] if tax_id in despatch_users else GIB_DESPATCH_BOX)
        assert row.payload["customer"]["alias"] == want  # pinned with the number
        assert (accepted[row.number]["alias"], accepted[row.number]["document"]) == (
            want, "despatch")
    for sent_invoice in invoices:
        row = rows_[sent_invoice["invoice_id"]]
        assert_valid(bytes(row.body))
        assert row.document == "invoice"
        assert row.series in ("EFA", "EAR")
        assert accepted[row.number]["document"] == "invoice"
    for series in ("IRS", "EFA", "EAR"):  # each series gap-free
        numbers = sorted(r.reserved_no for r in rows_.values() if r.series == series)
        assert numbers == list(range(1, len(numbers) + 1)), series
    shown = json.loads(run_gapless(["invoice", "show", "n-second", "--json"],
                                   integrated_env).stdout)
    assert (shown["document"], shown["channel"], shown["alias"]) == (
        "despatch", "edespatch", "urn:mail:depo@c1.example")
    audit = run_gapless(["audit", "--integrator"], integrated_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # the chain holds the notes like the invoices, in the database and in an offline export
    for args in (["chain", "verify"], ["chain", "export", "--out", str(tmp_path / "x")],
                 ["chain", "verify", str(tmp_path / "x")]):
        done = run_gapless(args, integrated_env)
        assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(run_gapless(["invoice", "list", "--tenant", "acme", "--json"],
                                    integrated_env).stdout)
    kinds = {item["invoice_id"]: item["document"] for item in listed}
    assert (kinds["n-second"], kinds["i-0"]) == ("despatch", "invoice")


@pytest.mark.usefixtures("tenant")
async def test_what_breaks_the_rules_is_refused_before_any_number(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    user, other = "4840847211", "5950193314"
    mock_integrator.set_recipients({user: {"despatch": ["urn:mail:irsaliyepk@a.example"]}})
    bad = [
        ({**note("x-efa", other), "series": "EFA"}, "series: EFA numbers invoices"),
        (message("x-irs", other, series="IRS"), "series: IRS numbers dispatch notes"),
        (note("x-alias", user, alias="urn:mail:someone@else.example"), "customer.alias: "),
        (note("x-box", user, alias=GIB_DESPATCH_BOX), "customer.alias: "),
        (note("x-other", other, alias="urn:mail:irsaliyepk@a.example"), "customer.alias: "),
        (note("x-late", other) | {"issue_date": "2020-01-01"}, "issue_date: "),
    ]
    good = [note("x-good", user), note("x-box-ok", other, alias=GIB_DESPATCH_BOX)]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *[m for m, _ in bad], *good)
        dead = await drain_dead(worker_settings, len(bad))
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in good}, "ISSUED"),
                          30, message="the good ones ISSUED")
    reasons = {json.loads(m.body)["invoice_id"]: str((m.headers or {})[HEADER_DEAD_REASON])
               for m in dead}
    for sent, where in bad:
        assert reasons[sent["invoice_id"]].startswith(where), reasons
        assert user not in reasons[sent["invoice_id"]]
    assert set(await rows(engine)) == {"x-good", "x-box-ok"}
    assert await counter(engine) == 2  # only the good ones took numbers


async def test_a_tenant_without_an_issuer_profile_or_edespatch_series_numbers_no_note(
        engine: AsyncEngine, worker_settings: Settings) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "IRS", channel="edespatch"))
        await add_series(tx, build_series_spec("bare", "ABC", default=True))
    async with running_worker(worker_settings):
        await publish(worker_settings, {**despatch_note("p-1"), "series": "IRS"},
                      {**despatch_note("p-2"), "tenant": "bare"})
        dead = await drain_dead(worker_settings, 2)
    reasons = {json.loads(m.body)["invoice_id"]: str((m.headers or {})[HEADER_DEAD_REASON])
               for m in dead}
    assert reasons["p-1"].startswith("document: a dispatch note is a UBL-TR DespatchAdvice, "
                                     "and tenant 'acme' has no issuer profile")
    assert reasons["p-2"].startswith("series: tenant 'bare' has no default series of channel "
                                     "edespatch")
    assert await counter(engine) == 0
