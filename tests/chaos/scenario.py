"""The chaos runner: the whole system as real processes, a mixed load, faults, then the checker.

One :class:`ChaosRun` owns, for one test database and queue prefix:

- the processes — ``gapless mock-integrator`` (seeded), N ``gapless worker`` and one
  ``gapless recovery`` (:class:`Cluster`), each killable with SIGKILL and restarted;
- the load — valid invoices over several tenants and series (yearly, monthly, daily, never),
  user singles and batch bursts, a share with the always-rejected tax id ``0000000000``, duplicate
  publishes of earlier invoices and a stream of malformed messages (:func:`plan_load`);
- a feed poller following ``events_after`` from cursor 0 for the whole run (:class:`Poller`);
- the faults — worker and recovery kills, RabbitMQ connections of the workers closed
  (``rabbitmqctl close_connection``), their PostgreSQL backends terminated, an integrator outage,
  integrator transient failures, lost responses and latency; after every connection drop the
  consumers must come back and a probe invoice must be issued;
- then heal, settle (with a deadline), stop everything gracefully and hand the history to
  :func:`tests.chaos.checker.check`.

Every random choice comes from one ``random.Random(seed)`` (and the mock's ``--seed``), so a
failing run is described by its knobs. The knobs are environment variables (``make chaos``):
GAPLESS_CHAOS_DURATION, _INVOICES, _WORKERS, _SEED, _FAULTS; defaults are the short CI profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import psycopg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher, PublishUnconfirmed
from gapless.constants import HEADER_DEAD_REASON, dead_queue_name
from gapless.ledger.database import make_engine
from gapless.ledger.feed import events_after
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.chaos.checker import DeadLetter, Expect, FeedRecord, History
from tests.helpers import (
    GaplessProcess,
    await_until,
    ledger,
    text_after,
    today,
    wait_until,
)
from tests.mock_client import MockIntegratorClient

# ------------------------------------------------------------------------------------ the knobs

#: Every fault kind a run can inject; GAPLESS_CHAOS_FAULTS picks a subset.
FAULT_KINDS = ("worker_kill", "recovery_kill", "amqp_drop", "pg_terminate", "outage",
               "transient", "lost_response", "latency", "random_reject", "duplicates",
               "malformed")
#: ``default``: everything but random rejections, so that every invoice without the rejected
#: tax id must end ISSUED (a sharper check than "ISSUED or REJECTED").
DEFAULT_FAULTS = frozenset(FAULT_KINDS) - {"random_reject"}

#: Publishes awaiting their broker confirm at once.
PUBLISH_WINDOW = 64
#: Settling gives up after this long without the backlog shrinking.
SETTLE_STALL_S = 90.0
#: The outage the issue asks for.
OUTAGE_S = 10.0
REJECTED_TAX_ID = "0000000000"


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def parse_faults(spec: str) -> frozenset[str]:
    """``default`` / ``all`` / ``none``, or a comma list of kinds; ``-kind`` removes one.

    E.g. ``default,-outage`` or ``worker_kill,transient``.
    """
    chosen: set[str] = set()
    for raw in (part.strip() for part in spec.split(",")):
        if not raw:
            continue
        if raw in ("default", "all", "none"):
            chosen |= {"default": DEFAULT_FAULTS, "all": set(FAULT_KINDS), "none": set()}[raw]
            continue
        name = raw.removeprefix("-")
        if name not in FAULT_KINDS:
            raise ValueError(f"unknown chaos fault {name!r}; use {', '.join(FAULT_KINDS)}")
        if raw.startswith("-"):
            chosen.discard(name)
        else:
            chosen.add(name)
    return frozenset(chosen)


@dataclass(frozen=True)
class ChaosConfig:
    """One run's knobs. The defaults are the short profile that CI runs (≤ 4 minutes)."""

    duration_s: float = 90.0
    invoices: int = 1200
    workers: int = 3
    seed: int = 7
    faults: frozenset[str] = DEFAULT_FAULTS
    concurrency: int = 8
    #: Worker sending lease and recovery's stuck-after: short, so orphans are settled in-run.
    lease_s: float = 5.0

    @classmethod
    def from_env(cls) -> ChaosConfig:
        return cls(
            duration_s=_env_number("GAPLESS_CHAOS_DURATION", cls.duration_s),
            invoices=int(_env_number("GAPLESS_CHAOS_INVOICES", cls.invoices)),
            workers=int(_env_number("GAPLESS_CHAOS_WORKERS", cls.workers)),
            seed=int(_env_number("GAPLESS_CHAOS_SEED", cls.seed)),
            faults=parse_faults(os.environ.get("GAPLESS_CHAOS_FAULTS", "") or "default"),
        )

    @property
    def load_s(self) -> float:
        """Publishing spreads over this part of the run; faults go on until its end."""
        return self.duration_s * 0.85

    @property
    def settle_cap_s(self) -> float:
        """The longest the backlog may take to drain after the load (at ≥ 5 invoices/s)."""
        return max(120.0, self.invoices / 5)

    @property
    def test_timeout_s(self) -> int:
        return int(self.duration_s + self.settle_cap_s + SETTLE_STALL_S + 180)

    def describe(self) -> str:
        return (f"duration={self.duration_s:g}s invoices={self.invoices} workers={self.workers} "
                f"seed={self.seed} faults={','.join(sorted(self.faults)) or 'none'}")


# ------------------------------------------------------------------------------------- the load

#: (tenant, series, reset): several tenants, every kind of reset.
SERIES = (
    ("chaos-a", "INV", "yearly"),
    ("chaos-a", "DLY", "daily"),
    ("chaos-b", "INV", "monthly"),
    ("chaos-b", "RCP", "never"),
    ("chaos-c", "INV", "yearly"),
    ("chaos-c", "DLY", "daily"),
)
REJECTED_SHARE = 0.03
DUPLICATE_SHARE = 0.05
MALFORMED_SHARE = 0.03
BATCH_SHARE = 0.6  # of valid invoices, published in batch bursts


@dataclass(frozen=True)
class Outgoing:
    """One message to publish."""

    kind: str  # "valid", "duplicate", "malformed"
    key: str  # invoice_id, or the malformed message's message_id
    body: bytes
    content_type: str
    priority: int | None
    tenant: str = ""
    series: str = ""
    expect: Expect = "any"
    malformed: str = ""  # what is wrong with it


def invoice_message(invoice_id: str, tenant: str, series: str, priority: str,
                    tax_id: str, rng: random.Random) -> dict[str, Any]:
    lines = [{"description": f"item {n}", "quantity": str(rng.randint(1, 9)),
              "unit_price": f"{rng.randint(1, 5000)}.{rng.randint(0, 99):02d}",
              "vat_rate": rng.choice(["0", "1", "10", "20"])}
             for n in range(rng.randint(1, 3))]
    return {"invoice_id": invoice_id, "tenant": tenant, "series": series, "priority": priority,
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": tax_id, "name": f"Customer {rng.randint(1, 500)}"},
            "lines": lines}


def malformed_message(n: int, rng: random.Random) -> Outgoing:
    """A message the worker must dead-letter, never crash on nor turn into an invoice."""
    valid = invoice_message(f"malformed-{n}", "chaos-a", "INV", "user", "1234567890", rng)
    kinds: list[tuple[str, bytes, str]] = [
        ("not json", b'{"invoice_id": "x", ', "application/json"),
        ("empty body", b"", "application/json"),
        ("invalid utf-8", b"\xff\xfe\xfa", "application/json"),
        ("json array", b"[1, 2, 3]", "application/json"),
        ("amount as a JSON number", json.dumps(
            {**valid, "lines": [{**valid["lines"][0], "unit_price": 10.5}]}).encode(),
         "application/json"),
        ("no lines", json.dumps({**valid, "lines": []}).encode(), "application/json"),
        ("missing customer", json.dumps(
            {k: v for k, v in valid.items() if k != "customer"}).encode(), "application/json"),
        ("wrong content type", json.dumps(valid).encode(), "text/plain"),
        ("unknown series", json.dumps({**valid, "series": "NOPE"}).encode(),
         "application/json"),
        ("invoice_id not a string", json.dumps({**valid, "invoice_id": 42}).encode(),
         "application/json"),
    ]
    what, body, content_type = kinds[n % len(kinds)]
    return Outgoing("malformed", f"malformed-{n}", body, content_type,
                    rng.choice([None, 1, 4, 9]), malformed=what)


@dataclass(frozen=True)
class Group:
    """Messages published back to back at one moment: a user single or a batch burst."""

    at_s: float
    messages: tuple[Outgoing, ...]


def plan_load(config: ChaosConfig, rng: random.Random) -> list[Group]:
    """The whole load, decided up front from the seed: groups with their publish times."""
    faults = config.faults
    messages: list[list[Outgoing]] = []
    valid: list[Outgoing] = []
    n_malformed = 0
    made = 0
    while made < config.invoices:
        burst = rng.random() < BATCH_SHARE / 20  # bursts of ~20 on average
        size = min(config.invoices - made, rng.randint(5, 35) if burst else 1)
        tenant, series, _ = rng.choice(SERIES)
        priority = "batch" if burst else "user"
        group: list[Outgoing] = []
        for _ in range(size):
            made += 1
            invoice_id = f"chaos{config.seed}-{made:06d}"
            rejected = rng.random() < REJECTED_SHARE
            tax_id = REJECTED_TAX_ID if rejected else str(rng.randint(10**9, 10**10 - 1))
            message = invoice_message(invoice_id, tenant, series, priority, tax_id, rng)
            expect: Expect = "rejected" if rejected else (
                "any" if "random_reject" in faults else "issued")
            outgoing = Outgoing("valid", invoice_id, json.dumps(message).encode(),
                                "application/json", 1 if burst else 4, tenant, series, expect)
            group.append(outgoing)
            valid.append(outgoing)
            if "duplicates" in faults and rng.random() < DUPLICATE_SHARE:
                again = rng.choice(valid)
                group.append(Outgoing("duplicate", again.key, again.body, again.content_type,
                                      rng.choice([1, 4]), again.tenant, again.series,
                                      again.expect))
            if "malformed" in faults and rng.random() < MALFORMED_SHARE:
                n_malformed += 1
                group.append(malformed_message(n_malformed, rng))
        messages.append(group)
    step = config.load_s / max(1, len(messages))
    return [Group(i * step, tuple(group)) for i, group in enumerate(messages)]


# --------------------------------------------------------------------------------- the processes


class Cluster:
    """The gapless processes of one run: N workers and one recovery, killed and restarted."""

    def __init__(self, env: dict[str, str], log_dir: Path, config: ChaosConfig) -> None:
        self.config = config
        self.log_dir = log_dir
        self.env = {
            **env,
            "GAPLESS_LEASE_S": str(config.lease_s),
            # A lost response of the "timeout" kind must not hold a delivery for long.
            "GAPLESS_INTEGRATOR_TIMEOUT_S": "2",
            "GAPLESS_BREAKER_RESET_TIMEOUT_S": "3",
            "GAPLESS_LOG_LEVEL": "info",
        }
        self.workers: list[GaplessProcess] = []
        self.recovery: GaplessProcess | None = None
        self.unexpected_exits: list[str] = []
        #: Workers that exited 1 at start-up because the run terminated their database backend
        #: before they were consuming (the CLI's documented one-line "cannot reach" exit).
        self.startup_exits: list[str] = []
        self.starts: Counter[str] = Counter()
        self._log_offsets: dict[int, int] = {}

    def _start(self, args: list[str], name: str) -> GaplessProcess:
        self.starts[name] += 1
        log_path = self.log_dir / f"{name}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        proc = GaplessProcess(args, self.env, self.log_dir, name)
        self._log_offsets[proc.pid] = offset
        return proc

    def output_of(self, proc: GaplessProcess) -> str:
        """What this process (not its predecessors under the same name) wrote."""
        return text_after(proc.log_path, self._log_offsets.get(proc.pid, 0))

    def start_worker(self, index: int) -> None:
        proc = self._start(["worker", "--concurrency", str(self.config.concurrency),
                            "--shutdown-timeout", "10"], f"worker-{index}")
        if index < len(self.workers):
            self.workers[index].close()
            self.workers[index] = proc
        else:
            self.workers.append(proc)

    def start_recovery(self) -> None:
        if self.recovery is not None:
            self.recovery.close()
        stuck = str(self.config.lease_s)
        self.recovery = self._start(
            ["recovery", "--interval", "1", "--stuck-after", stuck, "--backoff-base", "1",
             "--backoff-max", "5", "--max-attempts", "1000", "--drain-timeout", "10"],
            "recovery")

    def start(self) -> None:
        for index in range(self.config.workers):
            self.start_worker(index)
        self.start_recovery()

    def kill_worker(self, index: int) -> None:
        self.workers[index].kill9()

    def kill_recovery(self) -> None:
        assert self.recovery is not None
        self.recovery.kill9()

    def revive(self) -> None:
        """Restart any process that died without being killed by the run (and note it)."""
        for index, proc in enumerate(self.workers):
            if not proc.alive() and proc.proc.returncode != -9:
                what = f"worker-{index} pid {proc.pid} exited {proc.proc.returncode}"
                output = self.output_of(proc)
                if proc.proc.returncode == 1 and '"worker_started"' not in output and \
                        "gapless: cannot reach the database" in output:
                    self.startup_exits.append(what)
                else:
                    self.unexpected_exits.append(f"{what}: {output[-2000:]}")
                self.start_worker(index)
        if self.recovery is not None and not self.recovery.alive() and \
                self.recovery.proc.returncode != -9:
            self.unexpected_exits.append(
                f"recovery pid {self.recovery.pid} exited {self.recovery.proc.returncode}")
            self.start_recovery()

    def worker_pids(self) -> set[int]:
        return {proc.pid for proc in self.workers if proc.alive()}

    def stop(self) -> dict[str, int | None]:
        """SIGTERM everything at once (graceful stop); the exit code of each process.

        A process still running 40 s later is killed and reported with ``None``.
        """
        procs = [(f"worker-{i}", p) for i, p in enumerate(self.workers)]
        if self.recovery is not None:
            procs.append(("recovery", self.recovery))
        # A worker restarted moments ago may still be importing: until its own code has
        # installed the SIGTERM handler (before it logs anything), the signal's default action
        # would kill it, which is not the graceful stop under test. Its first log line says it
        # is past that point.
        for worker in self.workers:
            with contextlib.suppress(AssertionError):
                wait_until(lambda w=worker: not w.alive() or any(
                    f'"{event}"' in self.output_of(w)
                    for event in ("worker_started", "database_unavailable_at_start")),
                    30, message="a restarted worker to start")
        for _, proc in procs:
            if proc.alive():
                proc.proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, proc in procs:
            try:
                codes[name] = proc.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.close()
                codes[name] = None
        return codes

    def close(self) -> None:
        for proc in self.workers:
            proc.close()
        if self.recovery is not None:
            self.recovery.close()


# ------------------------------------------------------------------------------------ the poller


class Poller:
    """A feed client following ``events_after`` from cursor 0: what it saw, in order."""

    def __init__(self, database_url: str) -> None:
        self.engine = make_engine(database_url, actor="chaos-poller",
                                  application_name="gapless-chaos-poller", pool_size=1)
        self.seen: list[FeedRecord] = []
        self.cursor = 0
        self.errors = 0

    async def poll_once(self, limit: int = 500) -> int:
        """One page; the cursor moves only over what was received."""
        page = await events_after(ledger(self.engine), self.cursor, limit)
        self.seen += [FeedRecord.of(event) for event in page]
        if page:
            self.cursor = page[-1].sequence_id
        return len(page)

    async def follow(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                got = await self.poll_once()
            except (DBAPIError, psycopg.Error, OSError):
                # SQLAlchemy wraps the driver's errors, except those the ledger's own statements
                # meet on a raw connection: a client retries either; the cursor has not moved.
                self.errors += 1
                got = 0
            if got < 500:
                # A client's poll interval; waking early on stop.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)

    async def drain(self) -> None:
        while await self.poll_once():
            pass

    async def close(self) -> None:
        await self.engine.dispose()


# -------------------------------------------------------------------------------------- the run

_SS_LINE = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)\s+users:\((.*)\)")
_PID = re.compile(r"pid=(\d+)")


@dataclass
class ChaosRun:
    config: ChaosConfig
    settings: Settings
    env: dict[str, str]
    mock: MockIntegratorClient
    log_dir: Path
    history: History = field(default_factory=History)
    faults: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.cluster = Cluster(self.env, self.log_dir, self.config)
        self.engine: AsyncEngine = make_engine(self.settings.database_url, actor="chaos",
                                               application_name="gapless-chaos", pool_size=4)
        self.poller = Poller(self.settings.database_url)
        self.publisher = Publisher(self.settings)
        self.stop_faults = asyncio.Event()
        self.probes = 0
        self.probe_waits: list[asyncio.Task[None]] = []
        self.outage_until = 0.0
        self.started_at = 0.0

    # -- set-up ------------------------------------------------------------------------------

    async def define_series(self) -> None:
        async with ledger(self.engine).transaction() as tx:
            for tenant, code, reset in SERIES:
                await add_series(tx, build_series_spec(tenant, code, reset=reset))

    def integrator_faults(self) -> dict[str, Any]:
        kinds = self.config.faults
        return {
            "latency_ms": [1, 25] if "latency" in kinds else [0, 0],
            "transient_rate": 0.08 if "transient" in kinds else 0.0,
            "reject_rate": 0.02 if "random_reject" in kinds else 0.0,
            "lost_response_rate": 0.04 if "lost_response" in kinds else 0.0,
            "lost_response_mode": "mixed",
            "lost_response_delay_s": 5.0,
            "down": False,
        }

    # -- the whole run -----------------------------------------------------------------------

    async def run(self) -> None:
        """Load + faults for ``duration_s``, then heal and settle. Processes are left running."""
        await self.define_series()
        self.mock.set_faults(**self.integrator_faults())
        await self.publisher.start()  # declares the topology before any worker consumes
        self.cluster.start()
        self.started_at = time.monotonic()
        poller_stop = asyncio.Event()
        self._poller_stop = poller_stop
        self._poller_task = asyncio.create_task(self.poller.follow(poller_stop))
        await self.wait_consumers(self.config.workers, timeout=60)
        plan = plan_load(self.config, self.rng)
        tasks = [asyncio.create_task(self.publish_load(plan), name="load"),
                 asyncio.create_task(self.kill_workers(), name="kill_workers"),
                 asyncio.create_task(self.timeline(), name="timeline"),
                 asyncio.create_task(self.watch_processes(), name="watch")]
        try:
            await asyncio.wait_for(tasks[0], timeout=self.config.duration_s + 300)
            remaining = self.config.duration_s - self.elapsed()
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_faults.wait(), remaining)
        finally:
            self.stop_faults.set()
            results = await asyncio.gather(*tasks[1:], return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        await self.heal()
        await self.settle()
        await asyncio.gather(*self.probe_waits)

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    async def publish_load(self, plan: list[Group]) -> None:
        """Publish the plan at its pace. Confirms are pipelined (up to PUBLISH_WINDOW messages
        in flight): a busy broker confirms slowly, and waiting for each confirm in turn would
        let the broker's latency, not the plan, set the load."""
        window = asyncio.Semaphore(PUBLISH_WINDOW)
        sent: list[asyncio.Task[None]] = []

        async def one(message: Outgoing) -> None:
            try:
                await self.publish(message)
            finally:
                window.release()

        try:
            for group in plan:
                delay = group.at_s - self.elapsed()
                if delay > 0:
                    await asyncio.sleep(delay)  # the load's pace, not a synchronisation
                for message in group.messages:
                    await window.acquire()
                    sent.append(asyncio.create_task(one(message)))
            await asyncio.gather(*sent)
        finally:
            for task in sent:
                task.cancel()  # no-op for the finished ones
            await asyncio.gather(*sent, return_exceptions=True)

    async def publish(self, message: Outgoing) -> None:
        for _ in range(5):
            try:
                await self.publisher.publish(message.body, priority=message.priority,
                                             content_type=message.content_type,
                                             message_id=message.key)
                break
            except PublishUnconfirmed:
                self.faults["publish_unconfirmed_retried"] += 1  # safe: same key again
        else:
            raise AssertionError(f"could not publish {message.key} after 5 attempts")
        if message.kind == "malformed":
            self.history.malformed[message.key] = message.malformed
            self.faults["malformed_published"] += 1
        else:
            if message.kind == "duplicate":
                self.faults["duplicate_published"] += 1
            self.history.publish(message.key, message.tenant, message.series, message.expect)

    # -- faults --------------------------------------------------------------------------------

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` of the fault schedule; True when the run ends first."""
        try:
            await asyncio.wait_for(self.stop_faults.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def kill_workers(self) -> None:
        if "worker_kill" not in self.config.faults:
            return
        every = max(3.0, min(9.0, self.config.duration_s / 10))
        while not await self.pause(self.rng.uniform(every * 0.6, every)):
            index = self.rng.randrange(len(self.cluster.workers))
            self.cluster.kill_worker(index)
            self.faults["worker_kill"] += 1
            await self.pause(self.rng.uniform(0.2, 1.5))
            self.cluster.start_worker(index)

    def schedule(self) -> list[tuple[float, str]]:
        """When each scheduled fault happens: the pattern repeats every ~90 s of the run."""
        cycles = max(1, round(self.config.duration_s / 90))
        length = self.config.duration_s / cycles
        pattern = [(0.15, "outage"), (0.30, "recovery_kill"), (0.40, "amqp_drop"),
                   (0.55, "pg_terminate"), (0.65, "recovery_kill"), (0.72, "amqp_drop"),
                   (0.85, "pg_terminate")]
        return [(cycle * length + at * length, kind) for cycle in range(cycles)
                for at, kind in pattern if kind in self.config.faults]

    async def timeline(self) -> None:
        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "outage": self.outage, "recovery_kill": self.kill_recovery,
            "amqp_drop": self.drop_amqp, "pg_terminate": self.terminate_backends}
        outages: list[asyncio.Task[None]] = []
        for at, kind in self.schedule():
            if await self.pause(max(0.0, at - self.elapsed())):
                break
            if kind == "outage":  # runs beside the rest of the schedule
                outages.append(asyncio.create_task(actions[kind]()))
            else:
                await actions[kind]()
        await asyncio.gather(*outages)

    async def outage(self) -> None:
        self.mock.set_faults(down=True)
        self.faults["integrator_outage"] += 1
        self.outage_until = time.monotonic() + OUTAGE_S
        await asyncio.sleep(OUTAGE_S)  # the outage lasts this long, by definition
        self.mock.set_faults(down=False)

    async def kill_recovery(self) -> None:
        self.cluster.kill_recovery()
        self.faults["recovery_kill"] += 1
        await self.pause(self.rng.uniform(0.5, 2.0))
        self.cluster.start_recovery()

    async def drop_amqp(self) -> None:
        dropped_at = await self.db_now()
        closed = await close_amqp_connections(self.cluster.worker_pids(), self.settings.amqp_url)
        self.faults["amqp_drop"] += 1
        self.faults["amqp_connections_closed"] += closed
        await self.probe("amqp_drop", dropped_at)

    async def terminate_backends(self) -> None:
        dropped_at = await self.db_now()
        async with self.engine.begin() as conn:
            killed = (await conn.execute(text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'gapless-worker' AND datname = current_database()"
            ))).scalar_one()
        self.faults["pg_terminate"] += 1
        self.faults["pg_backends_terminated"] += int(killed)
        await self.probe("pg_terminate", dropped_at)

    async def watch_processes(self) -> None:
        while not await self.pause(0.5):
            self.cluster.revive()

    # -- liveness checks after a drop ------------------------------------------------------------

    async def consumer_count(self) -> int:
        connection = await aio_pika.connect(self.settings.amqp_url, timeout=10)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(self.settings.queue, passive=True)
            return int(queue.declaration_result.consumer_count or 0)

    async def wait_consumers(self, at_least: int, timeout: float) -> None:
        async def enough() -> bool:
            return await self.consumer_count() >= at_least

        await await_until(enough, timeout, interval=0.25,
                          message=f"{at_least} consumer(s) on {self.settings.queue}")

    async def status_of(self, invoice_id: str) -> str | None:
        async with self.engine.connect() as conn:
            return (await conn.execute(text("SELECT status FROM invoices WHERE invoice_id = :i"),
                                       {"i": invoice_id})).scalar()

    async def db_now(self) -> datetime:
        async with self.engine.connect() as conn:
            moment: datetime = (await conn.execute(text("SELECT clock_timestamp()"))).scalar_one()
        return moment

    async def rows_since(self, moment: datetime) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(text(
                "SELECT count(*) FROM invoices WHERE created_at > :t"), {"t": moment}))
                .scalar_one())

    async def issued_count(self) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(text(
                "SELECT count(*) FROM invoices WHERE status = 'ISSUED'"))).scalar_one())

    async def probe(self, after: str, dropped_at: datetime) -> None:
        """The consumers came back after a drop: at least one consumer on the queue, a message
        consumed after the drop became a new invoice row (within 60 s), and a probe invoice
        published now gets ISSUED (awaited beside the run: behind a long profile's backlog it
        may take a while, so its deadline follows the system's progress)."""
        await self.wait_consumers(1, timeout=60)
        self.probes += 1
        invoice_id = f"probe{self.config.seed}-{self.probes:03d}"
        body = json.dumps(invoice_message(invoice_id, "chaos-a", "INV", "user", "1234567890",
                                          self.rng)).encode()
        await self.publish(Outgoing("valid", invoice_id, body, "application/json", 4,
                                    "chaos-a", "INV", "any" if "random_reject" in
                                    self.config.faults else "issued"))

        async def consuming() -> bool:
            return await self.rows_since(dropped_at) > 0

        await await_until(consuming, 60, interval=0.2,
                          message=f"a message consumed into a new invoice after {after}")
        self.faults[f"consuming_again_after_{after}"] += 1
        self.probe_waits.append(asyncio.create_task(self.probe_issued(invoice_id, after)))

    async def probe_issued(self, invoice_id: str, after: str) -> None:
        wanted = ("ISSUED", "REJECTED") if "random_reject" in self.config.faults else ("ISSUED",)
        progress_at, issued = time.monotonic(), await self.issued_count()
        while await self.status_of(invoice_id) not in wanted:
            now, count = time.monotonic(), await self.issued_count()
            if count > issued:
                progress_at, issued = now, count
            elif now - progress_at > SETTLE_STALL_S:
                raise AssertionError(f"probe {invoice_id} not ISSUED after {after}, and no "
                                     f"invoice issued for {SETTLE_STALL_S:g}s")
            await asyncio.sleep(0.2)  # a poll interval
        self.faults[f"probe_issued_after_{after}"] += 1

    # -- the end -----------------------------------------------------------------------------

    async def heal(self) -> None:
        """Jepsen's "heal": faults off, every process up, so recovery can settle everything."""
        self.mock.set_faults(latency_ms=[0, 0], transient_rate=0.0, reject_rate=0.0,
                             lost_response_rate=0.0, down=False)
        self.cluster.revive()

    async def unsettled(self) -> dict[str, int]:
        async with self.engine.connect() as conn:
            row = (await conn.execute(text("""
                SELECT count(*) AS total,
                       count(*) FILTER (WHERE status IN ('RECEIVED', 'SENDING')) AS open,
                       count(*) FILTER (WHERE status = 'ERROR'
                                          AND next_attempt_at IS NOT NULL) AS retrying
                  FROM invoices"""))).one()
        depths = await queue_depths(self.settings)
        dead = depths[dead_queue_name(self.settings.queue)]
        return {"missing": len(self.history.published) - row.total, "open": row.open,
                "retrying": row.retrying, "queued": depths[self.settings.queue],
                "malformed_not_dead": max(0, len(self.history.malformed) - dead)}

    async def settle(self) -> None:
        """Wait until every published invoice has a row and none is open, the queue is empty and
        every malformed message is dead-lettered.

        The deadline follows progress: the run gives up (and lets the checker report the exact
        rows) only after ``SETTLE_STALL_S`` without the backlog shrinking, or after
        ``settle_cap_s`` in all — a slow machine drains a long profile's backlog slowly, but it
        drains.
        """
        started = time.monotonic()
        best = None
        progress_at = started
        while True:
            self.cluster.revive()
            state = await self.unsettled()
            remaining = sum(state.values())
            now = time.monotonic()
            if remaining == 0:
                self.notes.append(f"settled in {now - started:.1f}s after the load")
                return
            if best is None or remaining < best:
                best, progress_at = remaining, now
            if now - progress_at > SETTLE_STALL_S or now - started > self.config.settle_cap_s:
                self.notes.append(f"did not settle ({now - started:.0f}s after the load, "
                                  f"{now - progress_at:.0f}s without progress): {state}")
                return
            await asyncio.sleep(0.5)  # a poll interval of the settle condition

    async def finish(self) -> dict[str, int | None]:
        """Stop the processes gracefully, drain the poller, read the ledger and dead letters."""
        exit_codes = await asyncio.to_thread(self.cluster.stop)
        self._poller_stop.set()
        await self._poller_task
        await self.poller.drain()
        self.history.feed = list(self.poller.seen)
        self.history.ledger = self.mock.ledger()
        self.history.dead_letters = await read_dead_letters(self.settings)
        stats = self.mock.stats()
        self.faults["integrator_transient"] = stats["transient"]
        self.faults["integrator_lost_response"] = stats["lost_response"]
        self.faults["integrator_down_refusals"] = stats["down"]
        self.faults["integrator_rejected_tax_id"] = stats["rejected_tax_id"]
        self.faults["integrator_rejected_random"] = stats["rejected"] - stats["rejected_tax_id"]
        self.faults["integrator_duplicate_409"] = stats["duplicate"]
        self.faults["poller_errors"] = self.poller.errors
        self.faults["worker_startup_exit_on_db_drop"] = len(self.cluster.startup_exits)
        self.history.faults = +self.faults
        return exit_codes

    async def close(self) -> None:
        self.stop_faults.set()
        for task in self.probe_waits:
            task.cancel()
        await asyncio.gather(*self.probe_waits, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.publisher.close()
        await self.poller.close()
        await self.engine.dispose()
        self.cluster.close()


# ------------------------------------------------------------------------------ broker helpers


async def close_amqp_connections(pids: set[int], amqp_url: str) -> int:
    """Close, at the broker, every AMQP connection of the given processes; how many were closed.

    The connections are found by their client port (``ss``) and closed with ``rabbitmqctl
    close_connection``, so other users of the broker are not touched.
    """
    rabbitmqctl = shutil.which("rabbitmqctl")
    if rabbitmqctl is None:
        raise AssertionError("rabbitmqctl is not installed: cannot drop AMQP connections")
    port = urllib.parse.urlsplit(amqp_url).port or 5672
    ss = await _run("ss", "-tnpH", "state", "established", f"( dport = :{port} )")
    client_ports = set()
    for line in ss.splitlines():
        match = _SS_LINE.search(line)
        if match and {int(p) for p in _PID.findall(match.group(5))} & pids:
            client_ports.add(match.group(2))
    listing = await _run(rabbitmqctl, "list_connections", "pid", "peer_port",
                         "--no-table-headers", "-q")
    closed = 0
    for line in listing.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[1].strip() in client_ports:
            await _run(rabbitmqctl, "close_connection", parts[0].strip(),
                       "gapless chaos: connection dropped")
            closed += 1
    return closed


async def _run(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {err.decode()}")
    return out.decode()


async def read_dead_letters(settings: Settings) -> list[DeadLetter]:
    """Take every message out of ``<prefix>.dead`` (the queue is the test's own)."""
    from gapless.amqp.connection import connect_once

    letters: list[DeadLetter] = []
    connection = await connect_once(settings)  # the first node that answers
    async with connection:
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return letters
        while (message := await queue.get(no_ack=False, fail=False)) is not None:
            reason = (message.headers or {}).get(HEADER_DEAD_REASON)
            letters.append(DeadLetter(message.message_id,
                                      None if reason is None else str(reason), message.body))
            await message.ack()
    return letters
