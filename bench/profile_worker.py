"""Profile: where a worker's CPU goes per invoice, under a backlog, grouped by library.

    .venv/bin/python bench/profile_worker.py [--concurrency 32] [--latency-ms 200]
                                             [--seconds 15] [--design gapless|ubl|mixed|routed]

Everything real: a fresh database, a fresh queue prefix, ``gapless mock-integrator`` at a fixed
latency, one ``gapless worker`` process. A backlog is published first; then py-spy samples the
worker (``py-spy record --format raw``, 250 samples/s, idle frames excluded) while it drains.
Every sample's stack is attributed to the innermost frame that belongs to a known library
(sqlalchemy, psycopg, httpx/httpcore, aio-pika/aiormq/pamqp, structlog, pydantic, …), or to
gapless's own code, or to the event loop. The table shows each group's share of the samples and
the CPU milliseconds per issued invoice that share stands for (the worker's CPU time over the
window, from /proc, divided by the invoices issued in the window); the first line splits that
time into user and system (kernel) milliseconds per invoice.

Needs py-spy (``pip install py-spy``) and permission to ptrace the worker (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    GAPLESS,
    Proc,
    environment,
    issued_count,
    machine,
    mock_integrator,
    print_table,
    publish,
)
from bench.issue import GAPLESS_DESIGNS, backlog_of, prepare
from gapless.logging import configure_logging

#: (group, substrings of a frame's file path), first match wins, innermost frame first.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sqlalchemy", ("sqlalchemy/",)),
    ("psycopg", ("psycopg/", "psycopg_binary/", "psycopg_pool/")),
    ("httpx/httpcore", ("httpx/", "httpcore/", "h11/", "anyio/", "sniffio/")),
    ("aiohttp", ("aiohttp/", "yarl/", "multidict/")),
    ("aio-pika/aiormq/pamqp", ("aio_pika/", "aiormq/", "pamqp/")),
    ("structlog/logging", ("structlog/", "logging/")),
    ("pydantic", ("pydantic/", "pydantic_core/")),
    ("tenacity/pybreaker", ("tenacity/", "pybreaker")),
    ("prometheus", ("prometheus_client/",)),
    ("json", ("json/",)),
    ("lxml/documents", ("lxml/", "gapless/documents/")),
    ("gapless", ("gapless/", "worker/", "recovery/")),
    ("event loop", ("asyncio/", "uvloop/", "selectors.py", "ssl.py")),
)


def group_of(stack: str) -> str:
    """The group of a collapsed stack (frames separated by ';', outermost first)."""
    for frame in reversed(stack.split(";")):
        for name, needles in GROUPS:
            if any(needle in frame for needle in needles):
                return name
    return "other"


def breakdown(raw: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack and samples.isdigit():
            counts[group_of(stack)] += int(samples)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--label", default="", help="Shown in the table's title.")
    parser.add_argument("--design", choices=(*GAPLESS_DESIGNS, "bare"), default="gapless",
                        help="The messages (bench/issue.py's designs): minimal JSON documents, "
                        "UBL-TR plain sales, mixed kinds, routed plain sales, dispatch notes; "
                        "or bench/issue.py's bare loop on the JSON documents, to compare.")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("bench/profile_worker.py needs py-spy: pip install py-spy")
    configure_logging("console", "warning")
    ideal = args.concurrency / (args.latency_ms / 1000)
    backlog = int(ideal * (args.warmup + args.seconds) * 1.5) + 100
    raw = Path(tempfile.mkdtemp(prefix="gapless-profile-")) / "worker.txt"
    with mock_integrator(args.latency_ms) as mock_url, \
            environment("profile", mock_url) as env:
        bare = args.design == "bare"
        design = "gapless" if bare else args.design
        prepare(design, mock_url)(env)
        asyncio.run(publish(env, backlog_of(design, backlog)))
        command = ([sys.executable, str(Path(__file__).resolve().parent / "issue.py"),
                    "--baseline-worker", "bare"] if bare else [*GAPLESS, "worker"])
        worker = Proc([*command, "--concurrency", str(args.concurrency)], env, "profile-worker")
        try:
            worker.wait_for("bare_worker_started" if bare else "worker_started")
            time.sleep(args.warmup)  # wall-clock warm-up of a benchmark, not a synchronisation
            first, split_first = asyncio.run(issued_count(env)), worker.cpu_split()
            started = time.perf_counter()
            subprocess.run([py_spy, "record", "--pid", str(worker.proc.pid), "--rate", "250",
                            "--duration", str(int(args.seconds)), "--format", "raw",
                            "--output", str(raw), "--nonblocking"],
                           check=True, capture_output=True)
            elapsed = time.perf_counter() - started
            last, split_last = asyncio.run(issued_count(env)), worker.cpu_split()
        finally:
            worker.stop()
    done = last - first
    if done <= 0:
        raise SystemExit("no invoice was issued during the window")
    user, system = (b - a for a, b in zip(split_first, split_last, strict=True))
    cpu = user + system
    cpu_ms = 1000 * cpu / done
    counts = breakdown(raw)
    total = sum(counts.values()) or 1
    rows = [(name, f"{100 * n / total:.1f}", f"{cpu_ms * n / total:.2f}")
            for name, n in counts.most_common()]
    rows.append(("total", "100.0", f"{cpu_ms:.2f}"))
    print(f"machine: {machine()}; design {args.design}; worker concurrency {args.concurrency}, "
          f"mock latency {args.latency_ms:g} ms; {done} invoices issued in {elapsed:.1f} s "
          f"({done / elapsed:.0f}/s, ideal {ideal:.0f}/s); worker CPU {cpu:.2f} s (user "
          f"{1000 * user / done:.2f} ms and system {1000 * system / done:.2f} ms per invoice); "
          f"py-spy samples {total} ({os.path.basename(raw)} kept in {raw.parent})\n")
    title = "Worker CPU per issued invoice by library"
    print_table(f"{title}{f' ({args.label})' if args.label else ''}",
                ["group", "share of samples %", "CPU ms/invoice"], rows)


if __name__ == "__main__":
    main()
