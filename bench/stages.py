"""Benchmark: a worker's CPU stages per invoice, with the CPU's caches warm, cold, and in a worker.

    .venv/bin/python bench/stages.py [--designs gapless,ubl,mixed,routed,despatch]
                                     [--messages 200] [--rounds 3] [--evict-mb 32]
                                     [--worker-seconds 10]

All in one process, no I/O. Each design's messages are ``bench/issue.py``'s backlog
(:func:`bench.issue.backlog_of`), as bytes; each message goes through the stages a worker runs
on it, each stage timed with ``time.process_time``:

* parse    — ``parse_message``: the body decoded and validated against the contract;
* check    — ``check_inputs`` against an issuer profile (UBL-TR designs; the JSON design has
             none), which computes the totals the rendering reuses;
* body     — ``message.body()``: the message's JSON, the draft's stored payload;
* render   — the document's bytes: ``render`` (UBL-TR), or the canonical JSON of the payload;
* document — ``Document.of`` (the SHA-256 of the bytes);
* request  — the integrator's request body (``gapless.integrator.http.request_body``).

Three ways, ``--rounds`` times each, taking turns:

* **in a row** — each stage over every message before the next stage begins (the way a
  batch would run them): a stage's code stays in the CPU's caches from one message to the next,
  and what ``bench/render.py`` measures;
* **warm** — every stage of a message, then the next message's, nothing in between: the
  stages' code and data evict one another, but nothing else runs;
* **cold** — before every message ``--evict-mb`` of memory is copied over, so the caches hold
  none of the stages' code or data (more than a core's L2 cache by default): the cost of a
  stage met after other work, as a worker meets it between the broker, the database and the
  integrator's answers, which run on the same cores.

Then **in a worker**: one ``gapless worker`` (32 in flight, ``gapless mock-integrator`` at 200 ms,
a fresh database and queue prefix, a backlog of the design's messages) whose stages are timed
as it drains the backlog: the worker runs under this script (``--timed-worker``), which replaces
the names the issuing flow calls each stage through with timing wrappers (the check is
``document_problem``, ``check_inputs`` and its one-line reason) and writes their running totals
twice a second; the difference over ``--worker-seconds`` of steady work, divided by the calls,
is each stage's CPU per call there, beside the worker's whole CPU per issued invoice (from
/proc). ``--worker-seconds 0`` skips it.

The table shows the median µs of CPU per message of each stage (over every message of every
round) each way, the mean µs per call in the worker, and the worker's ÷ in a row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    Proc,
    environment,
    issued_count,
    machine,
    mock_integrator,
    print_table,
    publish,
    wait_until,
)
from bench.issue import GAPLESS_DESIGNS, backlog_of, prepare
from bench.render import issuer
from gapless.documents import Issuer, check_inputs, render
from gapless.integrator.base import MEDIA_JSON, MEDIA_XML, Document
from gapless.integrator.http import request_body
from gapless.issuing.render import canonical_json
from gapless.logging import configure_logging
from gapless.message import parse_message

STAGES = ("parse", "check", "body", "render", "document", "request")
NUMBER = "ABC2026000000001"
DOCUMENT_UUID = UUID("3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c")
TZ = "Europe/Istanbul"
#: The worker's run: deliveries in flight, the mock's latency, seconds of warm-up.
CONCURRENCY, LATENCY_MS, WARMUP_S = 32, 200.0, 3.0


class Evictor:
    """Copies ``megabytes`` of memory over another as many (C speed, every cache line
    touched), so that what a stage reads next comes from memory, not from the caches."""

    def __init__(self, megabytes: int) -> None:
        self._source = bytearray(b"\x5a" * (megabytes << 20))
        self._target = bytearray(megabytes << 20)

    def __call__(self) -> None:
        self._target[:] = self._source


Step = Callable[[dict[str, Any]], None]


def steps(the_issuer: Issuer | None, sealed_at: datetime) -> dict[str, Step]:
    """The stages, each a step on one message's state (its ``body`` to begin with): its UBL-TR
    document under ``the_issuer``, or without one its JSON document."""

    def parse(state: dict[str, Any]) -> None:
        state["message"] = parse_message(state["body"], "application/json")

    def check(state: dict[str, Any]) -> None:
        if the_issuer is not None:
            check_inputs(state["message"], the_issuer)

    def body(state: dict[str, Any]) -> None:
        state["message"].body()

    def make(state: dict[str, Any]) -> None:
        message = state["message"]
        state["made"] = (render(message, number=NUMBER, uuid=DOCUMENT_UUID, sealed_at=sealed_at,
                                tz=TZ, issuer=the_issuer) if the_issuer is not None
                         else canonical_json(message.payload()))

    def document(state: dict[str, Any]) -> None:
        state["document"] = Document.of(
            tenant=state["message"].tenant, number=NUMBER,
            invoice_id=state["message"].invoice_id, uuid=str(DOCUMENT_UUID),
            body=state["made"], media_type=MEDIA_JSON if the_issuer is None else MEDIA_XML,
            format="bench")

    def request(state: dict[str, Any]) -> None:
        request_body(state["document"])

    made = {"parse": parse, "check": check, "body": body, "render": make,
            "document": document, "request": request}
    assert tuple(made) == STAGES
    return made


MODES = ("in a row", "warm", "cold")


def measure(design: str, count: int, rounds: int, evict: Evictor,
            the_issuer: Issuer) -> dict[str, dict[str, float]]:
    """Median µs per message of each stage, in each of :data:`MODES`: ``in a row`` runs a
    stage over every message before the next stage; ``warm`` and ``cold`` run every stage of a
    message before the next message, ``cold`` with the caches emptied before each."""
    bodies = [json.dumps(message, ensure_ascii=False).encode()
              for message in backlog_of(design, count)]
    stages = steps(None if design == "gapless" else the_issuer, datetime.now(UTC))
    clock = time.process_time
    runs: dict[str, dict[str, list[float]]] = {
        mode: {stage: [] for stage in STAGES} for mode in MODES}

    def one_by_one(before: Callable[[], None], times: dict[str, list[float]]) -> None:
        for body in bodies:
            before()
            state = {"body": body}
            for stage, step in stages.items():
                began = clock()
                step(state)
                times[stage].append(clock() - began)

    def in_a_row(times: dict[str, list[float]]) -> None:
        states = [{"body": body} for body in bodies]
        for stage, step in stages.items():
            for state in states:
                began = clock()
                step(state)
                times[stage].append(clock() - began)

    one_by_one(lambda: None, {stage: [] for stage in STAGES})  # imports, caches, the time zone
    for _ in range(rounds):
        in_a_row(runs["in a row"])
        one_by_one(lambda: None, runs["warm"])
        one_by_one(evict, runs["cold"])
    return {mode: {stage: statistics.median(values) * 1e6 for stage, values in times.items()}
            for mode, times in runs.items()}


# -- in a worker ---------------------------------------------------------------------------------

def timed_worker(output: Path, argv: list[str]) -> None:
    """``gapless <argv>`` (a worker) with its stages timed: the issuing flow's names for them
    replaced by wrappers that add up each stage's calls and CPU seconds, written to ``output``
    (JSON, replaced whole) twice a second by a thread of their own."""
    import gapless.integrator.base as base
    import gapless.integrator.http as http
    import gapless.issuing.admission as admission
    import gapless.issuing.render as rendering
    import gapless.message.model as model
    import gapless.worker.flow as flow
    from gapless.cli import main as gapless_main

    totals: dict[str, list[float]] = {stage: [0, 0.0] for stage in STAGES}

    def timed(stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        entry = totals[stage]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                entry[1] += time.process_time() - began
                entry[0] += 1
        return wrapper

    for owner, name, stage in ((flow, "parse_message", "parse"),
                               (admission, "document_problem", "check"),
                               (model.Message, "body", "body"),
                               (rendering, "render", "render"),
                               (rendering, "canonical_json", "render"),
                               (base.Document, "of", "document"),
                               (http, "request_body", "request")):
        function = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
        if isinstance(function, classmethod):
            setattr(owner, name, classmethod(timed(stage, function.__func__)))
        else:
            setattr(owner, name, timed(stage, function))

    def write() -> None:
        while True:
            partial = output.with_suffix(".partial")
            partial.write_text(json.dumps(totals))
            partial.replace(output)
            time.sleep(0.5)

    threading.Thread(target=write, daemon=True, name="stage-totals").start()
    sys.argv = ["gapless", *argv]
    gapless_main()


def in_worker(design: str, seconds: float) -> tuple[dict[str, float], float]:
    """µs of CPU per call of each stage in a worker draining the design's backlog, and the
    worker's whole CPU µs per issued invoice, over ``seconds`` after the warm-up."""
    ideal = CONCURRENCY / (LATENCY_MS / 1000)
    output = Path(tempfile.mkdtemp(prefix="gapless-stages-")) / "stages.json"

    def totals() -> dict[str, list[float]]:
        return json.loads(output.read_text())  # type: ignore[no-any-return]

    with mock_integrator(LATENCY_MS) as mock_url, environment("stages", mock_url) as env:
        prepare(design, mock_url)(env)
        asyncio.run(publish(env, backlog_of(design, int(ideal * (WARMUP_S + seconds) * 1.5))))
        worker = Proc([sys.executable, str(Path(__file__).resolve()), "--timed-worker",
                       str(output), "worker", "--concurrency", str(CONCURRENCY)], env,
                      "stages-worker")
        try:
            worker.wait_for("worker_started")
            time.sleep(WARMUP_S)  # wall-clock warm-up of a benchmark, not a synchronisation
            wait_until(output.exists, 10)
            first, issued_first, cpu_first = totals(), asyncio.run(issued_count(env)), \
                worker.cpu_s()
            time.sleep(seconds)  # the measured window
            last, issued_last, cpu_last = totals(), asyncio.run(issued_count(env)), \
                worker.cpu_s()
        finally:
            worker.stop()
        output.unlink(missing_ok=True)
        output.parent.rmdir()
    issued = issued_last - issued_first
    if issued <= 0:
        raise SystemExit(f"{design}: no invoice was issued during the window")
    per_call = {stage: 1e6 * (last[stage][1] - first[stage][1]) / calls
                for stage in STAGES if (calls := last[stage][0] - first[stage][0]) > 0}
    return per_call, 1e6 * (cpu_last - cpu_first) / issued


def main() -> None:
    if sys.argv[1:2] == ["--timed-worker"]:
        timed_worker(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--designs", default=",".join(GAPLESS_DESIGNS),
                        help=f"Some of {', '.join(GAPLESS_DESIGNS)}.")
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--evict-mb", type=int, default=32)
    parser.add_argument("--worker-seconds", type=float, default=10.0,
                        help="Seconds each design's worker is measured (0: no worker runs).")
    args = parser.parse_args()
    designs = [d for d in args.designs.split(",") if d]
    unknown = sorted(set(designs) - set(GAPLESS_DESIGNS))
    if unknown:
        parser.error(f"unknown designs: {', '.join(unknown)}")
    evict, the_issuer = Evictor(args.evict_mb), issuer()
    configure_logging("console", "warning")
    rows: list[list[Any]] = []
    for design in designs:
        measured = measure(design, args.messages, args.rounds, evict, the_issuer)
        worker, worker_cpu = (in_worker(design, args.worker_seconds) if args.worker_seconds > 0
                              else ({}, float("nan")))
        for stage in (*STAGES, "total"):
            if design == "gapless" and stage == "check":
                continue
            row, warm, cold = ((sum(measured[mode].values()) if stage == "total"
                                else measured[mode][stage]) for mode in MODES)
            there = sum(worker.values()) if stage == "total" else worker.get(stage, float("nan"))
            rows.append([design, stage, f"{row:.1f}", f"{warm:.1f}", f"{cold:.1f}",
                         f"{there:.1f}", f"{there / row:.1f}"])
        rows.append([design, "the worker's whole CPU per invoice", "", "", "",
                     f"{worker_cpu:.0f}", ""])
    print_table(f"{machine()}; {args.messages} messages × {args.rounds} rounds; caches "
                f"emptied by copying {args.evict_mb} MB before each cold message; in a worker: "
                f"{CONCURRENCY} in flight, integrator {LATENCY_MS:g} ms, "
                f"{args.worker_seconds:g} s measured",
                ["design", "stage", "in a row µs", "warm µs", "cold µs", "in a worker µs",
                 "worker ÷ in a row"], rows)


if __name__ == "__main__":
    main()
