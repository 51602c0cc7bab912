"""Benchmark: how long a single ``POST /v1/invoices`` waits while batches are being ingested.

    .venv/bin/python bench/api_latency.py [--seconds 10] [--rate 20] [--batch-size 1000]
                                          [--batch-connections 2] [--queue-type classic]

A user's click and a backlog upload meet in one API process: the click's POST should not wait
out the validation of a thousand messages. Everything is real and private to the run (the same
environment as ``bench/api.py``: a fresh database, queues of their own, ``gapless api`` with an
all-tenant token, wrk from ``make bench-tools``). One client posts single new invoices, one at a
time at ``--rate`` a second, and times each answer, in two phases of ``--seconds``:

* **alone** — nothing else runs;
* **beside batches** — wrk drives ``POST /v1/invoices/batch`` with ``--batch-size`` new invoices
  a request on ``--batch-connections`` connections for the whole phase.

The table gives each phase's single POSTs (every one must be answered 202) and their latency
(median, 95th and 99th percentile, the slowest), and the batches' invoices a second.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.api import api_environment, batch_shape, run_wrk, wrk_binary, wrk_script
from bench.harness import machine, median, percentile, print_table
from bench.issue import invoice
from gapless.logging import configure_logging


async def probe(base: str, token: str, run: str, seconds: float, rate: float) -> list[float]:
    """Single POSTs of new invoices, one at a time on the ``rate`` schedule; each one's
    latency in milliseconds. Raises if any is not answered 202."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        started = time.perf_counter()
        for n in range(int(seconds * rate)):
            delay = started + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the probe's schedule (pacing, not synchronisation)
            sent = time.perf_counter()
            async with session.post(f"{base}/v1/invoices",
                                    json=invoice(f"{run}-{n}", priority="user")) as answer:
                await answer.read()
                if answer.status != 202:
                    raise SystemExit(f"a single POST was answered {answer.status}")
            latencies.append(1000 * (time.perf_counter() - sent))
    return latencies


def row(phase: str, latencies: list[float], batches: str) -> tuple[str, ...]:
    return (phase, str(len(latencies)), f"{median(latencies):.1f}",
            f"{percentile(latencies, 0.95):.1f}", f"{percentile(latencies, 0.99):.1f}",
            f"{max(latencies):.1f}", batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="Single POSTs a second.")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batch-connections", type=int, default=2)
    parser.add_argument("--queue-type", choices=("classic", "quorum"), default="classic",
                        help="GAPLESS_QUEUE_TYPE of the run (quorum: user work on a queue of "
                        "its own; a single node's quorum queues here)")
    args = parser.parse_args()
    wrk_binary()  # missing: say how to install it before anything starts
    configure_logging("console", "warning")
    with api_environment("warning", extra={"GAPLESS_QUEUE_TYPE": args.queue_type}) as (
            _env, api, token), \
            tempfile.TemporaryDirectory(prefix="gapless-bench-latency-") as temp:
        assert api.url is not None
        shape = batch_shape(api.url)
        if isinstance(shape, str):
            raise SystemExit(shape)
        alone = asyncio.run(probe(api.url, token, f"l{secrets.token_hex(3)}", args.seconds,
                                  args.rate))
        script, out = wrk_script(Path(temp), f"b{secrets.token_hex(3)}", token,
                                 batch=args.batch_size, body_shape=shape)
        with ThreadPoolExecutor(max_workers=1) as pool:
            load = pool.submit(run_wrk, api, script, out, seconds=args.seconds + 2,
                               connections=args.batch_connections,
                               threads=args.batch_connections)
            time.sleep(1.0)  # the batches under way before the probe starts (a warm-up)
            beside = asyncio.run(probe(api.url, token, f"m{secrets.token_hex(3)}",
                                       args.seconds, args.rate))
            run = load.result()
        accepted = run.statuses.get("200", 0) * args.batch_size
        batches = f"{accepted / run.seconds:,.0f} invoices/s"
    print(f"machine: {machine()}; single POSTs at {args.rate:g}/s for {args.seconds:g} s a "
          f"phase; batches of {args.batch_size} on {args.batch_connections} connections; "
          f"{args.queue_type} queues\n")
    print_table("A single POST's latency, ms (lower is better)",
                ["phase", "POSTs", "median", "p95", "p99", "max", "batches beside"],
                [row("alone", alone, "—"), row("beside batches", beside, batches)])


if __name__ == "__main__":
    main()
