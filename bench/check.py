"""The regression guard (``make bench-check``): the benchmarks' short runs, each ratio held to its
goal in bench/goals.toml; exit 1 naming every goal missed.

    .venv/bin/python bench/check.py [--only issue,reserve,feed,api,instructions] [--report-only]
                                    [--repeat 2] [--window 8] [--goals bench/goals.toml]

Not a timed test: it measures, as the benchmarks do, with real PostgreSQL, RabbitMQ, the mock
integrator and subprocesses, and compares gapless with a baseline measured in the same run (the
bare loop, the raw counter upsert, the schema without the feed or the chain), so that a machine's
pace moves both sides. Run it on an idle machine. The suites, each the named script's own
functions at a short length:

* **issue**   — bench/issue.py at 2 workers × 32 in flight, mock integrator at 200 ms: gapless
  JSON, UBL-TR plain sales, mixed kinds, routed and dispatch notes in ``--repeat`` rounds, each
  round between two runs of the bare loop (medians); issued/s ÷ ideal, and worker CPU per
  invoice ÷ the bare loop's at the run's time, on the least-squares line through the bare runs.
* **reserve** — bench/reserve.py, ``--reserve-seconds`` a path and connection count.
* **feed**    — bench/feed.py's claim, feed on ÷ off at 1 × 1, 1 × 8 and 16 × 8
  (``--claim-seconds`` a variant and cell).
* **api**     — bench/api.py: wrk on ``POST /v1/invoices``, API CPU per accepted invoice, the
  answers read back from the queue, duplicates, the batch route when the API has it.
* **publish** — bench/publish.py: ``gapless publish --file`` of ``--publish-messages`` lines at
  its default ``--in-flight``, messages/s after start-up, beside ``raw-write`` (the broker's
  ceiling) in the same run (``--publish-repeat`` interleaved runs; medians).
* **instructions** — bench/instructions.py: the worker under valgrind's callgrind, millions of
  instructions per invoice for the bare loop, gapless JSON, UBL-TR, mixed kinds and routed, and
  their ratios. Counted, not timed, so it holds even on a busy machine (the one suite that
  does); without valgrind its rows are notes.

``--report-only`` prints the same table and exits 0 whatever it shows.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from bench.harness import machine, median, mock_integrator
from gapless.logging import configure_logging

GOALS = Path(__file__).resolve().parent / "goals.toml"
#: What a suite reports: a number per key, or a note (a measure that could not be taken here and
#: is not a failure, e.g. "batch endpoint absent").
Values = dict[str, float | str]

# -- the suites: each the benchmark script's own functions at a short length ---------------------

#: bench/issue.py's designs in the check, and the keys they report under.
ISSUE_DESIGNS = {"gapless": "json", "ubl": "ubl", "mixed": "mixed", "routed": "routed",
                 "despatch": "despatch", "bare": "bare"}
PROCESSES, CONCURRENCY, LATENCY_MS = 2, 32, 200.0


def issue_suite(args: argparse.Namespace) -> Values:
    """The designs in ``--repeat`` rounds, each round between two runs of the bare loop (one
    more bare run than rounds). A design's worker CPU is compared with the bare loop's at the
    middle of the design's run, read on the least-squares line through every bare run: the
    machine's pace drifts within a run (a cloud core's sustained speed falls by a quarter over
    minutes), and a bare loop always measured last, or first, would carry that drift into every
    ratio; the line follows the drift without following any one bare run's noise. Medians over
    the rounds."""
    from bench.issue import Run, throughput_run

    latency_s = LATENCY_MS / 1000
    ideal = PROCESSES * CONCURRENCY / latency_s

    def timed(design: str, round_no: int) -> tuple[float, Run]:
        began = time.monotonic()
        run = throughput_run(design, mock_url, PROCESSES, CONCURRENCY, latency_s, args.warmup,
                             args.window)
        progress(f"issue round {round_no}: {design} {run.rate:.1f}/s, {run.cpu_ms:.2f} ms CPU "
                 f"per invoice (workers), {run.roles['total']:.2f} ms (the machine)")
        return (began + time.monotonic()) / 2, run

    designs = [design for design in ISSUE_DESIGNS if design != "bare"]
    bare: list[tuple[float, Run]] = []
    rounds: list[dict[str, tuple[float, Run]]] = []
    with mock_integrator(LATENCY_MS) as mock_url:
        bare.append(timed("bare", 0))
        for round_no in range(1, args.repeat + 1):
            rounds.append({design: timed(design, round_no) for design in designs})
            bare.append(timed("bare", round_no))
    values: Values = {}
    for design, key in ISSUE_DESIGNS.items():
        runs = [run for _, run in bare] if design == "bare" else \
            [measured[design][1] for measured in rounds]
        values[f"{key}_of_ideal"] = median([run.rate for run in runs]) / ideal
        values[f"{key}_cpu_ms"] = median([run.cpu_ms for run in runs])
        values[f"{key}_machine_cpu_ms"] = median([run.roles["total"] for run in runs])
        if design != "bare":
            values[f"{key}_cpu_vs_bare"] = median([
                measured[design][1].cpu_ms / bare_cpu_at(measured[design][0], bare)
                for measured in rounds])
    return values


def bare_cpu_at(at: float, bare: list[tuple[float, Any]]) -> float:
    """The bare loop's CPU per invoice at time ``at``: on the least-squares line through its
    runs ((middle time, run) each); their mean when they were all at one time."""
    times = [t for t, _ in bare]
    cpus = [float(run.cpu_ms) for _, run in bare]
    mean_t, mean_cpu = sum(times) / len(times), sum(cpus) / len(cpus)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return mean_cpu
    slope = sum((t - mean_t) * (c - mean_cpu) for t, c in zip(times, cpus, strict=True)) / spread
    return mean_cpu + slope * (at - mean_t)


def reserve_suite(args: argparse.Namespace) -> Values:
    from bench.reserve import measure

    values: Values = {}
    for cell in asyncio.run(measure(args.reserve_seconds, [1, 4, 16])):
        values[f"gapless_vs_raw_{cell.connections}"] = cell.gapless / cell.raw
        values[f"claim_vs_raw_{cell.connections}"] = cell.claim / cell.raw
    return values


def feed_suite(args: argparse.Namespace) -> Values:
    from bench.feed import alternating, claim_rates, feed_clients, variant_databases

    # Only the variants of the goal: feed on (its client following) and off (no history).
    variants = ("on", "off")
    with variant_databases(variants) as urls, feed_clients(urls):
        cells = asyncio.run(claim_rates(urls, alternating(variants), [(1, 1), (1, 8), (16, 8)],
                                        args.claim_seconds, 0.5, 3000))
    return {f"on_vs_off_{n}x{s}": rate["on"] / rate["off"] for n, s, rate, _ in cells}


def api_suite(args: argparse.Namespace) -> Values:
    from bench import api

    options = api.parse_args(["--seconds", f"{args.api_seconds:g}", "--sample", "100"])
    return api.values(api.measure(options))


def publish_suite(args: argparse.Namespace) -> Values:
    """``gapless publish --file`` after its start-up, beside the broker's ceiling in the same
    run (bench/publish.py's ``raw-write``), at the command's default ``--in-flight``; medians of
    interleaved runs."""
    from bench import publish
    from gapless.cli.publish import DEFAULT_IN_FLIGHT

    runs, start_s = publish.measure(args.publish_messages, args.publish_repeat,
                                    DEFAULT_IN_FLIGHT, designs=("gapless", "raw-write"))
    walls = {design: median([wall for wall, _ in results]) for design, results in runs.items()}
    gapless = publish.after_start_up(args.publish_messages, walls["gapless"], start_s)
    ceiling = args.publish_messages / walls["raw-write"]
    progress(f"publish: gapless {gapless:,.0f}/s after start-up, raw-write {ceiling:,.0f}/s")
    return {"publish_per_s": gapless, "raw_write_per_s": ceiling,
            "publish_vs_raw_write": gapless / ceiling}


def instructions_suite(args: argparse.Namespace) -> Values:
    """The worker's instructions per invoice under callgrind (bench/instructions.py): a cost the
    machine's other load does not move, so a change to the hot path shows even on a busy
    machine. Without valgrind the measures are notes, not failures."""
    import shutil

    from bench.harness import ROOT
    from bench.instructions import measure

    keys = {"gapless": "json_instructions_vs_bare", "ubl": "ubl_instructions_vs_bare",
            "mixed": "mixed_instructions_vs_bare", "routed": "routed_instructions_vs_bare"}
    if shutil.which("valgrind") is None:
        return dict.fromkeys(("bare_instructions_m", *keys.values()),
                             "valgrind absent (apt-get install valgrind)")
    per_invoice: dict[str, float] = {}
    for design in ("bare", *keys):
        per_invoice[design] = measure(design, ROOT, args.instructions_invoices)[0]
        progress(f"instructions: {design} {per_invoice[design] / 1e6:.2f} M per invoice")
    values: Values = {"bare_instructions_m": per_invoice["bare"] / 1e6}
    values.update({key: per_invoice[design] / per_invoice["bare"]
                   for design, key in keys.items()})
    return values


SUITES: dict[str, Callable[[argparse.Namespace], Values]] = {
    "reserve": reserve_suite, "feed": feed_suite, "api": api_suite, "publish": publish_suite,
    "issue": issue_suite, "instructions": instructions_suite}


# -- goals and verdicts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    suite: str
    key: str
    measure: str
    at_least: float | None = None
    at_most: float | None = None

    def describe(self) -> str:
        for sign, bound in (("≥", self.at_least), ("≤", self.at_most)):
            if bound is not None:  # a whole number in the table (a count, a rate) stays whole
                return f"{sign} {bound:,}" if isinstance(bound, int) else f"{sign} {number(bound)}"
        return "—"

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.at_least is not None and value < self.at_least:
            return False
        return not (self.at_most is not None and value > self.at_most)


def load_goals(path: Path) -> list[Goal]:
    """bench/goals.toml's rows (ValueError naming a malformed one)."""
    goals = []
    for index, row in enumerate(tomllib.loads(path.read_text(encoding="utf-8"))["goal"]):
        unknown = set(row) - {"suite", "key", "measure", "at_least", "at_most"}
        if (unknown or row.get("suite") not in SUITES or not row.get("key")
                or not row.get("measure") or ("at_least" in row and "at_most" in row)):
            raise ValueError(f"{path.name}: goal {index + 1} ({row.get('key')!r}) is malformed: "
                             f"suite one of {', '.join(SUITES)}, key, measure, and at most one "
                             "of at_least / at_most")
        goals.append(Goal(**row))
    return goals


def number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


@dataclass(frozen=True)
class Verdict:
    goal: Goal
    value: str
    ok: bool | None  # None: shown, not judged

    @property
    def failed(self) -> bool:
        return self.ok is False


def judge(goal: Goal, values: Values | None, error: str | None) -> Verdict:
    judged = goal.at_least is not None or goal.at_most is not None
    if error is not None:
        return Verdict(goal, f"not measured: {error}", False if judged else None)
    value = (values or {}).get(goal.key)
    if value is None:
        return Verdict(goal, "not measured", False if judged else None)
    if isinstance(value, str):  # a note: what could not be measured here, not a failure
        return Verdict(goal, value, None)
    if goal.at_most == 0 and not math.isnan(value):
        shown = f"{value:.0f}"
    else:
        shown = "nan" if math.isnan(value) else number(value)
    return Verdict(goal, shown, goal.met(value) if judged else None)


def print_verdicts(verdicts: list[Verdict], seconds: float) -> None:
    table = Table(title=f"make bench-check — {machine()}; {seconds:.0f} s")
    for column in ("suite", "measure", "value", "goal", "ok"):
        table.add_column(column, justify="right" if column in ("value", "goal") else "left")
    for verdict in verdicts:
        ok = {True: "[green]ok[/green]", False: "[bold red]FAIL[/bold red]", None: "—"}
        table.add_row(verdict.goal.suite, verdict.goal.measure, verdict.value,
                      verdict.goal.describe(), ok[verdict.ok])
    console = Console(width=max(Console().width, 132))
    console.print(table)


def progress(line: str) -> None:
    print(f"bench-check: {line}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="",
                        help=f"Comma-separated suites ({', '.join(SUITES)}); default: all.")
    parser.add_argument("--report-only", action="store_true",
                        help="Print the table and exit 0 even when a goal is missed.")
    parser.add_argument("--goals", type=Path, default=GOALS)
    parser.add_argument("--repeat", type=int, default=2,
                        help="issue: rounds of the designs, each between two runs of the "
                             "bare loop (medians).")
    parser.add_argument("--warmup", type=float, default=3.0, help="issue: seconds of warm-up.")
    parser.add_argument("--window", type=float, default=8.0,
                        help="issue: seconds measured per design and round.")
    parser.add_argument("--publish-messages", type=int, default=20_000,
                        help="publish: lines in the file gapless publish --file publishes.")
    parser.add_argument("--publish-repeat", type=int, default=3,
                        help="publish: interleaved runs of the command and raw-write (medians).")
    parser.add_argument("--reserve-seconds", type=float, default=2.0,
                        help="reserve: seconds per path and connection count.")
    parser.add_argument("--claim-seconds", type=float, default=3.0,
                        help="feed: seconds per variant and cell (0.5 s slices).")
    parser.add_argument("--api-seconds", type=float, default=5.0,
                        help="api: wrk's run of single POSTs (and of batches).")
    parser.add_argument("--instructions-invoices", type=int, default=300,
                        help="instructions: invoices per design under callgrind.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        goals = load_goals(args.goals)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"bench-check: cannot read the goals: {exc}", file=sys.stderr)
        return 2
    chosen = [name.strip() for name in args.only.split(",") if name.strip()] or list(SUITES)
    unknown = sorted(set(chosen) - set(SUITES))
    if unknown:
        print(f"bench-check: no such suite: {', '.join(unknown)} (have: {', '.join(SUITES)})",
              file=sys.stderr)
        return 2
    configure_logging("console", "warning")
    started = time.monotonic()
    measured: dict[str, Values] = {}
    errors: dict[str, str] = {}
    for name in (suite for suite in SUITES if suite in chosen):
        began = time.monotonic()
        progress(f"{name} …")
        try:
            measured[name] = SUITES[name](args)
        except (Exception, SystemExit) as exc:  # a suite that cannot run fails its goals
            errors[name] = str(exc).strip().splitlines()[0] if str(exc).strip() else \
                type(exc).__name__
            progress(f"{name} failed: {errors[name]}")
        progress(f"{name} done in {time.monotonic() - began:.0f} s")
    verdicts = [judge(goal, measured.get(goal.suite), errors.get(goal.suite))
                for goal in goals if goal.suite in chosen]
    print_verdicts(verdicts, time.monotonic() - started)
    failed = [verdict for verdict in verdicts if verdict.failed]
    for verdict in failed:
        print(f"bench-check: goal missed: {verdict.goal.measure} = {verdict.value}, goal "
              f"{verdict.goal.describe()}", file=sys.stderr)
    if not failed:
        print("bench-check: every goal met", file=sys.stderr)
        return 0
    if args.report_only:
        print(f"bench-check: {len(failed)} goal(s) missed (--report-only: exit 0)",
              file=sys.stderr)
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
