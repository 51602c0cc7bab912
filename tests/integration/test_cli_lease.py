"""One lease setting, not two: ``gapless recovery`` without ``--stuck-after`` takes an invoice
as an orphan once its lease is older than ``GAPLESS_LEASE_S`` — the age after which a worker's
redelivery takes it over too; the flag still overrides."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from tests.helpers import run_gapless
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import define_series, invoice_rows, make_sending


def recovery_once(env: dict[str, str], *args: str) -> str:
    result = run_gapless(["recovery", "--once", *args], env)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_stuck_after_defaults_to_the_lease_setting(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    await make_sending(engine, ["ten-minutes", "just-now"])
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoices SET sending_since = now() - interval '10 minutes'"
                                " WHERE invoice_id = 'ten-minutes'"))

    # A lease of an hour: neither lease is stale yet.
    assert "claimed 0 orphan(s)" in recovery_once({**integrated_env, "GAPLESS_LEASE_S": "3600"})
    # The flag overrides the setting: a lease of 20 minutes leaves both alone too.
    assert "claimed 0 orphan(s)" in recovery_once(
        {**integrated_env, "GAPLESS_LEASE_S": "60"}, "--stuck-after", "1200")
    # The contract's default lease, 300 s: the ten-minute-old lease is an orphan, the fresh one
    # is its worker's.
    env = {key: value for key, value in integrated_env.items() if key != "GAPLESS_LEASE_S"}
    assert "claimed 1 orphan(s)" in recovery_once(env)
    rows = await invoice_rows(engine)
    assert (rows["ten-minutes"].status, rows["just-now"].status) == (
        Status.ISSUED, Status.SENDING)
