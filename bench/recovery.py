"""Benchmark: orphan recovery — reconciliation throughput, and the cost of an idle round.

    .venv/bin/python bench/recovery.py [--orphans 10000] [--latency-ms 50] [--concurrency 16,64]
                                       [--batch 100] [--invoices 1000000] [--rounds 200]

1. **Throughput.** ``--orphans`` stuck SENDING invoices (leases an hour old) in a fresh database,
   the real ``gapless mock-integrator`` at a fixed ``--latency-ms`` per call, and the real
   ``gapless recovery`` process (``--concurrency C --batch B``). Two kinds of orphan:
   *repair* — the integrator has every document (the answer was lost): one lookup each;
   *resend* — it has none (never sent): a lookup, then the send. Rate = orphans settled per second
   between the first and the last ``issued_at`` (process start-up excluded). Ideal =
   C ÷ (calls per orphan × latency); the goal is at least 0.8 × C ÷ latency for repairs.
2. **Idle round.** ``claim_orphans`` finding nothing on a table of ``--invoices`` invoices (all
   settled but a few fresh SENDING and not-yet-due ERROR rows), ``--rounds`` times: with the two
   partial indexes of the schema, then — the baseline — the same statement after dropping them.
   Goal: under 10 ms. Also timed there: the audit's database checks over the whole table.

The synthetic rows are written with set-based SQL under ``session_replication_role = replica``
(no triggers: no history events, which neither measurement reads). Every database is dropped at
the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psycopg

from bench.harness import (
    GAPLESS,
    Proc,
    bench_database,
    clean_env,
    conninfo,
    cpu_seconds,
    machine,
    median,
    percentile,
    print_table,
    start_mock,
    wait_until,
)
from gapless.ledger.database import Database, make_engine
from gapless.ledger.invoices import claim_orphans
from gapless.ledger.queries import invoices as q
from gapless.ops.audit import check_database

TENANT, SERIES = "bench", "ABC"

DOCUMENT = ("jsonb_build_object('invoice_id', 'orphan-' || g, 'tenant', 'bench', 'series', 'ABC',"
            " 'issue_date', to_char(now(), 'YYYY-MM-DD'), 'currency', 'TRY', 'customer',"
            " jsonb_build_object('tax_id', '1234567890', 'name', 'Bench Ltd'),"
            " 'lines', jsonb_build_array(jsonb_build_object('description', 'Widget',"
            " 'quantity', '1', 'unit_price', '10.00', 'vat_rate', '20')))")


def define_series(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO series (tenant, code, prefix) VALUES (%s, %s, %s)",
                 (TENANT, SERIES, SERIES))


def number_sql(column: str) -> str:
    return f"'ABC2026' || lpad({column}::text, 9, '0')"


# ----------------------------------------------------------------------------- 1. throughput


def make_orphans(url: str, count: int) -> None:
    """``count`` invoices pinned 1..count, SENDING under leases an hour old (set-based)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        define_series(conn)
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "INSERT INTO invoices (id, invoice_id, tenant, series, status, priority, period_key,"
            " reserved_no, number, reserved_at, payload, attempts, sending_since)"
            f" SELECT g, 'orphan-' || g, %s, %s, 'SENDING', 1, '2026', g, {number_sql('g')},"
            f" now() - interval '1 hour', {DOCUMENT}, 1, now() - interval '1 hour'"
            " FROM generate_series(1, %s) g", (TENANT, SERIES, count))
        conn.execute("INSERT INTO number_counters (tenant, series, period_key, last_no)"
                     " VALUES (%s, %s, '2026', %s)", (TENANT, SERIES, count))
        conn.execute("SELECT setval('invoices_local_seq', %s)", (count,))
        conn.execute("SET session_replication_role = origin")
        conn.execute("VACUUM ANALYZE invoices")


async def fill_ledger(mock_url: str, count: int) -> None:
    """The integrator accepted every orphan's document (the answers were lost)."""
    gate = asyncio.Semaphore(32)
    async with httpx.AsyncClient(base_url=mock_url, timeout=30) as http:
        async def post(n: int) -> None:
            async with gate:
                response = await http.post("/invoices", json={
                    "tenant": TENANT, "number": f"ABC2026{n:09d}", "invoice_id": f"orphan-{n}",
                    "document": {}})
                response.raise_for_status()
        await asyncio.gather(*(post(n) for n in range(1, count + 1)))


def backend_pids(url: str, application: str) -> list[int]:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        return [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s", (application,))]


def settled_rate(url: str, count: int, timeout: float) -> tuple[float, float]:
    """Wait until every orphan is ISSUED; (orphans per second, seconds) from issued_at."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        def settled() -> tuple[int, float] | None:
            row = conn.execute("SELECT count(*) FILTER (WHERE status = 'ISSUED'),"
                               " extract(epoch FROM max(issued_at) - min(issued_at))"
                               " FROM invoices").fetchone()
            assert row is not None
            done, span = int(row[0]), float(row[1] or 0.0)
            return (done, span) if done == count else None

        try:
            _, span = wait_until(settled, timeout, interval=0.2,
                                 message=f"recovery settling {count} orphans")
        except TimeoutError as exc:
            raise SystemExit(str(exc)) from None
    return (count - 1) / span, span


def throughput(kind: str, count: int, latency_ms: float, concurrency: int,
               batch: int) -> dict[str, object]:
    mock = start_mock(name=f"recovery-mock-{kind}-{concurrency}")
    try:
        mock_url = str(mock.url)
        with bench_database("recovery") as url:
            make_orphans(url, count)
            if kind == "repair":
                asyncio.run(fill_ledger(mock_url, count))
            httpx.put(f"{mock_url}/admin/faults",
                      json={"latency_ms": [latency_ms, latency_ms]}).raise_for_status()
            run_env = {**clean_env(), "GAPLESS_DATABASE_URL": url,
                       "GAPLESS_INTEGRATOR_URL": mock_url, "GAPLESS_LOG_LEVEL": "warning",
                       "GAPLESS_LOG_FORMAT": "json"}
            proc = Proc([*GAPLESS, "recovery", "--interval", "0.05", "--stuck-after", "60",
                         "--concurrency", str(concurrency), "--batch", str(batch)],
                        run_env, f"recovery-{kind}-{concurrency}")
            mock_cpu_before = mock.cpu_s()
            try:
                rate, span = settled_rate(url, count, timeout=max(600.0, count / 10))
                recovery_cpu = proc.cpu_s()
                # The recovery's PostgreSQL backends (its pool keeps them for the whole run).
                db_cpu = sum(cpu_seconds(pid) for pid in backend_pids(url, "gapless-recovery"))
            finally:
                proc.stop()
            mock_cpu = mock.cpu_s() - mock_cpu_before
            stats = httpx.get(f"{mock_url}/admin/stats").json()
    finally:
        mock.stop()
    calls = 1 if kind == "repair" else 2
    ideal = concurrency / (calls * latency_ms / 1000)
    goal = 0.8 * concurrency / (latency_ms / 1000)
    per_orphan = {"recovery": 1000 * recovery_cpu / count, "mock": 1000 * mock_cpu / count,
                  "postgres": 1000 * db_cpu / count}
    return {"kind": kind, "concurrency": concurrency, "rate": rate, "span": span,
            "cpu": per_orphan, "ceiling": 2000 / sum(per_orphan.values()),
            "ideal": ideal, "goal": goal, "lookups": stats["lookups"], "posts": stats["posts"],
            "max_posts": stats["max_posts_per_number"]}


# ----------------------------------------------------------------------------- 2. idle round


TENANTS = 50  # each with series ABC and XYZ: 100 counters


def make_settled_table(url: str, count: int) -> None:
    """``count`` invoices over 50 tenants × 2 series, nearly all ISSUED; a few SENDING under
    fresh leases, ERROR rows not yet due, REJECTED and VOIDED ones: nothing for recovery to
    claim. Many tenants, as in production: the (tenant, series, status) index cannot serve a
    status-only scan, so the baseline shows what the partial indexes save."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO series (tenant, code, prefix)"
            " SELECT 't' || lpad(t::text, 2, '0'), s, s FROM generate_series(0, %s - 1) t,"
            " unnest(ARRAY['ABC', 'XYZ']) s", (TENANTS,))
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "INSERT INTO invoices (id, invoice_id, tenant, series, status, priority, period_key,"
            " reserved_no, number, reserved_at, payload, attempts, sending_since,"
            " next_attempt_at, last_error, integrator_ref, issued_at)"
            " SELECT g, 'inv-' || g, k.tenant, k.series, s.status, 1, '2026', k.no,"
            "  k.series || '2026' || lpad(k.no::text, 9, '0'),"
            "  now() - interval '1 day', '{}'::jsonb, 1,"
            "  CASE WHEN s.status = 'SENDING' THEN now() END,"
            "  CASE WHEN s.status = 'ERROR' THEN now() + interval '1 hour' END,"
            "  CASE WHEN s.status IN ('ERROR', 'REJECTED', 'VOIDED') THEN 'synthetic' END,"
            "  CASE WHEN s.status = 'ISSUED' THEN 'R' || g END,"
            "  CASE WHEN s.status = 'ISSUED' THEN now() - interval '1 day' END"
            " FROM generate_series(0, %s - 1) g"
            " CROSS JOIN LATERAL (SELECT"
            "   't' || lpad((g %% %s)::text, 2, '0') AS tenant,"
            "   CASE WHEN g %% (2 * %s) < %s THEN 'ABC' ELSE 'XYZ' END AS series,"
            "   g / (2 * %s) + 1 AS no) k"
            " CROSS JOIN LATERAL (SELECT CASE"
            "   WHEN g %% 1000 = 1 THEN 'SENDING' WHEN g %% 1000 = 2 THEN 'ERROR'"
            "   WHEN g %% 1000 = 3 THEN 'REJECTED' WHEN g %% 2000 = 4 THEN 'VOIDED'"
            "   ELSE 'ISSUED' END AS status) s",
            (count, TENANTS, TENANTS, TENANTS, TENANTS))
        conn.execute("INSERT INTO number_counters (tenant, series, period_key, last_no)"
                     " SELECT tenant, series, period_key, max(reserved_no) FROM invoices"
                     " GROUP BY tenant, series, period_key")
        conn.execute("SELECT setval('invoices_local_seq', %s)", (count,))
        conn.execute("SET session_replication_role = origin")
        conn.execute("VACUUM ANALYZE invoices")


async def idle_rounds(url: str, rounds: int) -> tuple[list[float], str]:
    """Milliseconds per idle ``claim_orphans`` (each one commits), and the scans it plans."""
    engine = make_engine(url, actor="recovery", pool_size=1)
    params = {"stuck_after_s": 300.0, "batch": 100, "max_attempts": 10, "only": None,
              "excluded": []}
    try:
        async with engine.connect() as conn:
            plan = [row[0] for row in await conn.exec_driver_sql(
                "EXPLAIN " + q.CLAIM_ORPHANS, params)]
            await conn.rollback()
        scans = sorted({line.strip().split(" on ")[0].lstrip("-> ").strip() for line in plan
                        if " on invoices" in line and "Update" not in line})
        db = Database.borrowing(engine)
        for _ in range(min(20, rounds)):  # warm the pool and the caches
            assert await claim_orphans(db, stuck_after_s=300, batch=100,
                                       max_attempts=10) == []
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            claimed = await claim_orphans(db, stuck_after_s=300, batch=100, max_attempts=10)
            times.append((time.perf_counter() - started) * 1000)
            assert claimed == []
        return times, "; ".join(scans)
    finally:
        await engine.dispose()


async def audit_seconds(url: str) -> tuple[float, int]:
    engine = make_engine(url, actor="audit", pool_size=1)
    try:
        best = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            report = await check_database(Database.borrowing(engine), tenant=None, series=None,
                                          horizon_s=600)
            best = min(best, time.perf_counter() - started)
        return best, len(report.not_issued)
    finally:
        await engine.dispose()


def idle(count: int, rounds: int) -> tuple[list[list[object]], list[object]]:
    rows: list[list[object]] = []
    with bench_database("recovery_idle") as url:
        started = time.perf_counter()
        make_settled_table(url, count)
        print(f"generated {count:,} invoices in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)
        audit_s, not_issued = asyncio.run(audit_seconds(url))
        # Cumulative: each variant changes the table the one before it left. The second is the
        # index recovery used before its partial ones (dropped in schema 0023).
        variants: tuple[tuple[str, tuple[str, ...]], ...] = (
            ("gapless (partial indexes)", ()),
            ("baseline: one (tenant, series, status) index instead",
             ("DROP INDEX invoices_sending_idx", "DROP INDEX invoices_error_due_idx",
              "CREATE INDEX invoices_tenant_series_status_idx"
              " ON invoices (tenant, series, status)")),
            ("baseline: no index on status at all",
             ("DROP INDEX invoices_tenant_series_status_idx",)),
        )
        for n, (label, changes) in enumerate(variants):
            with psycopg.connect(conninfo(url), autocommit=True) as conn:
                for change in changes:
                    conn.execute(change)
                conn.execute("ANALYZE invoices")
            times, scans = asyncio.run(idle_rounds(url, rounds if n == 0 else
                                                   max(10, rounds // 5)))
            rows.append([label, len(times), f"{median(times):.2f}",
                         f"{percentile(times, 0.95):.2f}", f"{max(times):.2f}",
                         "yes" if median(times) < 10 else "no", scans])
    return rows, [f"{count:,}", f"{not_issued:,}", f"{audit_s:.2f}"]


# ----------------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orphans", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", default="16,64",
                        help="Comma-separated --concurrency values of gapless recovery.")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--invoices", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-idle", action="store_true")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    print(f"machine: {machine()}")
    print()
    if not args.skip_throughput:
        results = [throughput(kind, args.orphans, args.latency_ms, c, args.batch)
                   for c in concurrencies for kind in ("repair", "resend")]
        rows = [[r["kind"], r["concurrency"], f"{r['rate']:.0f}", f"{r['ideal']:.0f}",
                 f"{100 * float(r['rate']) / float(r['ideal']):.0f} %",  # type: ignore[arg-type]
                 f"{r['goal']:.0f}" if r["kind"] == "repair" else "-",
                 ("yes" if float(r["rate"]) >= float(r["goal"]) else "no")  # type: ignore[arg-type]
                 if r["kind"] == "repair" else "-",
                 r["lookups"], r["posts"], r["max_posts"]] for r in results]
        cpu_rows = [[r["kind"], r["concurrency"],
                     *(f"{r['cpu'][name]:.2f}" for name in ("recovery", "mock", "postgres")),  # type: ignore[index]
                     f"{r['ceiling']:.0f}"] for r in results]
        print_table(
            f"Orphans reconciled per second: {args.orphans:,} stuck invoices, mock latency "
            f"{args.latency_ms:g} ms, batch {args.batch}",
            ["kind", "concurrency", "orphans/s", "ideal/s", "of ideal", "goal/s", "goal met",
             "lookups", "posts", "max posts/number"], rows)
        print_table("CPU per orphan, ms (process CPU time ÷ orphans; recovery start-up included)",
                    ["kind", "concurrency", "recovery", "mock integrator", "postgres",
                     "CPU-bound ceiling on 2 cores, orphans/s"], cpu_rows)
    if not args.skip_idle:
        rows, audit_row = idle(args.invoices, args.rounds)
        print_table(f"Idle round (claim_orphans finds nothing) on {args.invoices:,} invoices "
                    f"of {2 * TENANTS} series, ms",
                    ["variant", "rounds", "median", "p95", "max", "< 10 ms", "scans planned"],
                    rows)
        print_table("Audit database checks (I1–I3, numbers not issued), one snapshot",
                    ["invoices", "numbers not issued", "seconds"], [audit_row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
