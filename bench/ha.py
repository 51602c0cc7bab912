"""Benchmark: gapless on replicated services — quorum queues against classic, the priority promise
in quorum mode, and a synchronous PostgreSQL standby on ÷ off.

    .venv/bin/python bench/ha.py [--latency-ms 200] [--processes 2] [--concurrency 32]
                                 [--warmup 3] [--window 8] [--repeat 2] [--backlog 2000]
                                 [--no-cluster] [--no-standby]

Everything real, side by side in one run (the workers are ``gapless worker`` processes, the
integrator ``gapless mock-integrator`` at a fixed latency):

* **issued/s** at ``processes × concurrency`` in flight: classic mode on the shared broker (the
  baseline), quorum mode on the shared broker (one node: a quorum queue of one member), and
  quorum mode on a private three-node cluster (bench/harness.py: every message
  replicated to a majority before its confirm, every ack too). Ideal = in flight ÷ latency.
  Goal: quorum ≥ 0.8 of the ideal.
* **priority**: one user message published behind a ``--backlog`` of batch messages, one worker
  with 8 in flight: how much of the backlog it overtook (the batch invoices issued after it),
  classic and quorum (on the cluster). Goal: ≥ 0.9 overtaken.
* **synchronous standby on ÷ off** (bench/harness.py: a private primary with a streaming
  standby, synchronous or not): claims/s on one series (the worker's claim statement, from 1
  and from 16 connections) and issued/s of the workers with the database on the pair. Goal:
  on ÷ off ≥ 0.8.

The private servers live in temp dirs on free ports and are removed afterwards; the shared ones
are only used, never reconfigured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.harness import (
    PrivatePostgresPair,
    PrivateRabbitCluster,
    environment,
    issued_before,
    machine,
    median,
    mock_integrator,
    print_table,
    publish,
    settings_of,
    start_workers,
    wait_issued,
)
from bench.issue import invoice, throughput_run
from bench.reserve import run_path
from gapless.amqp.publisher import Publisher
from gapless.ledger.database import Database, make_engine
from gapless.ledger.series import add_series
from gapless.logging import configure_logging
from gapless.numbers import build_series_spec

QUORUM = {"GAPLESS_QUEUE_TYPE": "quorum"}


# ------------------------------------------------------------------------------ private servers


@contextlib.contextmanager
def private_cluster() -> Iterator[str]:
    """A private three-node RabbitMQ cluster; its comma-separated node URLs."""
    cluster = PrivateRabbitCluster(3)
    try:
        cluster.start()
        yield cluster.amqp_url
    finally:
        cluster.close()


@contextlib.contextmanager
def private_pair(*, synchronous: bool) -> Iterator[PrivatePostgresPair]:
    pair = PrivatePostgresPair(synchronous=synchronous)
    try:
        pair.start()
        yield pair
    finally:
        pair.close()


def pair_database(pair: PrivatePostgresPair) -> Callable[[str], AbstractContextManager[str]]:
    """``database(label)`` for :func:`bench.harness.environment`: a fresh database on the pair,
    cloned from its migrated template, as the multi-host URL."""

    @contextlib.contextmanager
    def database(label: str) -> Iterator[str]:
        name = f"gapless_bench_{label}_{uuid.uuid4().hex[:8]}"
        url = pair.clone_template(name)
        try:
            yield url
        finally:
            pair.drop_database(name)

    return database


# ------------------------------------------------------------------------------------ measuring


def issued_per_s(label: str, mock_url: str, args: argparse.Namespace, *,
                 extra: dict[str, str] | None = None, database: Any = None) -> float:
    """Median issued/s of ``--repeat`` runs at processes × concurrency (on ``database``, default
    a fresh one on the shared server)."""
    results = []
    more = {} if database is None else {"database": database}
    for _ in range(args.repeat):
        rate, *_ = throughput_run(
            "gapless", mock_url, args.processes, args.concurrency, args.latency_ms / 1000,
            args.warmup, args.window, extra=extra, label=label, **more)
        results.append(rate)
    return median(results)


def overtaken(mock_url: str, backlog: int, *, extra: dict[str, str] | None = None) -> tuple[
        float, float]:
    """(share of the backlog the user message overtook, seconds to its ISSUED)."""
    with environment("prio", mock_url, extra=extra) as env:
        asyncio.run(publish(env, [invoice(f"b-{i}") for i in range(backlog)]))
        procs = start_workers(env, 1, 8, "prio")
        try:
            seconds = asyncio.run(_publish_probe(env))
            before = asyncio.run(issued_before(env, "probe"))
        finally:
            for proc in procs:
                proc.stop()
    return 1 - before / backlog, seconds


async def _publish_probe(env: dict[str, str]) -> float:
    async with Publisher(settings_of(env)) as publisher:
        started = time.perf_counter()
        await publisher.publish(invoice("probe", priority="user"))
    return await wait_issued(env, "probe", started)


async def claims_per_s(url: str, connections: int, series: int, seconds: float,
                       repeat: int) -> float:
    """The worker's claim statement from ``connections`` connections spread over ``series``
    series, claims/s in all: the median of ``repeat`` runs of ``seconds``."""
    codes = [f"C{n:02d}" for n in range(series)]
    engine = make_engine(url, actor="bench", pool_size=connections)
    try:
        for code in codes:
            await add_series(Database.borrowing(engine), build_series_spec("bench", code))
        with psycopg.connect(url, autocommit=True) as conn:
            for code in codes:
                conn.execute("INSERT INTO invoices (invoice_id, tenant, series, payload) "
                             "SELECT %s || '-' || g, 'bench', %s, '{}'::jsonb "
                             "FROM generate_series(1, %s) g", (code, code, 100_000 // series))
        rates = []
        for _ in range(repeat):
            results = await asyncio.gather(*(
                run_path(engine, "claim", connections // series, seconds, code)
                for code in codes))
            rates.append(sum(rate for rate, _ in results))
        return median(rates)
    finally:
        await engine.dispose()


# ---------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--claim-seconds", type=float, default=5.0)
    parser.add_argument("--claim-repeat", type=int, default=3)
    parser.add_argument("--no-queues", action="store_true",
                        help="Skip the queue measurements (only the standby's).")
    parser.add_argument("--no-cluster", action="store_true",
                        help="Skip the private three-node RabbitMQ cluster.")
    parser.add_argument("--no-standby", action="store_true",
                        help="Skip the private primary + standby.")
    args = parser.parse_args()
    configure_logging("console", "warning")
    print(machine())
    ideal = args.processes * args.concurrency / (args.latency_ms / 1000)
    shape = f"{args.processes} × {args.concurrency}"

    with mock_integrator(args.latency_ms) as mock_url:
        if not args.no_queues:
            queues(mock_url, args, ideal, shape)
        if not args.no_standby:
            standby(mock_url, args, shape)


def queues(mock_url: str, args: argparse.Namespace, ideal: float, shape: str) -> None:
    """issued/s classic ÷ quorum (one node, three), and the user message behind a backlog."""
    rows: list[list[object]] = []
    classic = issued_per_s("classic", mock_url, args)
    rows.append(["classic, one node (baseline)", f"{classic:.1f}", f"{classic / ideal:.2f}"])
    quorum = issued_per_s("quorum", mock_url, args, extra=QUORUM)
    rows.append(["quorum, one node", f"{quorum:.1f}", f"{quorum / ideal:.2f}"])
    prio_rows: list[list[object]] = []
    share, seconds = overtaken(mock_url, args.backlog)
    prio_rows.append(["classic, one node", f"{share:.3f}", f"{seconds:.2f}"])
    if not args.no_cluster:
        with private_cluster() as nodes:
            cluster = {**QUORUM, "GAPLESS_AMQP_URL": nodes}
            rate = issued_per_s("quorum3", mock_url, args, extra=cluster)
            rows.append(["quorum, three-node cluster", f"{rate:.1f}",
                         f"{rate / ideal:.2f}"])
            share, seconds = overtaken(mock_url, args.backlog, extra=cluster)
            prio_rows.append(["quorum, three-node cluster", f"{share:.3f}",
                              f"{seconds:.2f}"])
    share, seconds = overtaken(mock_url, args.backlog, extra=QUORUM)
    prio_rows.append(["quorum, one node", f"{share:.3f}", f"{seconds:.2f}"])
    print_table(f"issued/s at {shape} in flight, {args.latency_ms:g} ms per call "
                f"(ideal {ideal:.0f}/s; median of {args.repeat})",
                ["queues", "issued/s", "of ideal"], rows)
    print_table(f"a user message behind {args.backlog} batch messages, one worker × 8",
                ["queues", "backlog overtaken", "s to ISSUED"], prio_rows)


def standby(mock_url: str, args: argparse.Namespace, shape: str) -> None:
    """claims/s and issued/s with the database on a private pair, standby async ÷ sync."""
    standby_rows: list[list[object]] = []
    results: dict[bool, dict[str, float]] = {}
    for synchronous in (False, True):
        with private_pair(synchronous=synchronous) as pair:
            database = pair_database(pair)
            measured: dict[str, float] = {}
            for connections, series in ((1, 1), (16, 1), (16, 8)):
                label = (f"claims/s, {connections} conn. on one series" if series == 1
                         else f"claims/s, {connections} conn. × {series} series")
                with database(f"claims{connections}x{series}") as url:
                    measured[label] = asyncio.run(claims_per_s(
                        url, connections, series, args.claim_seconds, args.claim_repeat))
            measured[f"issued/s, {shape}"] = issued_per_s(
                "standby", mock_url, args, database=database)
            results[synchronous] = measured
    for name in results[True]:
        on, off = results[True][name], results[False][name]
        standby_rows.append([name, f"{off:.1f}", f"{on:.1f}", f"{on / off:.2f}"])
    print_table("synchronous standby on ÷ off (a private primary + its standby)",
                ["measure", "async standby", "sync standby", "on ÷ off"], standby_rows)


if __name__ == "__main__":
    main()
