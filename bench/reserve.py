"""Benchmark: reservations per second through gapless's reservation path vs the raw counter upsert.

    .venv/bin/python bench/reserve.py [--seconds 5] [--connections 1,4,16]

Both run in the same process, over the same driver (SQLAlchemy async + psycopg 3), on one
series, in the same throw-away database:

* raw      — BEGIN; INSERT … ON CONFLICT DO UPDATE SET last_no = last_no + 1 RETURNING; COMMIT
* gapless  — BEGIN; SELECT reserve_number(invoice) (lock invoice, advance counter, pin the number
             on the invoice, history event with its commit-ordered feed position); COMMIT
* claim    — the worker's whole step 2 (`claim_for_sending`: lock, reserve, SENDING lease)

Counter-lock hold time is measured from the moment the reservation statement is sent to the
moment its COMMIT is acknowledged (an upper bound: the lock is taken inside that statement).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.harness import bench_database, conninfo, machine, median, percentile, print_table
from gapless.ledger.counters import reserve_number
from gapless.ledger.database import Database, make_engine
from gapless.ledger.invoices import claim_for_sending
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec

RAW_UPSERT = """
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no)
    VALUES ('bench', 'RAW', '2026', 1)
    ON CONFLICT (tenant, series, period_key) DO UPDATE SET last_no = c.last_no + 1
    RETURNING c.last_no
"""


def make_drafts(url: str, series: str, count: int) -> None:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO invoices (invoice_id, tenant, series, payload) "
            "SELECT %s || '-' || g, 'bench', %s, '{}'::jsonb FROM generate_series(1, %s) g",
            (series, series, count))


async def run_path(engine: AsyncEngine, path: str, connections: int, seconds: float,
                   series: str) -> tuple[float, list[float]]:
    """Run one path for `seconds` on `connections` connections; (tx/s, hold times in ms)."""
    counter = iter(range(1, 10**9))
    holds: list[float] = []
    done = 0
    stop_at = time.perf_counter() + seconds
    db = Database.borrowing(engine)

    async def one_connection() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            invoice_id = f"{series}-{next(counter)}"
            if path == "claim":
                start = time.perf_counter()
                await claim_for_sending(db, invoice_id, tenant="bench", lease_s=300,
                                        lock_timeout_ms=10_000)
                holds.append((time.perf_counter() - start) * 1000)
            else:
                # Both paths alike: BEGIN, the statement, COMMIT on one psycopg connection.
                async with db.transaction() as tx:
                    start = time.perf_counter()
                    if path == "raw":
                        await tx.one(RAW_UPSERT)
                    else:
                        await reserve_number(tx, invoice_id, tenant="bench",
                                             lock_timeout_ms=10_000)
                holds.append((time.perf_counter() - start) * 1000)
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return done / (time.perf_counter() - began), holds


@dataclass(frozen=True)
class Cell:
    """One connection count's rates (per second) and hold times (ms) of the three paths."""

    connections: int
    raw: float
    gapless: float
    claim: float
    raw_holds: list[float]
    gapless_holds: list[float]


async def measure(seconds: float, levels: list[int]) -> list[Cell]:
    """Every path at every connection count, ``seconds`` each, in one throw-away database
    (also ``bench/check.py``'s short run)."""
    cells = []
    with bench_database("reserve") as url:
        engine = make_engine(url, actor="bench", pool_size=max(levels) + 2)
        for code in ("RAW", "JIT", "CLM"):
            await add_series(Database.borrowing(engine),
                             build_series_spec("bench", code, prefix=code))
        # Enough drafts for the fastest plausible rate.
        for code in ("JIT", "CLM"):
            make_drafts(url, code, int(6000 * seconds * len(levels)))
        async with engine.connect() as conn:  # warm the pool and the plans
            for _ in range(3):
                await conn.execute(text("SELECT 1"))
        for n in levels:
            raw_rate, raw_holds = await run_path(engine, "raw", n, seconds, "RAW")
            jit_rate, jit_holds = await run_path(engine, "gapless", n, seconds, "JIT")
            clm_rate, _ = await run_path(engine, "claim", n, seconds, "CLM")
            cells.append(Cell(n, raw_rate, jit_rate, clm_rate, raw_holds, jit_holds))
        await engine.dispose()
    return cells


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", default="1,4,16")
    args = parser.parse_args()
    levels = [int(c) for c in args.connections.split(",")]
    rows = [[c.connections, f"{c.raw:,.0f}", f"{c.gapless:,.0f}", f"{c.gapless / c.raw:.2f}",
             f"{c.claim:,.0f}",
             f"{median(c.gapless_holds):.2f} / {percentile(c.gapless_holds, 0.99):.2f}",
             f"{median(c.raw_holds):.2f} / {percentile(c.raw_holds, 0.99):.2f}"]
            for c in await measure(args.seconds, levels)]
    print(f"machine: {machine()}; {args.seconds:g} s per cell; one series per path")
    print_table("Reservations per second (higher is better) and counter-lock hold time (ms)",
                ["connections", "raw upsert/s", "gapless reserve/s", "ratio",
                 "worker claim/s", "gapless hold median / p99", "raw hold median / p99"], rows)


if __name__ == "__main__":
    asyncio.run(main())
