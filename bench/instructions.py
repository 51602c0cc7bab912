"""Benchmark: instructions per issued invoice of one worker process, counted by valgrind's
callgrind — a cost that does not depend on what else the machine is doing.

    .venv/bin/python bench/instructions.py [--designs bare,gapless,ubl,mixed,routed]
                                           [--invoices 400] [--against PATH]

Timings on a shared 2-core machine move by ±20 % from run to run (PostgreSQL, RabbitMQ, the mock
and the worker share the cores, and a slower neighbour changes how many events every wake-up of
the worker finds). Instructions do not: the worker runs under callgrind (``--instr-atstart=no``:
start-up uncounted; counting is switched on once it consumes), a backlog of ``--invoices`` is
published and issued through ``gapless mock-integrator`` (200 ms per call), and the count is
dumped when the last one is ISSUED. Everything else is real, as in ``bench/issue.py``, whose
designs and bare loop this script runs (``bare``: the minimal consumer doing the same SQL and
HTTP work with none of gapless's machinery).

The table gives each design's millions of instructions per invoice, its ratio to the bare loop
(the same ratio ``bench/issue.py`` measures in CPU time), and where they go by shared object
(the interpreter — Python code of every library and of gapless —, pydantic-core, the JSON
codec, libpq, OpenSSL's hashing, …). ``--against PATH`` measures a second checkout (e.g. a
worktree at an older commit: ``git worktree add /tmp/base <commit>``) in the same run, design by
design, for an A/B whose difference is the code's alone. Kernel work (system calls, loopback
TCP) is not counted: callgrind sees user space only. Nor are all instructions alike: valgrind
does not offer the CPU's SHA extensions, so OpenSSL hashes with its generic code under it (about
29 instructions a byte): the SHA-256 of a UBL-TR document (6 KB, the ``OpenSSL`` row's 0.17 M)
takes about 5 µs natively — about 0.06 of the bare loop's instructions that cost next to no time.

Needs valgrind (``apt-get install valgrind``). About a minute per design and checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    GAPLESS,
    ROOT,
    environment,
    issued_count,
    machine,
    mock_integrator,
    print_table,
    publish,
    wait_until,
)
from bench.issue import GAPLESS_DESIGNS, backlog_of, prepare
from gapless.logging import configure_logging

DESIGNS = ("bare", *GAPLESS_DESIGNS)
#: OpenSSL's group: hashing, which valgrind runs without the CPU's SHA instructions.
HASHING = "OpenSSL (hashing)"
#: Shared objects grouped for the table, by a substring of their path (first match wins).
OBJECTS: tuple[tuple[str, str], ...] = (
    ("interpreter (Python code)", "libpython"),
    ("pydantic-core", "_pydantic_core"),
    ("json codec", "_json."),
    ("libpq / psycopg", "libpq"),
    ("libpq / psycopg", "psycopg"),
    (HASHING, "libcrypto"),
    ("decimal", "_decimal"),
    ("uvloop", "uvloop"),
    ("aiohttp / multidict / yarl", "aiohttp"),
    ("aiohttp / multidict / yarl", "multidict"),
    ("aiohttp / multidict / yarl", "yarl"),
    ("libc (memory, strings)", "libc.so"),
)
STARTUP_S = 600.0  # start-up under valgrind is slow: imports run uninstrumented but emulated


def group_of(path: str) -> str:
    for name, needle in OBJECTS:
        if needle in path:
            return name
    return "other"


def self_costs(callgrind_out: Path) -> collections.Counter[str]:
    """Self instructions per group of shared objects, from a callgrind output file (its cost
    lines; the inclusive costs of calls are skipped)."""
    names: dict[str, str] = {}
    costs: collections.Counter[str] = collections.Counter()
    current = "other"
    after_calls = False
    for line in callgrind_out.read_text(errors="replace").splitlines():
        if line.startswith(("ob=", "cob=")):
            match = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
            if match is not None and match.group(2):
                names[match.group(1)] = match.group(2)
            if line.startswith("ob="):
                current = group_of(names.get(match.group(1), "") if match else line[3:])
        elif line.startswith("calls="):
            after_calls = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if after_calls:
                after_calls = False  # the call's inclusive cost, counted in its callee
                continue
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                costs[current] += int(fields[1])
    return costs


def worker_command(design: str, tree: Path) -> tuple[list[str], str]:
    """The design's worker as ``tree`` runs it, and the log line that says it consumes."""
    if design == "bare":
        return ([sys.executable, str(tree / "bench" / "issue.py"), "--baseline-worker", "bare",
                 "--concurrency", "32"], "bare_worker_started")
    return [*GAPLESS, "worker", "--concurrency", "32"], "worker_started"


def measure(design: str, tree: Path, invoices: int) -> tuple[float, collections.Counter[str]]:
    """Instructions per invoice of ``design`` in checkout ``tree``, and their groups."""
    out = Path(tempfile.mkdtemp(prefix="gapless-callgrind-"))
    with mock_integrator(200) as mock_url, environment("instr", mock_url) as env:
        prepare(design if design != "bare" else "gapless", mock_url)(env)
        messages = backlog_of(design if design != "bare" else "gapless", invoices)
        command, marker = worker_command(design, tree)
        log = (out / "worker.log").open("wb")
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}/callgrind.%p", *command],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tree)
        try:
            wait_until(lambda: marker in (out / "worker.log").read_text(errors="replace"),
                       STARTUP_S, message=marker)
            subprocess.run(["callgrind_control", "--instr=on", str(proc.pid)], check=True,
                           capture_output=True)
            asyncio.run(publish(env, messages))
            wait_until(lambda: asyncio.run(issued_count(env)) >= invoices, 1800, interval=1.0,
                       message="every invoice issued")
            time.sleep(2.0)  # the last acks (the count is per invoice; a benchmark, not a test)
            subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True,
                           capture_output=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    dumps = sorted(out.glob("callgrind.*.1"))
    if not dumps:
        raise SystemExit(f"no callgrind dump in {out}: see {out}/worker.log")
    costs = self_costs(dumps[0])
    return sum(costs.values()) / invoices, costs


def unhashed(per_invoice: float, costs: collections.Counter[str], invoices: int) -> float:
    """Instructions per invoice without OpenSSL's: under valgrind it hashes with its generic
    code (the CPU's SHA instructions are not offered), 29 instructions a byte that take next to
    no time natively."""
    return per_invoice - costs.get(HASHING, 0) / invoices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--designs", default="bare,gapless,ubl")
    parser.add_argument("--invoices", type=int, default=400)
    parser.add_argument("--against", type=Path,
                        help="Another checkout of gapless, measured design by design too.")
    args = parser.parse_args()
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = sorted(set(designs) - set(DESIGNS))
    if unknown:
        parser.error(f"unknown design(s) {', '.join(unknown)}; choose from {', '.join(DESIGNS)}")
    configure_logging("console", "warning")
    trees = [("this checkout", ROOT)]
    if args.against is not None:
        trees.append((f"against {args.against}", args.against.resolve()))
    results: dict[tuple[str, str], tuple[float, collections.Counter[str]]] = {}
    for design in designs:
        for label, tree in trees:
            results[(design, label)] = measure(design, tree, args.invoices)
            print(f"  {design} ({label}): {results[(design, label)][0] / 1e6:.2f} M "
                  "instructions per invoice", file=sys.stderr, flush=True)
    print(f"machine: {machine()}; worker --concurrency 32, mock latency 200 ms; "
          f"{args.invoices} invoices per run; callgrind, start-up not counted\n")
    rows = []
    for design in designs:
        for label, _ in trees:
            per_invoice, costs = results[(design, label)]
            bare = results.get(("bare", label))
            ratio = f"{per_invoice / bare[0]:.2f}" if bare else "—"
            apart = "—"
            if bare:
                hashed_apart = unhashed(per_invoice, costs, args.invoices)
                apart = f"{hashed_apart / unhashed(*bare, args.invoices):.2f}"
            rows.append((design, label, f"{per_invoice / 1e6:.2f}", ratio, apart))
    print_table("Worker instructions per issued invoice (millions; lower is better)",
                ["design", "checkout", "M instructions/invoice", "÷ bare",
                 "÷ bare, hashing apart"], rows)
    groups = sorted({g for _, costs in results.values() for g in costs},
                    key=lambda g: -sum(costs.get(g, 0) for _, costs in results.values()))
    columns = [f"{design} ({label})" for design in designs for label, _ in trees]
    table = [(group, *(f"{results[(d, lb)][1].get(group, 0) / args.invoices / 1e6:.3f}"
                       for d in designs for lb, _ in trees)) for group in groups]
    print_table("Where they go: millions of instructions per invoice by shared object",
                ["group", *columns], table)
    print(json.dumps({f"{d}|{lb}": per for (d, lb), (per, _) in results.items()}))


if __name__ == "__main__":
    main()
