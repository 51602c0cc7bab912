"""Benchmark: what the commit-ordered feed costs the reservation transaction, and how fast it reads.

    .venv/bin/python bench/feed.py [--seconds 10] [--slice 0.5] [--connections 1,16]
                                   [--series 1,8] [--read-events 60000]
    .venv/bin/python bench/feed.py --chain --connections 1,16 --series 1,8

Reservation transactions per second: the worker's claim (`claim_for_sending`: lock the invoice,
reserve its number, take the SENDING lease, commit — two events per transaction), in three
databases built by the same migrations, in the same run, the variants interleaved in short
slices so that background load hits every variant alike:

* on     — the schema as migrated (version 0006): writers commit events without a position and
           without a lock; a feed client in its own process follows the feed all along (every
           50 ms when caught up), and its reads give the committed events their positions
           (`gapless_feed_assign()`), so the cost of positioning is in the figure;
* events — as migrated, but no feed client: the events are written and never positioned (the
           cost of the history alone);
* lock   — the previous design, the schema at version 0004: each event gets its sequence_id at
           commit under the commit lock (`invoice_events_commit_lock`, held until the commit is
           visible); the same kind of feed client follows it;
* off    — the history triggers disabled (no events, no feed at all): the baseline.

With ``--chain``: only the chain's cost (schema 0009, docs/chain.md), the same claim in two
databases, interleaved the same way: **chain** (as migrated: the seal appends its chain record,
hashing the stored message, under the counter row lock) and **nochain** (the same schema
at 0008: no chain). The drafts carry a realistic message (two lines, a customer with
an address), so the message hash costs what it would.

Feed read throughput: events per second through ``GET /v1/events?limit=L`` following ``next``
from cursor 0 to the end, against a ``gapless api`` subprocess over real HTTP on 127.0.0.1, next to
the bare SQL (`events_after`, same page size) as the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psycopg
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import harness
from bench.harness import (
    bench_database,
    clean_env,
    conninfo,
    delete_queues,
    machine,
    median,
    percentile,
    print_table,
    queue_prefix,
    settings_of,
)
from gapless.ledger.database import Database, make_engine
from gapless.ledger.feed import events_after
from gapless.ledger.invoices import claim_for_sending
from gapless.settings import Settings

VARIANTS = ("on", "events", "lock", "off")
#: How each variant differs from the migrated schema (bench databases only).
VARIANT_DDL = {
    "on": [],
    "events": [],  # as migrated, but no feed client: events are written, never positioned
    "lock": [],    # the schema at version 0004 instead (LOCK_REVISION)
    "off": ["ALTER TABLE invoices DISABLE TRIGGER invoices_history",
            "ALTER TABLE invoices DISABLE TRIGGER invoices_history_update"],
}
#: The schema version of the previous design (positions given at commit, under a lock).
LOCK_REVISION = "0004"
#: The feed client's pause when it has caught up (a downstream client's poll interval).
POLL_INTERVAL_S = 0.05
SERIES = [f"SR{chr(ord('A') + i)}" for i in range(8)]  # SRA … SRH
FEED_SERIES = "FED"


#: The older schema a variant runs on (None: the migrated one).
VARIANT_REVISION = {"lock": LOCK_REVISION, "nochain": "0008"}


def prepare(url: str, variant: str) -> None:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        for statement in VARIANT_DDL[variant]:
            conn.execute(statement)


#: The stored message of every draft: '{}' for the feed bench, a realistic one with --chain.
DRAFT_PAYLOAD = {"value": "{}"}
CHAIN_PAYLOAD = json.dumps({
    "invoice_id": "x", "tenant": "bench", "series": "SRA", "priority": "batch",
    "issue_date": "2026-11-25", "currency": "TRY", "type": "SATIS",
    "customer": {"tax_id": "1234567890", "name": "Örnek Ticaret Ltd. Şti.",
                 "tax_office": "Çankaya",
                 "address": {"street": "Atatürk Blv. 5", "district": "Çankaya",
                             "city": "Ankara", "postal_zone": "06690", "country": "Türkiye"}},
    "lines": [{"description": "Widget", "quantity": "2.5", "unit_price": "10.00",
               "vat_rate": "20", "unit_code": "KGM"},
              {"description": "Service", "quantity": "1", "unit_price": "100.00",
               "vat_rate": "10"}]})
#: The chain variants (--chain): the schema as migrated, and the schema before the chain.
CHAIN_VARIANTS = ("chain", "nochain")
NOCHAIN_REVISION = VARIANT_REVISION["nochain"]


def make_drafts(url: str, series: str, start: int, count: int) -> None:
    """RECEIVED drafts; with the chain (0009) they carry their message's hash, as
    intake_invoice stores them (the hash is paid when the message is stored, not here)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        hashed = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'invoices' "
            "AND column_name = 'message_sha256'").fetchone() is not None
        conn.execute(
            "INSERT INTO invoices (invoice_id, tenant, series, payload"
            + (", message_sha256" if hashed else "") + ") "
            "SELECT %s || '-' || g, 'bench', %s, p"
            + (", gapless_message_sha256(p)" if hashed else "") + " "
            "FROM generate_series(%s::bigint, %s::bigint) g, CAST(%s AS jsonb) AS p",
            (series, series, start, start + count - 1, DRAFT_PAYLOAD["value"]))
        conn.execute("VACUUM ANALYZE invoices")
        conn.execute("VACUUM ANALYZE invoice_events")


class Drafts:
    """Hands out RECEIVED invoice ids per (database, series), creating them ahead of the run."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, str], int] = defaultdict(int)
        self.used: dict[tuple[str, str], int] = defaultdict(int)

    def ensure(self, url: str, series: str, needed: int) -> None:
        key = (url, series)
        spare = self.made[key] - self.used[key]
        if spare < needed:
            make_drafts(url, series, self.made[key] + 1, needed - spare)
            self.made[key] += needed - spare

    def ids(self, url: str, series: str) -> Iterator[str]:
        key = (url, series)
        while True:
            self.used[key] += 1
            if self.used[key] > self.made[key]:
                raise RuntimeError("bench ran out of drafts; raise the estimate")
            yield f"{series}-{self.used[key]}"


def follow_feed(url: str, positions: bool, stop: Any) -> None:
    """A feed client in its own process: pages of 500 after its cursor until caught up, then a
    pause; with ``positions`` it first gives committed events their positions, as the feed does
    (schema 0005). Runs until ``stop`` is set."""
    cursor = 0
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        while not stop.is_set():
            if positions:
                conn.execute("SELECT gapless_feed_assign()")
            rows = conn.execute(FEED_PAGE, (cursor,)).fetchall()
            if rows:
                cursor = rows[-1][0]
            if len(rows) < 500:
                time.sleep(POLL_INTERVAL_S)


FEED_PAGE = """SELECT sequence_id, invoice_id, tenant, series, kind, from_status, to_status,
                      number, attempts, detail, actor, created_at
                 FROM invoice_events
                WHERE sequence_id IS NOT NULL AND sequence_id > %s
                ORDER BY sequence_id LIMIT 500"""


@contextmanager
def feed_clients(urls: dict[str, str]) -> Iterator[None]:
    """One feed client per variant that has a feed (of those in ``urls``), for the whole claim
    benchmark."""
    stop = multiprocessing.Event()
    clients = [multiprocessing.Process(target=follow_feed, args=(urls[v], v == "on", stop),
                                       daemon=True) for v in ("on", "lock") if v in urls]
    for client in clients:
        client.start()
    try:
        yield
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=30)


#: The claim of a schema before 0010 (ids per tenant): the one its worker made, by invoice_id.
LEGACY_CLAIM = "SELECT kind FROM claim_invoice(%(invoice_id)s, 300, 30000)"


async def claims(engine: AsyncEngine, url: str, drafts: Drafts, connections: int,
                 series_count: int, seconds: float, *, legacy: bool = False
                 ) -> tuple[float, list[float]]:
    """claim_for_sending on `connections` connections for `seconds`; (elapsed s, latencies ms).
    ``legacy``: the database holds a schema before 0010, claimed the way its worker did
    (:data:`LEGACY_CLAIM`).

    Every latency is one committed claim; the elapsed time runs until the last one is done."""
    latencies: list[float] = []
    id_sources = {code: drafts.ids(url, code) for code in SERIES[:series_count]}
    stop_at = time.perf_counter() + seconds
    db = Database.borrowing(engine)

    async def one_connection(index: int) -> None:
        source = id_sources[SERIES[index % series_count]]
        while time.perf_counter() < stop_at:
            began = time.perf_counter()
            if legacy:
                await db.one(LEGACY_CLAIM, {"invoice_id": next(source)})
            else:
                await claim_for_sending(db, next(source), tenant="bench", lease_s=300,
                                        lock_timeout_ms=30_000)
            latencies.append((time.perf_counter() - began) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one_connection(i) for i in range(connections)))
    return time.perf_counter() - began, latencies


async def interleaved(engines: dict[str, AsyncEngine], urls: dict[str, str], drafts: Drafts,
                      order: Callable[[int], Sequence[str]], connections: int,
                      series_count: int, seconds: float, slice_s: float, estimate: int
                      ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """One (connections, series) cell: the variants take turns in slices of ``slice_s``, in
    ``order(turn)``, until each has had ``seconds``; (claims/s, latencies ms) per variant."""
    variants = order(0)
    per_series = int(estimate * seconds * 1.5 / series_count) + 100
    for v in variants:
        for code in SERIES[:series_count]:
            drafts.ensure(urls[v], code, per_series)
    done: dict[str, float] = defaultdict(float)
    spent: dict[str, float] = defaultdict(float)
    lats: dict[str, list[float]] = defaultdict(list)
    turn = 0
    while min(spent[v] for v in variants) < seconds:
        for v in order(turn):
            elapsed, latency = await claims(engines[v], urls[v], drafts, connections,
                                            series_count, slice_s,
                                            legacy=v in VARIANT_REVISION)
            done[v] += len(latency)
            spent[v] += elapsed
            lats[v].extend(latency)
        turn += 1
    return {v: done[v] / spent[v] for v in variants}, lats


async def warm(engines: dict[str, AsyncEngine], urls: dict[str, str], drafts: Drafts,
               connections: int, estimate: int) -> None:
    """Warm every pooled connection's plans (plpgsql caches them per session)."""
    # Connection i claims in series i mod n: fewer connections than series use only the first
    # ones, each at up to estimate / connections claims a second.
    in_use = min(connections, len(SERIES))
    for v, engine in engines.items():
        for code in SERIES[:in_use]:
            drafts.ensure(urls[v], code, int(estimate / in_use) + 100)
        await claims(engine, urls[v], drafts, connections, in_use, 1.0,
                     legacy=v in VARIANT_REVISION)


def rotating(variants: Sequence[str]) -> Callable[[int], Sequence[str]]:
    """Turn by turn: rotated one step, and reversed every other turn (on, events, lock, off;
    off, on, events, lock reversed; …)."""
    def order(turn: int) -> Sequence[str]:
        rotated = tuple(variants[turn % len(variants):]) + tuple(variants[:turn % len(variants)])
        return tuple(reversed(rotated)) if turn % 2 else rotated
    return order


def alternating(variants: Sequence[str]) -> Callable[[int], Sequence[str]]:
    """Turn by turn: as given, then reversed (for two variants, which rotating would not
    alternate)."""
    def order(turn: int) -> Sequence[str]:
        return tuple(reversed(variants)) if turn % 2 else tuple(variants)
    return order


#: A cell's result: connections, series, claims/s per variant, latencies ms per variant.
CellRates = tuple[int, int, dict[str, float], dict[str, list[float]]]


async def claim_rates(urls: dict[str, str], order: Callable[[int], Sequence[str]],
                      cells: Sequence[tuple[int, int]], seconds: float, slice_s: float,
                      estimate: int) -> list[CellRates]:
    """Every (connections, series) cell runs the variants of ``urls`` in short interleaved
    slices, in ``order(turn)``, until each has had ``seconds``; a variant's rate is its claims
    over its time. Background load that comes and goes then hits every variant alike."""
    engines = {v: make_engine(url, actor="bench", pool_size=max(n for n, _ in cells) + 2)
               for v, url in urls.items()}
    drafts = Drafts()
    results: list[CellRates] = []
    try:
        await warm(engines, urls, drafts, max(n for n, _ in cells), estimate)
        for n, s in cells:
            rate, lats = await interleaved(engines, urls, drafts, order, n, s, seconds, slice_s,
                                           estimate)
            print(f"  connections {n} series {s}: " + ", ".join(
                f"{v} {rate[v]:,.0f}/s" for v in order(0)), file=sys.stderr)
            results.append((n, s, rate, lats))
    finally:
        for engine in engines.values():
            await engine.dispose()
    return results


async def reservation_bench(urls: dict[str, str], levels: list[int], series_levels: list[int],
                            seconds: float, slice_s: float, estimate: int
                            ) -> list[list[object]]:
    """The variants (on, events, lock, off) in every (connections, series) cell."""
    cells = [(n, s) for n in levels for s in series_levels]
    return [[n, s, f"{rate['off']:,.0f}", f"{rate['events']:,.0f}", f"{rate['lock']:,.0f}",
             f"{rate['on']:,.0f}", f"{rate['events'] / rate['off']:.2f}",
             f"{rate['lock'] / rate['off']:.2f}", f"{rate['on'] / rate['off']:.2f}",
             f"{rate['on'] / rate['events']:.2f}",
             f"{median(lats['off']):.2f} / {percentile(lats['off'], 0.99):.2f}",
             f"{median(lats['on']):.2f} / {percentile(lats['on'], 0.99):.2f}"]
            for n, s, rate, lats in await claim_rates(urls, rotating(VARIANTS), cells, seconds,
                                                      slice_s, estimate)]


async def chain_bench(urls: dict[str, str], levels: list[int], series_levels: list[int],
                      seconds: float, slice_s: float, estimate: int) -> list[list[object]]:
    """--chain: the claim with the chain (schema 0009) and without (0008), interleaved in
    slices per (connections, series) cell as in reservation_bench; the cells pair the lists."""
    cells = list(zip(levels, series_levels, strict=True))
    return [[n, s, f"{rate['nochain']:,.0f}", f"{rate['chain']:,.0f}",
             f"{rate['chain'] / rate['nochain']:.2f}",
             f"{median(lats['nochain']):.2f} / {percentile(lats['nochain'], 0.99):.2f}",
             f"{median(lats['chain']):.2f} / {percentile(lats['chain'], 0.99):.2f}"]
            for n, s, rate, lats in await claim_rates(urls, alternating(CHAIN_VARIANTS), cells,
                                                      seconds, slice_s, estimate)]


@contextmanager
def variant_databases(variants: Sequence[str] = VARIANTS) -> Iterator[dict[str, str]]:
    """The variants' databases (by default all four: on, events, lock, off), their series
    defined; dropped afterwards."""
    with ExitStack() as stack:
        urls = {v: stack.enter_context(bench_database(f"feed_{v}", VARIANT_REVISION.get(v)))
                for v in variants}
        for variant, url in urls.items():
            _define_series(url)
            prepare(url, variant)
        yield urls


@contextmanager
def chain_databases() -> Iterator[dict[str, str]]:
    """The chain variants' databases (chain: as migrated; nochain: the schema at 0008), their
    series defined, drafts carrying a realistic message meanwhile; dropped afterwards."""
    with ExitStack() as stack:
        urls = {v: stack.enter_context(bench_database(f"chain_{v}", VARIANT_REVISION.get(v)))
                for v in CHAIN_VARIANTS}
        for url in urls.values():
            _define_series(url)
        previous = DRAFT_PAYLOAD["value"]
        DRAFT_PAYLOAD["value"] = CHAIN_PAYLOAD
        try:
            yield urls
        finally:
            DRAFT_PAYLOAD["value"] = previous


def run_chain_bench(args: argparse.Namespace) -> None:
    """--chain: pairs of (connections, series) from --connections and --series, e.g. 1,16
    and 1,8 give the cells 1 × 1 and 16 × 8."""
    levels = [int(c) for c in args.connections.split(",")]
    series_levels = [int(s) for s in args.series.split(",")]
    if len(levels) != len(series_levels):
        raise SystemExit("--chain pairs --connections with --series: give as many of each")
    with chain_databases() as urls:
        rows = asyncio.run(chain_bench(urls, levels, series_levels, args.seconds, args.slice,
                                       args.estimate))
    print(f"machine: {machine()}; {args.seconds:g} s per variant and cell, in interleaved "
          f"{args.slice:g} s slices; claim = the worker's reservation transaction "
          "(claim_for_sending) of a draft with a realistic message")
    print_table("Claims per second without the chain (schema 0008) and with it (0009); "
                "latency ms median / p99",
                ["connections", "series", "nochain/s", "chain/s", "chain ÷ nochain",
                 "nochain latency", "chain latency"], rows)


# ---------------------------------------------------------------- the same claim, SQL only

#: The claim transaction of `claim_for_sending` as plain SQL, for pgbench: no Python client in the
#: way, so the difference between the variants is the database's own cost. Client k works on
#: series PG<k mod S> (S substituted below); invoice ids come from one sequence per series.
PGBENCH_CLAIM = """\\set sidx :client_id % {series}
SELECT nextval(('pgbench_ids_' || :sidx)::regclass) AS n \\gset
BEGIN;
SELECT set_config('lock_timeout', '30000ms', true);
SELECT id, status, reserved_no FROM invoices
 WHERE invoice_id = 'PG' || chr(65 + :sidx) || '-' || :n FOR UPDATE;
SELECT * FROM reserve_number('PG' || chr(65 + :sidx) || '-' || :n, now(), 30000);
UPDATE invoices SET status = 'SENDING', sending_since = now(), attempts = attempts + 1,
       next_attempt_at = NULL
 WHERE invoice_id = 'PG' || chr(65 + :sidx) || '-' || :n;
COMMIT;
"""
PG_SERIES = [f"PG{chr(ord('A') + i)}" for i in range(8)]


def pgbench_path() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True)
    return str(candidates[0]) if candidates else None


def pgbench_drafts(url: str, per_series: list[int]) -> None:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        for index, (code, count) in enumerate(zip(PG_SERIES, per_series, strict=True)):
            make_drafts(url, code, 1, count)
            conn.execute(f"CREATE SEQUENCE IF NOT EXISTS pgbench_ids_{index}")


def pgbench_slice(binary: str, url: str, script: Path, clients: int,
                  seconds: int) -> tuple[int, float]:
    """One pgbench run: (transactions, seconds of claiming, connection time excluded)."""
    parts = make_url(url)
    result = subprocess.run(
        [binary, "-n", "-h", parts.host or "127.0.0.1", "-p", str(parts.port or 5432),
         "-U", parts.username or "postgres", "-f", str(script), "-c", str(clients),
         "-j", str(min(clients, 2)), "-T", str(seconds), parts.database or ""],
        capture_output=True, text=True, check=False,
        env={**os.environ, **({"PGPASSWORD": parts.password} if parts.password else {})})
    done = re.search(r"number of transactions actually processed: (\d+)", result.stdout)
    tps = re.search(r"tps = ([0-9.]+)", result.stdout)
    if result.returncode != 0 or not done or not tps or "aborted" in result.stderr:
        raise RuntimeError(f"pgbench failed: {result.stderr.strip()[-500:]}")
    return int(done.group(1)), int(done.group(1)) / float(tps.group(1))


def sql_bench(urls: dict[str, str], levels: list[int], series_levels: list[int],
              seconds: float, estimate: int, workdir: Path) -> list[list[object]] | None:
    binary = pgbench_path()
    if binary is None:
        print("  pgbench not found: the SQL-only table is skipped", file=sys.stderr)
        return None
    slice_s = 2
    rounds = max(1, round(seconds / slice_s))
    # Series k serves 1/s of the claims of every cell with s > k series.
    share = [sum(len(levels) / s for s in series_levels if k < s) for k in range(len(PG_SERIES))]
    for url in urls.values():
        pgbench_drafts(url, [int(estimate * (seconds + slice_s) * 1.3 * f) + 100 for f in share])
    rows: list[list[object]] = []
    for n in levels:
        for s in series_levels:
            script = workdir / f"claim_{s}.sql"
            script.write_text(PGBENCH_CLAIM.format(series=s))
            done: dict[str, float] = defaultdict(float)
            spent: dict[str, float] = defaultdict(float)
            for turn in range(rounds):
                order = VARIANTS[turn % len(VARIANTS):] + VARIANTS[:turn % len(VARIANTS)]
                for v in order:
                    count, elapsed = pgbench_slice(binary, urls[v], script, n, slice_s)
                    done[v] += count
                    spent[v] += elapsed
            rate = {v: done[v] / spent[v] for v in VARIANTS}
            print(f"  pgbench connections {n} series {s}: " + ", ".join(
                f"{v} {rate[v]:,.0f}/s" for v in VARIANTS), file=sys.stderr)
            rows.append([n, s, f"{rate['off']:,.0f}", f"{rate['events']:,.0f}",
                         f"{rate['lock']:,.0f}", f"{rate['on']:,.0f}",
                         f"{rate['events'] / rate['off']:.2f}",
                         f"{rate['lock'] / rate['off']:.2f}", f"{rate['on'] / rate['off']:.2f}",
                         f"{rate['on'] / rate['events']:.2f}"])
    return rows


async def fill_events(url: str, wanted: int) -> int:
    """Top the feed up to `wanted` committed events (one 'received' event per draft)."""
    engine = make_engine(url, actor="bench", pool_size=1)
    async with engine.connect() as conn:
        have = int((await conn.execute(text("SELECT count(*) FROM invoice_events"))).scalar_one())
    await engine.dispose()
    if have < wanted:
        make_drafts(url, FEED_SERIES, 1, wanted - have)
    return max(have, wanted)


async def walk_http(base: str, token: str, limit: int) -> tuple[int, float]:
    count = 0
    url: str | None = f"{base}/v1/events?cursor=0&limit={limit}"
    async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        began = time.perf_counter()
        while url is not None:
            response = await http.get(url)
            response.raise_for_status()
            page = response.json()
            count += len(page["results"])
            url = page["next"]
        return count, time.perf_counter() - began


async def walk_sql(url: str, limit: int) -> tuple[int, float]:
    engine = make_engine(url, actor="bench", pool_size=1)
    count, cursor = 0, 0
    began = time.perf_counter()
    db = Database.borrowing(engine)
    while page := await events_after(db, cursor, limit):
        count += len(page)
        cursor = page[-1].sequence_id
        # Rendering is part of serving a page; the API does it too.
        rendered = [event.as_json() for event in page]
        assert len(rendered) == len(page)
    elapsed = time.perf_counter() - began
    await engine.dispose()
    return count, elapsed


def start_api(url: str, token: str, stack: ExitStack) -> str:
    """``gapless api`` on the database, on a free port, answering /healthz; stopped (and its
    queues deleted) when ``stack`` closes."""
    env = clean_env()
    env.update(GAPLESS_DATABASE_URL=url, GAPLESS_QUEUE=queue_prefix("feed"),
               GAPLESS_LOG_LEVEL="warning", GAPLESS_AMQP_URL=Settings().amqp_url)
    stack.callback(lambda: asyncio.run(delete_queues(settings_of(env))))
    proc = harness.start_api(env, token, name="feed-api")
    stack.callback(proc.stop)
    assert proc.url is not None
    return proc.url


def read_bench(url: str, total: int, repeats: int) -> list[list[object]]:
    token = secrets.token_urlsafe(24)
    rows: list[list[object]] = []
    with ExitStack() as stack:
        base = start_api(url, token, stack)
        for limit in (500, 100):
            sql_rates, http_rates = [], []
            for _ in range(repeats):
                count, elapsed = asyncio.run(walk_sql(url, limit))
                assert count == total, (count, total)
                sql_rates.append(count / elapsed)
                count, elapsed = asyncio.run(walk_http(base, token, limit))
                assert count == total, (count, total)
                http_rates.append(count / elapsed)
            rows.append([limit, f"{total:,}", f"{median(sql_rates):,.0f}",
                         f"{median(http_rates):,.0f}",
                         f"{median(http_rates) / median(sql_rates):.2f}",
                         f"{1000 * limit / median(http_rates):.1f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="claiming time per variant and cell")
    parser.add_argument("--connections", default="1,16")
    parser.add_argument("--series", default="1,8")
    parser.add_argument("--slice", type=float, default=0.5,
                        help="seconds per interleaved slice of one variant")
    parser.add_argument("--estimate", type=int, default=3000,
                        help="claims/s the fastest cell might reach (drafts are made ahead)")
    parser.add_argument("--pg-estimate", type=int, default=4000,
                        help="claims/s pgbench might reach (drafts are made ahead)")
    parser.add_argument("--read-events", type=int, default=60_000)
    parser.add_argument("--read-repeats", type=int, default=3)
    parser.add_argument("--chain", action="store_true",
                        help="only the chain's cost: cells pair --connections with --series")
    args = parser.parse_args()
    if args.chain:
        run_chain_bench(args)
        return
    levels = [int(c) for c in args.connections.split(",")]
    series_levels = [int(s) for s in args.series.split(",")]
    if max(series_levels) > len(SERIES):
        parser.error(f"at most {len(SERIES)} series")

    with ExitStack() as stack:
        urls = stack.enter_context(variant_databases())
        with feed_clients(urls):
            reservation_rows = asyncio.run(reservation_bench(
                urls, levels, series_levels, args.seconds, args.slice, args.estimate))
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            sql_rows = sql_bench(urls, levels, series_levels, args.seconds, args.pg_estimate,
                                 workdir)
        total = asyncio.run(fill_events(urls["on"], args.read_events))
        read_rows = read_bench(urls["on"], total, args.read_repeats)

    print(f"machine: {machine()}; {args.seconds:g} s per variant and cell, in interleaved "
          f"{args.slice:g} s slices; claim = the worker's reservation transaction "
          "(claim_for_sending), 2 events each")
    print_table("Claims per second: no history / history without a feed / previous feed "
                "design (commit lock) / feed on (higher is better); latency ms median / p99",
                ["connections", "series", "off/s", "events/s", "lock/s", "on/s",
                 "events ÷ off", "lock ÷ off", "on ÷ off", "on ÷ events", "off latency",
                 "on latency"], reservation_rows)
    if sql_rows is not None:
        print_table("The same claim as plain SQL under pgbench (no Python client; claims/s)",
                    ["connections", "series", "off/s", "events/s", "lock/s", "on/s",
                     "events ÷ off", "lock ÷ off", "on ÷ off", "on ÷ events"], sql_rows)
    print_table("Feed read throughput, following `next` from cursor 0 (events/s)",
                ["limit", "events", "SQL events_after/s", "HTTP GET /v1/events/s",
                 "HTTP ÷ SQL", "ms per HTTP page"], read_rows)


def _define_series(url: str) -> None:
    """The bench's series, by the columns every schema version has (their defaults are today's
    series add defaults: yearly, Europe/Istanbul, 9 digits, GİB's layout)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        for code in [*SERIES, *PG_SERIES, FEED_SERIES]:
            conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('bench', %s, %s)",
                         (code, code))


if __name__ == "__main__":
    main()
