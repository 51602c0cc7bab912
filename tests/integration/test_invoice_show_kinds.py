"""``gapless invoice show`` names the document's kind, against real RabbitMQ, PostgreSQL and the
mock integrator: its type and profile, what a return returns (the returned invoices' numbers and
dates), and the discounts and withheld VAT of its UBL-TR document — in the table and in --json."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.documents import build_issuer
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.ubl import field
from tests.worker_support import all_in, publish, rows, running_worker

ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
          "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
          "postal_zone": "34716"}
#: An older invoice of the supplier's own, returned together with the one issued here.
SUPPLIER_INVOICE = {"number": "SUP2026000000012", "issue_date": "2026-01-20"}


def ubl_message(invoice_id: str, *, tenant: str = "acme", series: str = "ABC",
                **changes: Any) -> dict[str, Any]:
    """A message with everything a UBL-TR document needs (a company customer)."""
    message: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": tenant, "series": series, "priority": "user",
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"street": "Atatürk Blv. 5", "district": "Çankaya",
                                 "city": "Ankara", "postal_zone": "06690",
                                 "country": "Türkiye"}},
        "lines": [{"description": "Cleaning", "quantity": "2", "unit_price": "100.00",
                   "vat_rate": "20"},
                  {"description": "Catering", "quantity": "1", "unit_price": "50.00",
                   "vat_rate": "20"}],
    }
    message.update(changes)
    return message


@pytest.fixture
async def profiled(engine: AsyncEngine) -> None:
    """Tenant acme with an issuer profile (UBL-TR documents); tenant globex without (JSON)."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    await set_profile(ledger(engine), "acme", build_issuer(**ISSUER))


def show(env: dict[str, str], invoice_id: str) -> tuple[str, dict[str, Any]]:
    """``gapless invoice show`` of one invoice: the table (80 columns) and the --json."""
    table = run_gapless(["invoice", "show", invoice_id], {**env, "COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout
    as_json = run_gapless(["invoice", "show", invoice_id, "--json"], env)
    assert as_json.returncode == 0, as_json.stderr
    return table.stdout, json.loads(as_json.stdout)


@pytest.mark.usefixtures("profiled")
async def test_show_names_the_kind_and_what_a_return_returns(
        engine: AsyncEngine, settings: Settings, mock_integrator: MockIntegratorClient,
        gapless_env: dict[str, str]) -> None:
    worker_settings = settings.with_overrides(integrator_url=mock_integrator.url,
                                              retry_wait_s=0.05, retry_max_s=5.0)
    # A service sale with VAT withholding and a discounted line; then its return.
    sale = ubl_message("sale-1", type="TEVKIFAT", lines=[
        {**line, "withholding_code": "612"} for line in ubl_message("x")["lines"]])
    sale["lines"][0]["discount"] = "12.50"
    plain = ubl_message("plain-1", tenant="globex", series="GLX", type="IADE",
                        billing_reference=[SUPPLIER_INVOICE])
    async with running_worker(worker_settings, concurrency=2):
        await publish(worker_settings, sale, plain)
        await await_until(lambda: all_in(engine, {"sale-1", "plain-1"}, "ISSUED"), 30,
                          message="the sale and the JSON return ISSUED")
        sale_number = (await rows(engine))["sale-1"].number
        sale_date = field(mock_integrator.document("acme", sale_number).content,
                          "cbc:IssueDate")
        returned = [{"number": sale_number, "issue_date": sale_date}, SUPPLIER_INVOICE]
        await publish(worker_settings, ubl_message("return-1", type="IADE",
                                                   billing_reference=returned))
        await await_until(lambda: all_in(engine, {"return-1"}, "ISSUED"), 30,
                          message="the return ISSUED")

    # The return: its type and profile, and the invoices it returns, by number and date.
    table, data = show(gapless_env, "return-1")
    assert "IADE/TEMELFATURA" in table
    assert f"{sale_number} of {sale_date}" in table
    assert "SUP2026000000012 of 2026-01-20" in table
    assert "discounts" not in table  # it has none
    assert "withheld" not in table
    assert (data["type"], data["profile"]) == ("IADE", "TEMELFATURA")
    assert data["billing_reference"] == returned
    assert (data["discounts"], data["withheld"]) == (None, None)
    assert (data["status"], data["invoice_id"]) == ("ISSUED", "return-1")  # keys kept
    assert data["number"] == (await rows(engine))["return-1"].number

    # The sale: no return; its discount and the VAT the buyer withholds, from its document.
    table, data = show(gapless_env, "sale-1")
    assert "TEVKIFAT/TEMELFATURA" in table
    assert "returns" not in table
    assert "12.50 TRY" in table
    assert "withheld VAT" in table
    assert (data["type"], data["profile"], data["billing_reference"]) == (
        "TEVKIFAT", "TEMELFATURA", [])
    assert data["discounts"] == "12.50 TRY"
    # 612 (cleaning) withholds 90 % of the VAT: (2 × 100.00 − 12.50 + 50.00) × 20 % × 90 %.
    assert data["withheld"] == "42.75 TRY"
    assert "42.75 TRY" in table

    # A tenant without an issuer profile (JSON documents): the kind comes from the message.
    table, data = show(gapless_env, "plain-1")
    assert "IADE/TEMELFATURA" in table
    assert "SUP2026000000012 of 2026-01-20" in table
    assert (data["type"], data["billing_reference"]) == ("IADE", [SUPPLIER_INVOICE])
    assert (data["discounts"], data["withheld"]) == (None, None)
