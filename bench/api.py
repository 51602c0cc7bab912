"""Benchmark: ingestion through the API — ``POST /v1/invoices`` under an external load generator
(wrk), the API process's CPU per accepted invoice, and the answers checked against the queue.

    .venv/bin/python bench/api.py [--seconds 10] [--connections 64] [--threads 2]
                                  [--sample 200] [--batch-size 1000] [--batch-connections 4]
                                  [--log-level info]

wrk is a Debian package: ``make bench-tools`` installs it (``apt-get install -y wrk``) when it is
missing. Everything else is real and private to the run (bench/harness.py): a fresh database with
series bench/ABC, queues of their own, ``gapless api`` as a subprocess with an all-tenant token.

1. **Single POSTs** — wrk drives ``POST /v1/invoices`` on ``--connections`` connections for
   ``--seconds``; a Lua script gives every request a new ``invoice_id`` (run, wrk thread and a
   counter) in the same valid JSON message (``bench/issue.py``'s), and records the ``invoice_id``
   of every 202. No worker runs meanwhile: every POST is a new invoice (the database lookup finds
   nothing, the message is published with a confirm). Measured: the rate of 202s and the API
   process's CPU time (from /proc) over the run divided by the 202s.
2. **The answers checked** — the run's queues are read to the end: every accepted invoice must be
   queued exactly once (none lost, none twice); a message whose request wrk cut off at the end
   (sent, its answer not awaited) may be queued without a recorded 202, at most one per
   connection, and is counted apart.
3. **Duplicates** — a sample of ``--sample`` accepted messages is issued by a ``gapless worker``
   (mock integrator at no latency), then POSTed again: each must be answered 202 with
   ``published: false`` and the queue must stay empty (no second publish).
4. **Batches** — if the API serves ``POST /v1/invoices/batch`` (its OpenAPI document says so),
   wrk drives it with batches of ``--batch-size`` new invoices; the rate is the invoices queued per
   second, and the queue is read back: no invoice queued twice. Without that route the table says
   "batch endpoint absent".

Goals (bench/goals.toml, ``make bench-check``): ≤ 1.0 ms of API CPU per accepted POST; batches
≥ 10,000 invoices/s; no accepted invoice lost or queued twice; no duplicate published again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aio_pika
import httpx

from bench import harness
from bench.harness import (
    Proc,
    environment,
    issued_count,
    machine,
    mock_integrator,
    print_table,
    publish,
    queue_depth,
    settings_of,
    start_workers,
    wait_until,
)
from bench.issue import invoice
from gapless.amqp.connection import connect_once
from gapless.amqp.topology import declare_topology
from gapless.logging import configure_logging

#: Goals (also in bench/goals.toml, which ``make bench-check`` reads).
CPU_GOAL_MS = 1.0
BATCH_GOAL = 10_000
BATCH_PATH = "/v1/invoices/batch"
#: Where the invoice_id goes in the message of bench/issue.py.
ID_MARK = "@@ID@@"
WRK_MISSING = ("wrk not found: install it with `make bench-tools` (runs `apt-get install -y wrk` "
               "as root), or put a wrk binary on the PATH")
#: How long the queue may take to show the last confirmed publishes, and a worker to issue the
#: duplicate sample.
SETTLE_S = 30.0
ISSUE_S = 120.0


# ------------------------------------------------------------------------------- wrk scripts

#: wrk's Lua script: every request a new invoice_id (run, thread, counter); 202s' ids recorded
#: per thread and, with the other statuses, written by ``done`` as one JSON line to OUT.
LUA = """-- bench/api.py: new invoice_ids on every request (generated)
local run, path, out = "%(run)s", "%(path)s", "%(out)s"
local head, tail = %(head)s, %(tail)s
local items_head, items_sep, items_tail = %(items_head)s, ",", %(items_tail)s
local batch = %(batch)d
local headers = {["Content-Type"] = "application/json",
                 ["Authorization"] = "Bearer %(token)s"}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  generated, accepted, statuses = 0, {}, {}
end

local function one()
  generated = generated + 1
  return head .. run .. "-" .. thread_no .. "-" .. generated .. tail
end

function request()
  if batch == 0 then
    return wrk.format("POST", path, headers, one())
  end
  local items = {}
  for i = 1, batch do items[i] = one() end
  return wrk.format("POST", path, headers,
                    items_head .. table.concat(items, items_sep) .. items_tail)
end

function response(status, headers, body)
  statuses[tostring(status)] = (statuses[tostring(status)] or 0) + 1
  if status == 202 and batch == 0 then
    accepted[#accepted + 1] = string.match(body, '"invoice_id":"([^"]+)"')
  end
end

local function quoted(s) return '"' .. s .. '"' end

function done(summary, latency, requests)
  local file = io.open(out, "w")
  local total, counts, ids = 0, {}, {}
  for _, thread in ipairs(threads) do
    total = total + thread:get("generated")
    for status, n in pairs(thread:get("statuses")) do counts[status] = (counts[status] or 0) + n end
    for _, id in ipairs(thread:get("accepted")) do ids[#ids + 1] = quoted(id) end
  end
  local parts = {}
  for status, n in pairs(counts) do parts[#parts + 1] = quoted(status) .. ":" .. n end
  local e = summary.errors
  file:write('{"requests":', summary.requests, ',"duration_us":', summary.duration,
             ',"generated":', total, ',"statuses":{', table.concat(parts, ","), '}',
             ',"errors":', e.connect + e.read + e.write + e.timeout,
             ',"accepted":[', table.concat(ids, ","), ']}')
  file:close()
end
"""


def lua_string(value: str) -> str:
    """A Lua string literal of ``value`` (JSON's escapes are Lua's for this text)."""
    return json.dumps(value, ensure_ascii=False)


def message_halves() -> tuple[str, str]:
    """The JSON message of bench/issue.py around its invoice_id: what comes before it, after."""
    text = json.dumps(invoice(ID_MARK), separators=(",", ":"), ensure_ascii=False)
    head, tail = text.split(ID_MARK)
    return head, tail


def wrk_script(directory: Path, run: str, token: str, *, batch: int = 0,
               body_shape: tuple[str, str] = ("[", "]")) -> tuple[Path, Path]:
    """The Lua script of a run (single POSTs, or ``batch`` invoices a request wrapped in
    ``body_shape``) and the file its ``done`` writes."""
    head, tail = message_halves()
    out = directory / f"{run}.json"
    script = directory / f"{run}.lua"
    script.write_text(LUA % {
        "run": run, "path": BATCH_PATH if batch else "/v1/invoices", "out": out,
        "head": lua_string(head), "tail": lua_string(tail), "batch": batch,
        "items_head": lua_string(body_shape[0]), "items_tail": lua_string(body_shape[1]),
        "token": token})
    return script, out


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit(WRK_MISSING)
    return found


@dataclass
class WrkRun:
    """What wrk did, and the API's CPU over it."""

    requests: int
    seconds: float
    generated: int
    statuses: dict[str, int]
    errors: int
    accepted: list[str]
    cpu_s: float

    @property
    def non_2xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if not status.startswith("2"))


def run_wrk(api: Proc, script: Path, out: Path, *, seconds: float, connections: int,
            threads: int) -> WrkRun:
    assert api.url is not None
    cpu_before = api.cpu_s()
    result = subprocess.run(
        [wrk_binary(), "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s",
         "--timeout", "10s", "-s", str(script), api.url],
        capture_output=True, text=True, check=False, timeout=seconds + 120)
    cpu = api.cpu_s() - cpu_before
    if result.returncode != 0 or not out.exists():
        raise RuntimeError(f"wrk failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()[-1000:]}")
    data = json.loads(out.read_text())
    return WrkRun(requests=int(data["requests"]), seconds=data["duration_us"] / 1e6,
                  generated=int(data["generated"]),
                  statuses={str(k): int(v) for k, v in data["statuses"].items()},
                  errors=int(data["errors"]), accepted=list(data["accepted"]), cpu_s=cpu)


# ------------------------------------------------------------------------------------ queues


def settled_depth(env: dict[str, str]) -> int:
    """The queue depth once it has stopped moving (the last cut-off requests published)."""
    seen: list[int] = []

    def steady() -> bool:
        seen.append(asyncio.run(queue_depth(env)))
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_until(steady, SETTLE_S, interval=0.5, message="the queue depth to settle")
    return seen[-1]


async def drain(env: dict[str, str], expected: int) -> list[dict[str, Any]]:
    """Read (and ack) ``expected`` messages from the run's work queues; their bodies."""
    settings = settings_of(env)
    connection = await connect_once(settings)
    bodies: list[dict[str, Any]] = []
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queues = await declare_topology(channel, settings)
        done = asyncio.Event()

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            bodies.append(json.loads(message.body))
            await message.ack()
            if len(bodies) >= expected:
                done.set()

        if expected:
            for queue in queues:
                await queue.consume(take)
            await asyncio.wait_for(done.wait(), SETTLE_S + expected / 1000)
    return bodies


# -------------------------------------------------------------------------------- the checks


@dataclass
class Ingestion:
    """The single-POST run and what the queue held after it."""

    run: WrkRun
    queued: int
    lost: int
    twice: int
    unanswered: int
    strays: int

    @property
    def cpu_ms(self) -> float:
        accepted = len(self.run.accepted)
        return 1000 * self.run.cpu_s / accepted if accepted else float("nan")

    @property
    def rate(self) -> float:
        return len(self.run.accepted) / self.run.seconds if self.run.seconds else 0.0


def check_queue(run: WrkRun, bodies: list[dict[str, Any]], prefix: str,
                connections: int) -> Ingestion:
    """Every 202 queued exactly once; messages queued without a recorded 202 must be the
    requests cut off at the end (their ids of this run, at most one per connection)."""
    counts = Counter(str(body.get("invoice_id")) for body in bodies)
    accepted = set(run.accepted)
    lost = sum(1 for invoice_id in accepted if counts[invoice_id] == 0)
    twice = sum(1 for n in counts.values() if n > 1) + (len(run.accepted) - len(accepted))
    extra = [i for i in counts if i not in accepted]
    strays = sum(1 for i in extra if not i.startswith(prefix))
    unanswered = len(extra) - strays
    if unanswered > connections:  # more than the requests in flight at the end: lost answers
        strays += unanswered - connections
        unanswered = connections
    return Ingestion(run, len(bodies), lost, twice, unanswered, strays)


@dataclass
class Duplicates:
    sample: int
    issued: int
    answered: int = 0
    not_published: int = 0
    queued_after: int = 0
    problems: list[str] = field(default_factory=list)


async def replay(base: str, token: str, messages: list[dict[str, Any]],
                 result: Duplicates) -> None:
    """POST every message again (16 at a time); count 202s answered ``published: false``."""
    limit = asyncio.Semaphore(16)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:

        async def one(message: dict[str, Any]) -> None:
            async with limit:
                response = await client.post("/v1/invoices", json=message)
            if response.status_code == 202:
                result.answered += 1
                if response.json().get("published") is False:
                    result.not_published += 1
            elif len(result.problems) < 3:
                result.problems.append(f"{response.status_code} {response.text[:120]}")

        await asyncio.gather(*(one(message) for message in messages))


def check_duplicates(env: dict[str, str], api: Proc, token: str,
                     sample: list[dict[str, Any]]) -> Duplicates:
    """Issue the sample through a worker, then POST it again: no second publish."""
    asyncio.run(publish(env, sample))
    workers = start_workers(env, 1, 32, "api-duplicates")
    try:
        wait_until(lambda: asyncio.run(issued_count(env)) >= len(sample), ISSUE_S,
                   interval=0.2, message=f"{len(sample)} sample invoices issued")
    finally:
        for worker in workers:
            worker.stop()
    result = Duplicates(len(sample), asyncio.run(issued_count(env)))
    assert api.url is not None
    asyncio.run(replay(api.url, token, sample, result))
    result.queued_after = settled_depth(env)
    return result


# ----------------------------------------------------------------------------------- batches


def batch_shape(base: str) -> tuple[str, str] | str:
    """How a batch body wraps its invoices (what comes before them, after), from the API's
    OpenAPI document; or why there is no batch run."""
    try:
        document = httpx.get(f"{base}/openapi.json", timeout=30).json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"batch endpoint unknown (no OpenAPI document: {type(exc).__name__})"
    operation = document.get("paths", {}).get(BATCH_PATH, {}).get("post")
    if operation is None:
        return "batch endpoint absent"
    schema = (operation.get("requestBody", {}).get("content", {})
              .get("application/json", {}).get("schema", {}))
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    if schema.get("type") == "array":
        return "[", "]"
    arrays = [name for name, value in schema.get("properties", {}).items()
              if value.get("type") == "array"]
    if len(arrays) == 1:
        return '{"' + arrays[0] + '":[', "]}"
    return "batch endpoint present, its body's shape not understood (no run)"


@dataclass
class Batches:
    note: str
    run: WrkRun | None = None
    queued: int = 0
    #: Invoices queued more than once, or not of the batch run (read back from the queue).
    twice: int = 0

    @property
    def rate(self) -> float:
        return self.queued / self.run.seconds if self.run and self.run.seconds else float("nan")

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.run.cpu_s / self.queued if self.run and self.queued else float("nan")


def batch_run(env: dict[str, str], api: Proc, token: str, directory: Path,
              args: argparse.Namespace) -> Batches:
    assert api.url is not None
    shape = batch_shape(api.url)
    if isinstance(shape, str):
        return Batches(shape)
    before = settled_depth(env)
    run_id = f"b{secrets.token_hex(3)}"
    script, out = wrk_script(directory, run_id, token, batch=args.batch_size, body_shape=shape)
    run = run_wrk(api, script, out, seconds=args.seconds, connections=args.batch_connections,
                  threads=min(args.threads, args.batch_connections))
    queued = settled_depth(env) - before
    counts = Counter(str(body.get("invoice_id")) for body in asyncio.run(drain(env, queued)))
    twice = sum(1 for invoice_id, n in counts.items()
                if n > 1 or not invoice_id.startswith(f"{run_id}-"))
    return Batches(f"batches of {args.batch_size}", run, queued, twice)


# -------------------------------------------------------------------------------------- main


@dataclass
class Result:
    ingestion: Ingestion
    duplicates: Duplicates
    batches: Batches


@contextmanager
def api_environment(log_level: str | None, *, extra: dict[str, str] | None = None,
                    ) -> Iterator[tuple[dict[str, str], Proc, str]]:
    """A run's environment (bench/harness.py; ``extra``: more settings), the mock integrator
    (no latency, for the duplicate sample's worker) and ``gapless api`` with an all-tenant
    token."""
    token = secrets.token_urlsafe(24)
    with ExitStack() as stack:
        mock_url = stack.enter_context(mock_integrator(None, name="api-mock"))
        env = stack.enter_context(environment("api", mock_url, extra=extra))
        if log_level:
            env["GAPLESS_LOG_LEVEL"] = log_level
        api = harness.start_api(env, token, name="api")
        stack.callback(api.stop)
        yield env, api, token


def measure(args: argparse.Namespace) -> Result:
    """The whole benchmark (also ``make bench-check``'s short run)."""
    wrk_binary()
    with api_environment(args.log_level) as (env, api, token), \
            tempfile.TemporaryDirectory(prefix="gapless-bench-wrk-") as temp:
        directory = Path(temp)
        run_id = f"a{secrets.token_hex(3)}"
        script, out = wrk_script(directory, run_id, token)
        run = run_wrk(api, script, out, seconds=args.seconds, connections=args.connections,
                      threads=args.threads)
        depth = settled_depth(env)
        bodies = asyncio.run(drain(env, depth))
        ingestion = check_queue(run, bodies, f"{run_id}-", args.connections)
        accepted = set(run.accepted)
        sample = [body for body in bodies if body.get("invoice_id") in accepted][:args.sample]
        duplicates = check_duplicates(env, api, token, sample)
        batches = batch_run(env, api, token, directory, args)
    return Result(ingestion, duplicates, batches)


def values(result: Result) -> dict[str, float | str]:
    """The measures ``make bench-check`` judges (keys of bench/goals.toml's api rows)."""
    ingestion, duplicates, batches = result.ingestion, result.duplicates, result.batches
    return {
        "cpu_ms_per_post": ingestion.cpu_ms,
        "posts_per_s": ingestion.rate,
        "lost": float(ingestion.lost),
        "queued_twice": float(ingestion.twice + ingestion.strays),
        "duplicates_published": float((duplicates.answered - duplicates.not_published)
                                      + (duplicates.sample - duplicates.answered)
                                      + duplicates.queued_after),
        "batch_per_s": batches.rate if batches.run else batches.note,
        "batch_queued_twice": float(batches.twice) if batches.run else batches.note,
        # A batch invoice's API CPU against a single POST's, both of this run: the pipelined
        # publish of a batch (one write, confirms awaited together) is what keeps it low.
        "batch_cpu_vs_post": (batches.cpu_ms / ingestion.cpu_ms
                              if batches.run and ingestion.cpu_ms else batches.note),
    }


def report(result: Result, args: argparse.Namespace) -> None:
    ingestion, duplicates, batches = result.ingestion, result.duplicates, result.batches
    run = ingestion.run
    cpu_ok = "met" if ingestion.cpu_ms <= CPU_GOAL_MS else "NOT met"
    print(f"machine: {machine()}; wrk {args.threads} threads × {args.connections} connections "
          f"for {args.seconds:g} s; gapless api (log level {args.log_level or 'info'}), no "
          f"worker running; API CPU from /proc\n")
    errors = f"{run.errors} socket, {run.non_2xx} non-2xx"
    if run.non_2xx:
        errors += " (" + ", ".join(f"{n}× {s}" for s, n in sorted(run.statuses.items())
                                   if not s.startswith("2")) + ")"
    batch_rows: list[tuple[str, str, str]]
    if batches.run is None:
        batch_rows = [("POST /v1/invoices/batch", batches.note,
                       f"≥ {BATCH_GOAL:,} invoices/s: not measured")]
    else:
        verdict = "met" if batches.rate >= BATCH_GOAL else "NOT met"
        batch_rows = [
            (f"POST /v1/invoices/batch ({batches.note}, {args.batch_connections} connections)",
             f"{batches.run.requests:,} requests, {batches.queued:,} invoices queued, "
             f"{batches.run.non_2xx} non-2xx",
             "—"),
            ("batch invoices queued per second", f"{batches.rate:,.0f}",
             f"≥ {BATCH_GOAL:,}: {verdict}"),
            ("batch invoices queued twice, or not of the run", f"{batches.twice}",
             f"0: {'met' if batches.twice == 0 else 'NOT met'}"),
            ("batch API CPU ms per invoice", f"{batches.cpu_ms:.3f}", "—")]
    lost_ok = "met" if ingestion.lost == 0 and ingestion.twice + ingestion.strays == 0 else \
        "NOT met"
    published_again = int(values(result)["duplicates_published"])
    print_table("Ingestion through POST /v1/invoices (wrk), the answers checked against the queue",
                ["measure", "value", "goal"],
                [("requests (wrk)", f"{run.requests:,}", "—"),
                 ("202 accepted", f"{len(run.accepted):,}", "—"),
                 ("errors", errors, "—"),
                 ("accepted per second", f"{ingestion.rate:,.0f}", "—"),
                 ("API CPU ms per accepted invoice", f"{ingestion.cpu_ms:.2f}",
                  f"≤ {CPU_GOAL_MS:g}: {cpu_ok}"),
                 ("queued (read back from the queue)", f"{ingestion.queued:,}", "—"),
                 ("accepted but not queued (lost)", f"{ingestion.lost}", f"0: {lost_ok}"),
                 ("queued twice, or not of this run", f"{ingestion.twice + ingestion.strays}",
                  f"0: {lost_ok}"),
                 ("queued, request cut off by wrk's end (no answer recorded)",
                  f"{ingestion.unanswered}", f"≤ {args.connections}"),
                 ("duplicates: accepted invoices issued, then POSTed again",
                  f"{duplicates.sample} ({duplicates.issued} issued)", "—"),
                 ("duplicates answered 202, published: false",
                  f"{duplicates.not_published} of {duplicates.sample}", "—"),
                 ("duplicates published again (or refused; queue depth after the replay "
                  f"{duplicates.queued_after})", f"{published_again}",
                  f"0: {'met' if published_again == 0 else 'NOT met'}"),
                 *batch_rows])
    for problem in duplicates.problems:
        print(f"duplicate replay answered: {problem}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="wrk's run of single POSTs, and of batches")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sample", type=int, default=200,
                        help="accepted invoices issued, then POSTed again")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batch-connections", type=int, default=4)
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        default=None, help="the API's GAPLESS_LOG_LEVEL (default: its own, info)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    configure_logging("console", "warning")
    report(measure(args), args)


if __name__ == "__main__":
    main()
