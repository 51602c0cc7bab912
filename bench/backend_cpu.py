"""Benchmark: PostgreSQL's CPU per issued invoice, one worker draining a backlog, checkouts
interleaved — the timed companion of ``bench/backend_instructions.py``.

    .venv/bin/python bench/backend_cpu.py [--invoices 1000] [--rounds 3] [--against PATH]

Everything real, as in ``bench/issue.py``: a fresh database and queue prefix, ``gapless
mock-integrator`` at 200 ms, one ``gapless worker --concurrency 32`` of the checkout. A backlog of
JSON invoices is published and drained; the CPU time of every ``postgres`` process over that
window (the server's own child accounting included, so backends that exit are counted) divided by
the invoices issued is the figure, with the window's rate beside it. With ``--against PATH`` the
two checkouts alternate, round by round (each with its own schema: a bench process migrates its
checkout's). Timed, so it moves with the machine: compare within one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

# The checkout whose harness, schema and worker run: this one, or BENCH_TREE (the other checkout
# of a comparison, run by this script in a child process).
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.harness import (
    GAPLESS,
    ROOT,
    conninfo,
    cpu_seconds,
    environment,
    issued_count,
    machine,
    median,
    mock_integrator,
    print_table,
    publish,
    wait_until,
)
from bench.issue import backlog_of, prepare
from gapless.logging import configure_logging


def server_pid(url: str) -> int | None:
    """The postmaster's pid (its children's CPU is counted in it once they exit)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('data_directory')").fetchone()
    try:
        return int((Path(row[0]) / "postmaster.pid").read_text().split()[0]) if row else None
    except (OSError, ValueError):
        return None


def postgres_cpu_s(postmaster: int | None) -> float:
    """CPU seconds of every live postgres process, plus the exited children of ``postmaster``."""
    pids = subprocess.run(["pgrep", "-x", "postgres"], capture_output=True, text=True,
                          check=False).stdout.split()
    return sum(cpu_seconds(int(pid)) for pid in pids) + (
        cpu_seconds(postmaster, children=True) if postmaster is not None else 0.0)


def one_round(tree: Path, invoices: int) -> tuple[float, float]:
    """(PostgreSQL CPU ms per invoice, invoices/s) of ``tree``'s worker draining a backlog."""
    with mock_integrator(200) as mock_url, environment("pgcpu", mock_url) as env:
        prepare("gapless", mock_url)(env)
        messages = backlog_of("gapless", invoices)
        postmaster = server_pid(env["GAPLESS_DATABASE_URL"])
        worker = subprocess.Popen([*GAPLESS, "worker", "--concurrency", "32"], env=env,
                                  cwd=tree, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            time.sleep(5.0)  # start-up (a benchmark, not a test)
            cpu0, began = postgres_cpu_s(postmaster), time.perf_counter()
            asyncio.run(publish(env, messages))
            wait_until(lambda: asyncio.run(issued_count(env)) >= invoices, 900, interval=0.5,
                       message="every invoice issued")
            cpu1, ended = postgres_cpu_s(postmaster), time.perf_counter()
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    return (cpu1 - cpu0) * 1000 / invoices, invoices / (ended - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--invoices", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path,
                        help="Another checkout of gapless, alternated with this one.")
    args = parser.parse_args()
    configure_logging("console", "warning")
    trees = [("this checkout", ROOT)]
    if args.against is not None:
        trees.append((str(args.against), args.against.resolve()))
    results: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    for round_no in range(1, args.rounds + 1):
        for label, tree in trees:
            if tree == ROOT:
                cpu, rate = one_round(tree, args.invoices)
            else:  # the other checkout's own harness, schema and worker, in a child process
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--one-round",
                     str(args.invoices)], env={**os.environ, "BENCH_TREE": str(tree)},
                    cwd=tree, capture_output=True, text=True, check=True)
                cpu, rate = (float(x) for x in out.stdout.split()[-2:])
            results[label].append((cpu, rate))
            print(f"  round {round_no}, {label}: {cpu:.2f} ms, {rate:.0f}/s", file=sys.stderr,
                  flush=True)
    print(f"machine: {machine()}; one worker --concurrency 32, mock at 200 ms; "
          f"{args.invoices} JSON invoices per round, {args.rounds} rounds\n")
    rows = [(label, ", ".join(f"{cpu:.2f}" for cpu, _ in runs),
             f"{median([cpu for cpu, _ in runs]):.2f}",
             f"{median([rate for _, rate in runs]):.0f}") for label, runs in results.items()]
    print_table("PostgreSQL CPU per issued invoice (ms; lower is better)",
                ["checkout", "each round", "median", "issued/s (median)"], rows)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one-round":
        configure_logging("console", "warning")
        print(*one_round(ROOT, int(sys.argv[2])))
    else:
        main()
