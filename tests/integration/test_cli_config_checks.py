"""Mistakes caught at configuration time, against real PostgreSQL: ``tenant set`` checks the
VKN/TCKN check digits (python-stdnum), ``series add`` refuses a series GİB's numbering forbids
for a tenant with an issuer profile, and ``tenant set`` refuses a profile to a tenant that has
such a series (``--force`` sets it, with a warning). Each refusal is one line, exit 2, and
writes nothing; a tax id is never echoed."""

from __future__ import annotations

import subprocess

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpers import run_gapless

VALID_VKN = "1234567808"
VALID_TCKN = "10000000146"
PROFILE = ["--name", "Acme Bilişim A.Ş.", "--tax-office", "Kadıköy", "--street", "Rıhtım Cad. 1",
           "--district", "Kadıköy", "--city", "İstanbul"]


def usage_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("gapless: error"), line
    for fragment in fragments:
        assert fragment in line, line
    return line


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


async def profiles(engine: AsyncEngine) -> list[tuple[str, str]]:
    async with engine.connect() as conn:
        return [tuple(row) for row in (await conn.execute(text(
            "SELECT tenant, tax_id FROM tenant_profiles ORDER BY tenant, version"))).all()]


async def series_codes(engine: AsyncEngine) -> list[tuple[str, str, str]]:
    async with engine.connect() as conn:
        return [tuple(row) for row in (await conn.execute(text(
            "SELECT tenant, code, reset FROM series ORDER BY tenant, code"))).all()]


# --------------------------------------------------------------------------- the tax id


@pytest.mark.parametrize(("tax_id", "kind"), [
    ("1234567803", "VKN"),   # one digit off: the example a reader copies
    ("9876543210", "VKN"),
    ("0000000000", "VKN"),
    ("10000000147", "TCKN"),
])
async def test_a_tax_id_whose_check_digit_fails_is_refused_unechoed(
        engine: AsyncEngine, gapless_env: dict[str, str], tax_id: str, kind: str) -> None:
    result = run_gapless(["tenant", "set", "acme", "--tax-id", tax_id, *PROFILE], gapless_env)
    line = usage_error(result, "--tax-id", kind)
    assert tax_id not in result.stderr + result.stdout
    assert kind == "TCKN" or "check digit does not match" in line
    assert await profiles(engine) == []


async def test_valid_vkn_and_tckn_are_accepted(engine: AsyncEngine,
                                               gapless_env: dict[str, str]) -> None:
    ok(run_gapless(["tenant", "set", "acme", "--tax-id", VALID_VKN, *PROFILE], gapless_env))
    ok(run_gapless(["tenant", "set", "ayse", "--tax-id", VALID_TCKN, "--name", "Ayşe Yılmaz",
                    *PROFILE[2:]], gapless_env))
    assert await profiles(engine) == [("acme", VALID_VKN), ("ayse", VALID_TCKN)]


# ---------------------------------------------------------------- series GİB forbids


@pytest.mark.parametrize(("args", "why"), [
    (["--reset", "monthly"], "resets monthly"),
    (["--reset", "daily"], "resets daily"),
    (["--reset", "never"], "resets never"),
    (["--prefix", "ABCD"], "needs a 3-character prefix"),
    (["--width", "7"], "a GİB e-invoice number is"),
])
async def test_series_add_refuses_what_gib_forbids_for_a_ubl_tr_tenant(
        engine: AsyncEngine, gapless_env: dict[str, str], args: list[str], why: str) -> None:
    ok(run_gapless(["tenant", "set", "acme", "--tax-id", VALID_VKN, *PROFILE], gapless_env))
    usage_error(run_gapless(["series", "add", "acme", "ABM", *args], gapless_env),
                why, "tenant 'acme' has an issuer profile", "dead-letter")
    assert await series_codes(engine) == []
    # The same series for a tenant without a profile (JSON documents) is fine.
    ok(run_gapless(["series", "add", "globex", "ABM", *args], gapless_env))
    # GİB's layout is accepted for the UBL-TR tenant.
    assert "added" in ok(run_gapless(["series", "add", "acme", "ABC"], gapless_env))
    assert [(t, c) for t, c, _ in await series_codes(engine)] == [("acme", "ABC"),
                                                                   ("globex", "ABM")]


async def test_tenant_set_refuses_a_tenant_with_such_a_series_unless_forced(
        engine: AsyncEngine, gapless_env: dict[str, str]) -> None:
    ok(run_gapless(["series", "add", "acme", "ABC"], gapless_env))
    ok(run_gapless(["series", "add", "acme", "MON", "--reset", "monthly"], gapless_env))
    ok(run_gapless(["series", "add", "acme", "DAY", "--reset", "daily"], gapless_env))
    # A counter period of its own for MON: list_series has a row per period, yet one refusal.
    ok(run_gapless(["series", "next", "acme", "MON"], gapless_env))

    refused = usage_error(run_gapless(["tenant", "set", "acme", "--tax-id", VALID_VKN, *PROFILE],
                                      gapless_env),
                          "series 'DAY' resets daily", "(and 1 more series)", "--force")
    assert VALID_VKN not in refused
    assert await profiles(engine) == []

    forced = run_gapless(["tenant", "set", "acme", "--tax-id", VALID_VKN, *PROFILE, "--force"],
                         gapless_env)
    assert "profile version 1 in force" in ok(forced)
    warnings = forced.stderr.strip().splitlines()
    assert len(warnings) == 2, warnings
    assert all(line.startswith("warning: series '") and "dead-letter" in line
               for line in warnings)
    assert await profiles(engine) == [("acme", VALID_VKN)]
