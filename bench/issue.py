"""Benchmark: issued invoices per second — gapless's worker against a bare loop doing the same
database and HTTP work, and against the naive design.

    .venv/bin/python bench/issue.py [--latency-ms 200] [--concurrency 8,32,64] [--processes 1,2]
                                    [--warmup 3] [--window 8] [--repeat 3] [--backlog 2000]
                                    [--no-naive] [--no-mixed] [--no-routed] [--no-despatch]

Everything real: PostgreSQL, RabbitMQ, ``gapless mock-integrator`` at a fixed latency, and the
workers as separate processes. Each run gets a fresh database and queue, a backlog published
before the workers start, and is measured over a window after a warm-up.

* **gapless** — ``gapless worker --concurrency C``: validation, the intake statement (draft and
  claim, committed before the call), the document, the guarded call, the outcome, the ack. The
  tenant has no issuer profile: its document is the canonical JSON of the message.
* **gapless UBL-TR** — the same with an issuer profile for the tenant and realistic messages
  (1–5 lines, company and person customers with addresses; ``gapless.demo.samples`` with
  ``kinds=False``: plain sales only, as in the runs before document kinds existed; the same
  distribution, not the same messages for a seed): every
  invoice's UBL-TR 2.1 document is rendered, stored and sent.
* **gapless UBL-TR, mixed kinds** — the same, the messages a business's mix of document kinds
  (``gapless.demo.samples`` with ``kinds=True``, the weights of ``KIND_WEIGHTS``: sales with
  discounts,
  returns, withholding, exempt, export-registered, special-base, exports, public sector). Every
  message of the backlog is checked (``check_ubl_inputs``) before it is published, so none is
  dead-lettered during the run. ``--no-mixed`` skips it. Goal at 2 processes × 32 in flight:
  ≥ 0.85 of the ideal.
* **gapless UBL-TR, routed** — the UBL-TR plain sales naming no series and no profile, to a pool
  of 40 companies of which every other one is a registered e-Fatura user at the mock: the worker
  routes each before its seal (e-Fatura series EFA at the customer's alias, or e-Arşiv series
  EAR), the recipient cache warm (filled before the run). ``--no-routed`` skips it. Goal at 2
  processes × 32 in flight: ≥ 0.85 of the ideal.
* **gapless dispatch notes** — e-İrsaliye notes (``gapless.demo.samples.sample_note``: SEVK and
  MATBUDAN, drivers or a carrier, priced or not) naming no series, to the same pool of 40
  companies, every other one a registered e-İrsaliye user at the mock: each is routed before its
  seal (series IRS of channel edespatch, at the customer's e-İrsaliye alias or GİB's box), its
  DespatchAdvice rendered, stored and sent; recipient cache warm. ``--no-despatch`` skips it.
  Goal at 2 processes × 32 in flight: ≥ 0.9 of the ideal.
* **bare**    — a minimal consumer in this script (``--baseline-worker bare``): the same intake
  statement, the same POST, the same ISSUED statement storing the same JSON document (canonical
  JSON and its SHA-256), and the ack — and nothing else: no validation, guard, retries, logs or
  metrics. What an asyncio loop costs for the same work.
* **naive**   — the same minimal consumer holding intake, call and outcome in ONE transaction:
  the counter row stays locked across the integrator call, so every invoice of the series waits
  for the one call in flight.

Ideal = concurrency × processes ÷ latency. CPU per invoice is the worker processes' own CPU time
(from /proc) over the window divided by the invoices issued in it. Gapless, UBL-TR, mixed kinds
and bare run ``--repeat`` times per cell, interleaved round by round; the tables give the medians
and the range of CPU per invoice, which varies from run to run on a shared 2-core machine. Also
measured: the worker's RSS at concurrency 64, and the latency of a user-priority message
published behind a 2,000-message batch backlog (against the same message published as batch).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aio_pika
import httpx
from sqlalchemy import text

from bench import harness
from bench.harness import (
    CPU_ROLES,
    GAPLESS,
    ROOT,
    Proc,
    bench_database,
    cpu_by_role,
    cpu_ms_per_item,
    environment,
    issued_count,
    machine,
    median,
    mock_integrator,
    print_table,
    publish,
    settings_of,
    wait_issued,
)
from gapless.amqp.publisher import Publisher
from gapless.demo.samples import KIND_WEIGHTS, sample_messages, sample_note
from gapless.documents import build_issuer, check_inputs
from gapless.ledger.database import make_engine
from gapless.logging import configure_logging
from gapless.message import validate_message
from gapless.settings import Settings

#: The issuer profile of the UBL-TR runs (``gapless tenant set``).
PROFILE_ARGS = ["tenant", "set", "bench", "--tax-id", "1234567808", "--name",
                "Bench Bilişim A.Ş.", "--tax-office", "Kadıköy", "--street", "Rıhtım Cad. No:1",
                "--district", "Kadıköy", "--city", "İstanbul", "--postal-zone", "34716"]


#: Designs whose tenant has the issuer profile (UBL-TR documents), and the gapless worker's.
UBL_DESIGNS = ("ubl", "mixed", "routed", "despatch")
GAPLESS_DESIGNS = ("gapless", *UBL_DESIGNS)
#: The share at 2 processes × 32 in flight of the ideal that the mixed kinds (and the routed
#: plain sales) should reach.
MIXED_GOAL = 0.85
#: The share of the ideal dispatch notes should reach at 2 processes × 32 in flight.
DESPATCH_GOAL = 0.9
#: The routed design's customers: a pool of companies, every other one a registered e-Fatura
#: user (the mock's recipient list), their answers already in the recipient cache (warm).
ROUTED_CUSTOMERS = [f"{4000000000 + 7919 * n}" for n in range(40)]
ROUTED_SERIES = (["series", "add", "bench", "EFA", "--channel", "efatura", "--default"],
                 ["series", "add", "bench", "EAR", "--channel", "earsiv", "--default"])
#: The dispatch notes' series (the tenant's default of channel edespatch).
DESPATCH_SERIES = ["series", "add", "bench", "IRS", "--channel", "edespatch", "--default"]


def backlog_of(design: str, count: int) -> list[dict[str, Any]]:
    """The messages a run starts with: minimal ones, realistic plain sales for UBL-TR documents
    (``ubl``), realistic messages of every kind (``mixed``), or plain sales that name no series
    and no profile, to the routed pool of customers (``routed``)."""
    if design == "despatch":
        rng = random.Random(count)
        notes = []
        for n, message in enumerate(sample_messages(count, tenant="bench", series="ABC",
                                                    priority="batch", seed=count,
                                                    kinds=False)):
            note = sample_note(rng, message)
            customer = {k: v for k, v in note["customer"].items() if k != "alias"}
            customer["tax_id"] = ROUTED_CUSTOMERS[n % len(ROUTED_CUSTOMERS)]
            note["customer"] = customer
            notes.append(note)
        check_backlog(notes)
        return notes
    if design in UBL_DESIGNS:
        messages = list(sample_messages(count, tenant="bench", series="ABC", priority="batch",
                                        seed=count, kinds=design == "mixed"))
        check_backlog(messages)
        if design == "routed":
            for n, message in enumerate(messages):
                del message["series"]
                customer = {k: v for k, v in message["customer"].items() if k != "person"}
                customer.update(tax_id=ROUTED_CUSTOMERS[n % len(ROUTED_CUSTOMERS)],
                                tax_office=customer["address"]["district"])
                message["customer"] = customer
        return messages
    return [invoice(f"b-{i}") for i in range(count)]


def route_recipients(env: dict[str, str], mock_url: str) -> None:
    """The routed design's series (e-Fatura and e-Arşiv defaults), its customers registered
    (every other one) at the mock, and their answers in the recipient cache (a warm cache)."""
    for args in ROUTED_SERIES:
        subprocess.run([*GAPLESS, *args], env=env, check=True, capture_output=True, cwd=ROOT)
    registered = {tax_id: [f"urn:mail:{n}pk@bench.example"] if n % 2 == 0 else []
                  for n, tax_id in enumerate(ROUTED_CUSTOMERS)}
    httpx.put(f"{mock_url}/admin/recipients", json=registered, timeout=10).raise_for_status()
    asyncio.run(_warm_recipients(env, registered))


def despatch_recipients(env: dict[str, str], mock_url: str) -> None:
    """The dispatch notes' series, the routed pool's every other customer registered at the mock
    as an e-İrsaliye user (the others get GİB's box), and their answers in the recipient cache
    (warm)."""
    subprocess.run([*GAPLESS, *DESPATCH_SERIES], env=env, check=True, capture_output=True,
                   cwd=ROOT)
    registered = {tax_id: [f"urn:mail:irsaliye{n}@bench.example"] if n % 2 == 0 else []
                  for n, tax_id in enumerate(ROUTED_CUSTOMERS)}
    httpx.put(f"{mock_url}/admin/recipients", json={
        tax_id: {"despatch": aliases} for tax_id, aliases in registered.items()},
        timeout=10).raise_for_status()
    asyncio.run(_warm_recipients(env, registered, despatch=True))


async def _warm_recipients(env: dict[str, str], registered: dict[str, list[str]], *,
                           despatch: bool = False) -> None:
    engine = make_engine(env["GAPLESS_DATABASE_URL"], actor="bench", pool_size=1)
    try:
        async with engine.begin() as conn:
            for tax_id, aliases in registered.items():
                await conn.execute(text(
                    "INSERT INTO recipients (tax_id, registered, aliases, despatch_registered, "
                    "despatch_aliases) VALUES (:tax_id, :registered, :aliases, "
                    ":despatch_registered, :despatch_aliases)"),
                    {"tax_id": tax_id, "registered": bool(aliases) and not despatch,
                     "aliases": [] if despatch else aliases,
                     "despatch_registered": bool(aliases) and despatch,
                     "despatch_aliases": aliases if despatch else []})
    finally:
        await engine.dispose()


def check_backlog(messages: list[dict[str, Any]]) -> None:
    """Every message makes a document for the bench tenant's profile: none is dead-lettered in
    the run (raises InvalidMessage otherwise)."""
    flags = dict(zip(PROFILE_ARGS[3::2], PROFILE_ARGS[4::2], strict=True))
    issuer = build_issuer(**{flag[2:].replace("-", "_"): value for flag, value in flags.items()})
    for message in messages:
        check_inputs(validate_message(message), issuer)


def invoice(invoice_id: str, priority: str = "batch") -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": "bench", "series": "ABC", "priority": priority,
            "issue_date": date.today().isoformat(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Bench Ltd"},
            "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                       "vat_rate": "20"}]}


# -- the baselines: minimal consumers in this script ---------------------------------------------


async def baseline_worker(design: str, concurrency: int) -> None:
    """A consumer with none of gapless's machinery (no validation, guard, retries, hooks, logs
    or metrics) doing the same database and HTTP work per message: the intake statement, the
    integrator call, the ISSUED statement, the ack.

    * ``bare``  — the intake commits before the call (just-in-time), as gapless does;
    * ``naive`` — intake, call and outcome in ONE transaction: the counter row stays locked
      across the integrator call, so every invoice of the series waits for the one in flight.
    """
    import aiohttp
    from psycopg.rows import namedtuple_row
    from psycopg_pool import AsyncConnectionPool

    from gapless.amqp.topology import declare_topology
    from gapless.integrator.base import MEDIA_JSON
    from gapless.issuing.render import JSON_FORMAT, canonical_json
    from gapless.ledger.conninfo import driver_conninfo
    from gapless.ledger.queries import invoices as q

    settings = Settings()
    # The naive design parks a connection per waiter; PostgreSQL allows only ~100 in all.
    size = min(concurrency, 12) if design == "naive" else min(concurrency, 10)
    pool = AsyncConnectionPool(driver_conninfo(settings.database_url), min_size=size,
                               max_size=size, open=False, kwargs={"autocommit": True})
    await pool.open(wait=True)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128))
    connection = await aio_pika.connect_robust(settings.amqp_url)
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=concurrency)
    [queue] = await declare_topology(channel, settings)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    url = settings.integrator_url + "/invoices"

    async def intake(conn: Any, data: dict[str, Any]) -> Any:
        cursor = conn.cursor(row_factory=namedtuple_row)
        await cursor.execute(q.INTAKE, {
            "invoice_id": data["invoice_id"], "tenant": data["tenant"],
            "series": data["series"], "priority": 1, "payload": json.dumps(data),
            "lease_s": 300, "lock_timeout_ms": 60000, "profile_version": None, "at": None},
            prepare=True)
        return await cursor.fetchone()

    async def call(row: Any, data: dict[str, Any]) -> str:
        body = json.dumps({"tenant": row.tenant, "number": row.number,
                           "invoice_id": row.invoice_id, "uuid": str(row.uuid),
                           "document": data}).encode()
        async with session.post(url, data=body,
                                headers={"content-type": "application/json"}) as response:
            return str(json.loads(await response.read())["ref"])

    def issued(row: Any, ref: str, data: dict[str, Any]) -> dict[str, Any]:
        """The ISSUED statement's parameters, storing the document that was sent, as gapless
        does (the canonical JSON of the message, with its SHA-256)."""
        body = canonical_json(data)
        return {"pk": row.id, "ref": ref, "sha256": hashlib.sha256(body).hexdigest(),
                "media_type": MEDIA_JSON, "format": JSON_FORMAT, "body": body}

    async def handle(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        data = json.loads(message.body)
        if design == "naive":
            async with pool.connection() as conn, conn.transaction():
                row = await intake(conn, data)
                ref = await call(row, data)
                await conn.execute(q.MARK_ISSUED, issued(row, ref, data))
        else:
            async with pool.connection() as conn:
                row = await intake(conn, data)
            ref = await call(row, data)
            async with pool.connection() as conn:
                await conn.execute(q.MARK_ISSUED, issued(row, ref, data), prepare=True)
        await message.ack()

    tasks: set[asyncio.Task[None]] = set()

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        task = asyncio.create_task(handle(message))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    await queue.consume(on_message)
    print(f"{design}_worker_started", file=sys.stderr, flush=True)
    await stop.wait()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await connection.close()
    await session.close()
    await pool.close()


# -- a run: its environment and workers (bench/harness.py) -----------------------------------------


def prepare(design: str, mock_url: str) -> Callable[[dict[str, str]], None]:
    """The design's preparation of a run's environment: the issuer profile of the UBL-TR designs,
    and the routed design's series and recipients."""
    def setup(env: dict[str, str]) -> None:
        if design in UBL_DESIGNS:
            subprocess.run([*GAPLESS, *PROFILE_ARGS], env=env, check=True, capture_output=True,
                           cwd=ROOT)
        if design == "routed":
            route_recipients(env, mock_url)
        if design == "despatch":
            despatch_recipients(env, mock_url)

    return setup


def start_workers(design: str, env: dict[str, str], processes: int,
                  concurrency: int) -> list[Proc]:
    """The design's workers: ``gapless worker`` processes, or this script's baseline loop."""
    if design in GAPLESS_DESIGNS:
        return harness.start_workers(env, processes, concurrency, design)
    return harness.start_workers(
        env, processes, concurrency, design, marker=f"{design}_worker_started",
        command=lambda _port: [sys.executable, str(Path(__file__).resolve()),
                               "--baseline-worker", design, "--concurrency", str(concurrency)])

def claim_ms(procs: list[Proc]) -> float:
    """Mean duration of the claim transaction (lock, number, lease, commit), from /metrics."""
    total = count = 0.0
    for proc in procs:
        page = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10).text
        for line in page.splitlines():
            if line.startswith("gapless_worker_reservation_seconds_sum"):
                total += float(line.split()[-1])
            elif line.startswith("gapless_worker_reservation_seconds_count"):
                count += float(line.split()[-1])
    return 1000 * total / count if count else float("nan")


class Run(NamedTuple):
    """One measured window of :func:`throughput_run`."""

    #: Invoices issued per second.
    rate: float
    #: RSS of the first worker, MB.
    rss: float
    #: Mean claim transaction, ms (gapless designs).
    claim: float
    #: The workers' CPU ms per issued invoice.
    cpu_ms: float
    #: CPU ms per issued invoice of every role on the machine (harness.cpu_ms_per_item).
    roles: dict[str, float]


def throughput_run(design: str, mock_url: str, processes: int, concurrency: int,
                   latency_s: float, warmup: float, window: float, *,
                   extra: dict[str, str] | None = None,
                   database: Callable[[str], AbstractContextManager[str]] = bench_database,
                   label: str | None = None) -> Run:
    """Issued per second over the window, RSS MB of the first worker, mean claim transaction
    ms, the workers' CPU ms per issued invoice and every role's (:class:`Run`). ``extra``,
    ``database``: see :func:`environment`."""
    ideal = concurrency * processes / latency_s
    # Enough backlog that the queue never runs dry during warm-up + window.
    expected = 1 / latency_s if design == "naive" else ideal
    backlog = min(40_000, int(expected * (warmup + window) * 1.5) + 50)
    with environment(f"{label or design}{processes}x{concurrency}", mock_url, extra=extra,
                     database=database, setup=prepare(design, mock_url)) as env:
        asyncio.run(publish(env, backlog_of(design, backlog)))
        procs = start_workers(design, env, processes, concurrency)
        pids = [proc.pid for proc in procs]
        try:
            time.sleep(warmup)  # a benchmark measures wall time; the warm-up is not a sync
            first = asyncio.run(issued_count(env))
            roles_first = cpu_by_role(pids)
            cpu_first = sum(proc.cpu_s() for proc in procs)
            started = time.perf_counter()
            time.sleep(window)
            cpu = sum(proc.cpu_s() for proc in procs) - cpu_first
            roles_last = cpu_by_role(pids)
            last = asyncio.run(issued_count(env))
            elapsed = time.perf_counter() - started
            rss = procs[0].rss_mb()
            claim = claim_ms(procs) if design in GAPLESS_DESIGNS else float("nan")
        finally:
            for proc in procs:
                proc.stop()
        if last >= backlog:
            print(f"warning: {design} {processes}x{concurrency} ran out of backlog",
                  file=sys.stderr)
        cpu_ms = 1000 * cpu / (last - first) if last > first else float("nan")
        return Run((last - first) / elapsed, rss, claim, cpu_ms,
                   cpu_ms_per_item(roles_first, roles_last, last - first))


def roles_row(design: str, runs: list[Run]) -> tuple[str, ...]:
    """A row of the system-wide table: the median CPU ms per invoice of each role."""
    return (design, *(f"{median([run.roles[role] for run in runs]):.2f}"
                      for role in (*CPU_ROLES, "total")))


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def user_latency_run(mock_url: str, backlog: int, priority: str) -> float:
    """Seconds from publishing one message behind ``backlog`` batch messages to its ISSUED."""
    with environment(f"prio{priority}", mock_url) as env:
        asyncio.run(publish(env, [invoice(f"b-{i}") for i in range(backlog)]))
        procs = start_workers("gapless", env, 1, 8)
        try:
            return asyncio.run(_publish_and_wait(env, invoice("probe", priority=priority)))
        finally:
            for proc in procs:
                proc.stop()


async def _publish_and_wait(env: dict[str, str], message: dict[str, Any]) -> float:
    async with Publisher(settings_of(env)) as publisher:
        started = time.perf_counter()
        await publisher.publish(message)
    return await wait_issued(env, message["invoice_id"], started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", default="8,32,64")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="Runs per design and cell (interleaved; the table gives medians).")
    parser.add_argument("--no-naive", action="store_true", help="Skip the naive design.")
    parser.add_argument("--no-mixed", action="store_true",
                        help="Skip the UBL-TR run with the mix of document kinds.")
    parser.add_argument("--no-routed", action="store_true",
                        help="Skip the UBL-TR run with routing (e-Fatura / e-Arşiv chosen per "
                             "customer before the seal, recipient cache warm).")
    parser.add_argument("--no-despatch", action="store_true",
                        help="Skip the dispatch-note run (notes routed to e-İrsaliye aliases or "
                             "GİB's box, recipient cache warm).")
    parser.add_argument("--baseline-worker", choices=("bare", "naive"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    if args.baseline_worker:
        asyncio.run(baseline_worker(args.baseline_worker, concurrencies[0]))
        return
    configure_logging("console", "warning")
    latency_s = args.latency_ms / 1000
    rows = []
    mixed_rows = []
    mixed_goal: str | None = None
    routed_rows = []
    routed_goal: str | None = None
    despatch_rows = []
    despatch_goal: str | None = None
    rss_64: float | None = None
    system_rows = []
    with mock_integrator(args.latency_ms) as mock_url:
        for processes in (int(p) for p in args.processes.split(",")):
            for concurrency in concurrencies:
                ideal = concurrency * processes / latency_s
                run = [processes, concurrency, latency_s, args.warmup, args.window]
                # Each design runs --repeat times, the designs interleaved round by round, so
                # that a passing load hits them alike; the table gives medians.
                runs: dict[str, list[Run]] = {
                    "gapless": [], "ubl": [], "bare": []}
                if not args.no_mixed:
                    runs["mixed"] = []
                if not args.no_routed:
                    runs["routed"] = []
                if not args.no_despatch:
                    runs["despatch"] = []
                for _ in range(args.repeat):
                    for design, results in runs.items():
                        results.append(throughput_run(design, mock_url, *run))
                system_rows += [(processes, concurrency, *roles_row(design, results))
                                for design, results in runs.items()]
                gapless, rss, claim, cpu_ms = (median([r[i] for r in runs["gapless"]])
                                               for i in range(4))
                ubl, ubl_cpu_ms = (median([r[i] for r in runs["ubl"]]) for i in (0, 3))
                bare, bare_cpu_ms = (median([r[i] for r in runs["bare"]]) for i in (0, 3))
                cpu_range = spread([r[3] for r in runs["gapless"]])
                bare_cpu_range = spread([r[3] for r in runs["bare"]])
                naive = (float("nan") if args.no_naive
                         else throughput_run("naive", mock_url, *run)[0])
                if concurrency == 64 and processes == 1:
                    rss_64 = rss
                rows.append((processes, concurrency, f"{ideal:.0f}", f"{gapless:.1f}",
                             f"{gapless / ideal:.2f}", f"{bare:.1f}", f"{gapless / bare:.2f}",
                             f"{cpu_ms:.2f}", cpu_range, f"{bare_cpu_ms:.2f}", bare_cpu_range,
                             f"{ubl:.1f}", f"{ubl_cpu_ms:.2f}", f"{naive:.1f}", f"{claim:.1f}"))
                mixed = float("nan")
                if not args.no_mixed:
                    mixed, mixed_cpu_ms = (median([r[i] for r in runs["mixed"]]) for i in (0, 3))
                    mixed_rows.append((
                        processes, concurrency, f"{ideal:.0f}", f"{bare:.1f}", f"{ubl:.1f}",
                        f"{ubl / ideal:.2f}", f"{ubl_cpu_ms:.2f}",
                        spread([r[3] for r in runs["ubl"]]),
                        f"{mixed:.1f}", f"{mixed / ideal:.2f}", f"{mixed_cpu_ms:.2f}",
                        spread([r[3] for r in runs["mixed"]]),
                        " ".join(f"{r[0]:.1f}" for r in runs["mixed"])))
                    if (processes, concurrency) == (2, 32):
                        verdict = "met" if mixed / ideal >= MIXED_GOAL else "NOT met"
                        mixed_goal = (f"goal: mixed kinds at 2 processes × 32 in flight ≥ "
                                      f"{MIXED_GOAL:g} of the ideal {ideal:.0f}/s: {verdict} "
                                      f"({mixed:.1f}/s = {mixed / ideal:.2f}; bare loop "
                                      f"{bare:.1f}/s, UBL-TR plain sales {ubl:.1f}/s, gapless "
                                      f"JSON {gapless:.1f}/s in the same run)")
                if not args.no_routed:
                    routed, routed_cpu_ms = (median([r[i] for r in runs["routed"]])
                                             for i in (0, 3))
                    routed_rows.append((
                        processes, concurrency, f"{ideal:.0f}", f"{bare:.1f}", f"{ubl:.1f}",
                        f"{ubl_cpu_ms:.2f}", f"{routed:.1f}", f"{routed / ideal:.2f}",
                        f"{routed_cpu_ms:.2f}", spread([r[3] for r in runs["routed"]]),
                        " ".join(f"{r[0]:.1f}" for r in runs["routed"])))
                    if (processes, concurrency) == (2, 32):
                        verdict = "met" if routed / ideal >= MIXED_GOAL else "NOT met"
                        routed_goal = (f"goal: routing on (cache warm) at 2 processes × 32 in "
                                       f"flight ≥ {MIXED_GOAL:g} of the ideal {ideal:.0f}/s: "
                                       f"{verdict} ({routed:.1f}/s = {routed / ideal:.2f}; "
                                       f"UBL-TR plain sales without routing {ubl:.1f}/s, bare "
                                       f"loop {bare:.1f}/s in the same run)")
                if not args.no_despatch:
                    notes, notes_cpu_ms = (median([r[i] for r in runs["despatch"]])
                                           for i in (0, 3))
                    despatch_rows.append((
                        processes, concurrency, f"{ideal:.0f}", f"{bare:.1f}", f"{ubl:.1f}",
                        f"{ubl_cpu_ms:.2f}", f"{notes:.1f}", f"{notes / ideal:.2f}",
                        f"{notes_cpu_ms:.2f}", spread([r[3] for r in runs["despatch"]]),
                        " ".join(f"{r[0]:.1f}" for r in runs["despatch"])))
                    if (processes, concurrency) == (2, 32):
                        verdict = "met" if notes / ideal >= DESPATCH_GOAL else "NOT met"
                        despatch_goal = (f"goal: dispatch notes at 2 processes × 32 in flight "
                                         f"≥ {DESPATCH_GOAL:g} of the ideal {ideal:.0f}/s: "
                                         f"{verdict} ({notes:.1f}/s = {notes / ideal:.2f}; "
                                         f"UBL-TR plain sales {ubl:.1f}/s, bare loop "
                                         f"{bare:.1f}/s in the same run)")
                print(f"  {processes}x{concurrency}: gapless {gapless:.1f}/s, UBL-TR {ubl:.1f}/s, "
                      f"mixed kinds {mixed:.1f}/s, bare {bare:.1f}/s, naive {naive:.1f}/s",
                      file=sys.stderr, flush=True)
        user = user_latency_run(mock_url, args.backlog, "user")
        batch = user_latency_run(mock_url, args.backlog, "batch")
    designs = "gapless, UBL-TR, bare" if args.no_mixed else "gapless, UBL-TR, mixed kinds, bare"
    print(f"machine: {machine()}; mock latency {args.latency_ms:g} ms; warm-up {args.warmup:g} s, "
          f"window {args.window:g} s; {designs} each run {args.repeat} times per "
          f"cell, interleaved (medians; CPU range min–max)\n")
    print_table("Issued invoices per second (higher is better) and worker CPU per invoice",
                ["processes", "in flight", "ideal/s", "gapless/s", "gapless÷ideal", "bare/s",
                 "gapless÷bare", "gapless CPU ms/invoice", "gapless CPU range",
                 "bare CPU ms/invoice", "bare CPU range",
                 "UBL-TR/s", "UBL-TR CPU ms/invoice", "naive/s", "gapless intake ms"], rows)
    print_table("Worker memory and priority",
                ["measure", "value"],
                [("worker RSS at concurrency 64 (MB, goal < 150)",
                  f"{rss_64:.0f}" if rss_64 is not None else "not run"),
                 (f"user message behind {args.backlog} batch messages: latency (s)",
                  f"{user:.2f}"),
                 ("same message as batch, behind the same backlog (s)", f"{batch:.2f}")])
    print_table("System-wide CPU per issued invoice, ms (medians): every process on the machine "
                "by role; other = the machine's busy time the roles do not explain (this "
                "script, the kernel, backends that exited)",
                ["processes", "in flight", "design", *CPU_ROLES, "total"], system_rows)
    if mixed_rows:
        mix = ", ".join(f"{name} {weight}" for name, _, weight in KIND_WEIGHTS)
        print_table("UBL-TR documents: plain sales against the mix of document kinds (issued "
                    "per second, worker CPU ms per invoice)",
                    ["processes", "in flight", "ideal/s", "bare/s", "UBL-TR plain/s",
                     "plain÷ideal", "plain CPU ms/invoice", "plain CPU range", "mixed kinds/s",
                     "mixed÷ideal", "mixed CPU ms/invoice", "mixed CPU range", "mixed runs/s"],
                    mixed_rows)
        print(f"mixed kinds: gapless.demo.samples with kinds=True, weights {mix} (of 100; IHRACAT "
              "is the export profile, KAMU the public-sector one); every message checked with "
              "check_ubl_inputs before it is published")
        if mixed_goal:
            print(mixed_goal)
    if routed_rows:
        print_table("UBL-TR plain sales, routed before the seal (no series or profile in the "
                    "messages; half the customers e-Fatura users; recipient cache warm) against "
                    "the same sales without routing",
                    ["processes", "in flight", "ideal/s", "bare/s", "unrouted/s",
                     "unrouted CPU ms/invoice", "routed/s", "routed÷ideal",
                     "routed CPU ms/invoice", "routed CPU range", "routed runs/s"], routed_rows)
        if routed_goal:
            print(routed_goal)
    if despatch_rows:
        print_table("Dispatch notes (e-İrsaliye DespatchAdvice, routed to the customer's "
                    "e-İrsaliye alias or GİB's box; recipient cache warm) against UBL-TR plain "
                    "sales",
                    ["processes", "in flight", "ideal/s", "bare/s", "UBL-TR plain/s",
                     "plain CPU ms/invoice", "notes/s", "notes÷ideal", "notes CPU ms/note",
                     "notes CPU range", "notes runs/s"], despatch_rows)
        if despatch_goal:
            print(despatch_goal)
    print(json.dumps({"rows": rows, "mixed_rows": mixed_rows, "routed_rows": routed_rows,
                      "despatch_rows": despatch_rows, "system_rows": system_rows,
                      "rss_64": rss_64, "user_s": user, "batch_s": batch}))


if __name__ == "__main__":
    main()
