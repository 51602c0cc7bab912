"""``gapless demo``: the whole system on local PostgreSQL and RabbitMQ, under realistic faults.

One run, in order:

1. a fresh demo database (dropped and re-created — only one the demo created itself, which it
   marks with a comment, :data:`DEMO_MARK`, unless ``force``), migrated, with one series for
   each of two tenants — ``acme`` with an issuer profile (its invoices are UBL-TR 2.1
   documents), ``globex`` without (its documents are the message's JSON) — and acme's series of
   dispatch notes (``IRS``, channel ``edespatch``); a queue prefix of its own
   (``gapless_demo_<run>``);
2. ``gapless mock-integrator`` on a free port: 20–150 ms latency, a few per cent transient
   errors, some lost responses (accepted, then the connection is dropped);
3. W ``gapless worker`` processes and one ``gapless recovery`` (short ``--stuck-after``, so the
   orphans of a killed worker are repaired within the demo);
4. a mixed user/batch load over the two tenants, published with confirms; about 1 % carry the
   tax id the integrator always rejects; about :data:`DESPATCH_SHARE` of acme's documents are
   dispatch notes, to e-İrsaliye users the demo registers at the mock (one or two aliases) and
   to others (GİB's box);
5. live progress on stderr; midway, one worker is killed with SIGKILL and started again;
6. once everything has settled (or the deadline passed): a graceful stop of workers and
   recovery, ``gapless audit --integrator`` on stdout, the issued documents counted by kind (type
   and profile, from the database), the summary of one issued UBL-TR document, then the
   integrator is stopped and the demo's database and queues are dropped — unless
   ``keep``, for a look around afterwards.

The exit code is the audit's (0 clean, 1 violations), or 1 when the run did not settle in time.
Every child process logs JSON to a file in the run's log directory, named in the summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gapless.constants import dead_exchange_name, dead_queue_name
from gapless.errors import GaplessError
from gapless.settings import Settings, process_environment

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from gapless.ledger.database import Database

DEMO_DATABASE = "gapless_demo"
#: The comment (COMMENT ON DATABASE) a database the demo created carries: the demo drops only a
#: database that has it (or none of that name), unless told to (``force``).
DEMO_MARK = "created by gapless demo, which drops and re-creates it on every run"
#: (tenant, series code, share of the load)
TENANTS = (("acme", "ABC", 0.6), ("globex", "GLX", 0.4))
#: The first tenant's series of dispatch notes, and the share of its documents that are notes.
DESPATCH_SERIES = "IRS"
DESPATCH_SHARE = 0.15
#: The demo's issuer profile, for the first tenant: its documents are UBL-TR 2.1.
DEMO_ISSUER = {"tax_id": "1234567808", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
               "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
               "postal_zone": "34716", "email": "efatura@acme.example"}
USER_SHARE = 0.2            # the rest is batch
REJECT_EVERY = 100          # every 100th invoice: tax id 0000000000, which is always rejected
MOCK_FAULTS = ("--latency-ms", "20-150", "--transient-rate", "0.03",
               "--lost-response-rate", "0.01", "--lost-response-mode", "drop")
STUCK_AFTER_S = 5.0         # recovery takes over a killed worker's invoices after this
RECOVERY_ARGS = ("--interval", "1", "--stuck-after", str(STUCK_AFTER_S),
                 "--backoff-base", "1", "--backoff-max", "5")
STOP_TIMEOUT_S = 40.0
REFRESH_S = 0.5
THROUGHPUT_WINDOW_S = 5.0
PLAIN_PROGRESS_EVERY_S = 5.0


class DemoFailed(GaplessError):
    """The demo could not run to the end (a process died, a service is missing)."""


@dataclass(frozen=True)
class DemoConfig:
    invoices: int = 2000
    workers: int = 2
    concurrency: int = 16
    keep: bool = False
    database: str = DEMO_DATABASE
    seed: int = 7
    deadline_s: float | None = None
    kill_worker: bool = True
    log_dir: Path | None = None
    #: Drop an existing database of that name although the demo did not create it.
    force: bool = False

    @property
    def deadline(self) -> float:
        """Seconds from the first publish until the run must have settled."""
        return self.deadline_s if self.deadline_s is not None else 90.0 + self.invoices * 0.1


# ---------------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Child:
    """One ``gapless`` sub-command in its own session (Ctrl-C reaches only the demo, which then
    stops the children in order), its output appended to ``<log_dir>/<name>.log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.expected_exit = False
        self._log: IO[bytes] | None = None

    async def start(self) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.expected_exit = False
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gapless", *self.args, env=self.env,
            stdin=asyncio.subprocess.DEVNULL, stdout=self._log, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def kill9(self) -> None:
        """SIGKILL: no drain, no goodbye — the crash the design must survive."""
        if self.proc is not None and self.alive():
            self.expected_exit = True
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self, grace_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (graceful: drain, then exit 0); SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        self.expected_exit = True
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), grace_s)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode

    def died(self) -> bool:
        """Exited although nobody asked it to."""
        return self.proc is not None and self.proc.returncode is not None \
            and not self.expected_exit

    def failure(self) -> DemoFailed:
        code = None if self.proc is None else self.proc.returncode
        return DemoFailed(f"{self.name} exited with code {code} (log: {self.log_path}):\n"
                          f"{self.tail()}")

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.proc is not None and self.alive():
            self.proc.kill()
        if self._log is not None:
            self._log.close()
            self._log = None


# ---------------------------------------------------------------------------------- setup


def demo_database_url(settings: Settings, name: str) -> str:
    """GAPLESS_DATABASE_URL on the demo database (every host and parameter kept)."""
    from gapless.ledger.conninfo import with_database

    return with_database(settings.database_url, name)


class NotDemoDatabase(GaplessError):
    """A database of the demo's name exists that the demo did not create: it is not dropped."""


def foreign_database(settings: Settings, name: str) -> str | None:
    """Why the demo must not drop database ``name`` on the settings' server (it exists and lacks
    :data:`DEMO_MARK`), or None when it may (absent, or the demo's own)."""
    from gapless.ledger.migrations import database_comment
    from gapless.urls import redact_url

    url = demo_database_url(settings, name)
    exists, comment = database_comment(url)
    if not exists or comment == DEMO_MARK:
        return None
    return (f"database {name!r} ({redact_url(url)}) exists and was not created by gapless "
            "demo, which would drop it: give another --database, or --force to drop it")


async def prepare_database(settings: Settings, config: DemoConfig) -> str:
    """A migrated demo database with the demo tenants' series, marked as the demo's
    (:data:`DEMO_MARK`); returns its URL. Raises NotDemoDatabase, dropping nothing, when a
    database of that name exists that the demo did not create, unless ``config.force``."""
    from gapless.documents import build_issuer
    from gapless.ledger.database import short_lived
    from gapless.ledger.migrations import (
        comment_database,
        drop_database,
        ensure_database,
        migrate,
    )
    from gapless.ledger.series import add_series
    from gapless.ledger.tenants import set_profile
    from gapless.numbers import build_series_spec

    url = demo_database_url(settings, config.database)
    if not config.force:
        refusal = await asyncio.to_thread(foreign_database, settings, config.database)
        if refusal is not None:
            raise NotDemoDatabase(refusal)
    # Always fresh: the mock integrator's ledger starts empty, so a database with invoices of
    # an earlier run would (rightly) fail the audit's agreement check (I7).
    await asyncio.to_thread(drop_database, url)  # a demo name: the CLI refuses others
    # Marked before anything is in it: a run stopped halfway leaves a database the next drops.
    await asyncio.to_thread(ensure_database, url)
    await asyncio.to_thread(comment_database, url, DEMO_MARK)
    await asyncio.to_thread(migrate, url, settings.cluster_id)
    async with short_lived(url, actor="operator") as db:
        for tenant, code, _ in TENANTS:
            await add_series(db, build_series_spec(tenant, code))
        await add_series(db, build_series_spec(TENANTS[0][0], DESPATCH_SERIES,
                                               channel="edespatch", default=True))
        await set_profile(db, TENANTS[0][0], build_issuer(**DEMO_ISSUER))
    return url


async def delete_queues(settings: Settings) -> None:
    """Remove the run's queues and dead-letter exchange (best effort: the run is over)."""
    from gapless.amqp.connection import connect_once
    from gapless.amqp.topology import work_queues

    try:
        connection = await connect_once(settings)
    except Exception:  # the broker went away: nothing left to clean
        return
    async with connection:
        for queue in (*work_queues(settings), dead_queue_name(settings.queue)):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(queue)
        channel = await connection.channel()
        with contextlib.suppress(Exception):
            await channel.exchange_delete(dead_exchange_name(settings.queue))


async def register_despatch_users(integrator_url: str) -> None:
    """Register the demo's e-İrsaliye users at the mock (``PUT /admin/recipients``, object form;
    :data:`gapless.demo.samples.DESPATCH_USERS`): their notes go to their aliases, every other
    customer's to GİB's box."""
    import httpx

    from gapless.demo.samples import DESPATCH_USERS

    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.put(f"{integrator_url}/admin/recipients", json={
            tax_id: {"despatch": list(aliases)} for tax_id, aliases in DESPATCH_USERS.items()})
        answer.raise_for_status()


async def wait_for_http(url: str, within_s: float, child: Child) -> None:
    """Until ``url`` answers (or the child died, or the deadline passed)."""
    import httpx

    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(timeout=1.0) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code < 500:
                    return
            if child.died():
                raise child.failure()
            if time.monotonic() > deadline:
                raise DemoFailed(f"{child.name} did not answer at {url} within {within_s:g} s "
                                 f"(log: {child.log_path})")
            await asyncio.sleep(0.1)  # polling a port that is not open yet; nothing to await


# ---------------------------------------------------------------------------------- the load


def load_streams(total: int) -> list[tuple[str, str, str, int]]:
    """(tenant, series, priority, count) of every stream of the demo load; counts sum to total."""
    streams: list[tuple[str, str, str, int]] = []
    remaining = total
    for index, (tenant, code, share) in enumerate(TENANTS):
        count = remaining if index == len(TENANTS) - 1 else round(total * share)
        remaining -= count
        user = round(count * USER_SHARE)
        streams.extend((tenant, code, priority, n)
                       for priority, n in (("user", user), ("batch", count - user)) if n)
    return streams


def demo_load(total: int, seed: int, run_id: str) -> Iterator[dict[str, Any]]:
    """``total`` contract messages over the demo tenants, user/batch mixed in a seeded order."""
    from gapless.demo.samples import sample_messages, sample_note, with_rejected_customer

    rng = random.Random(seed)
    specs = load_streams(total)
    streams = [sample_messages(count, tenant=tenant, series=code, priority=priority,
                             seed=rng.randrange(2**31),
                             # demo-<run><tenant initial><u|b>-<n>: short enough for 80 columns
                             run_id=f"{run_id[:4]}{tenant[0]}{priority[0]}")
               for tenant, code, priority, count in specs]
    order = [index for index, spec in enumerate(specs) for _ in range(spec[3])]
    rng.shuffle(order)
    for position, index in enumerate(order, start=1):
        message = next(streams[index])
        if message["tenant"] == TENANTS[0][0] and rng.random() < DESPATCH_SHARE:
            # a dispatch note in the invoice's place (same key, priority and date)
            yield sample_note(rng, message)
            continue
        if position % REJECT_EVERY == 0:  # counted over the whole load, so small runs get some
            message = with_rejected_customer(message)
        yield message


async def publish_load(settings: Settings, messages: Iterator[dict[str, Any]],
                       progress: Progress, in_flight: int = 256) -> None:
    """Publish with pipelined confirms; ``progress.published`` counts confirmed messages."""
    from gapless.amqp.publisher import Publisher

    slots = asyncio.Semaphore(in_flight)
    async with Publisher(settings) as publisher:
        async def send(message: dict[str, Any]) -> None:
            try:
                await publisher.publish(message)
                progress.published += 1
            finally:
                slots.release()

        async with asyncio.TaskGroup() as group:
            for message in messages:
                await slots.acquire()
                group.create_task(send(message))


# ---------------------------------------------------------------------------------- progress


@dataclass
class Progress:
    total: int
    started: float = field(default_factory=time.monotonic)
    published: int = 0
    invoices: int = 0
    received: int = 0
    sending: int = 0
    issued: int = 0
    error: int = 0
    retryable: int = 0
    rejected: int = 0
    recovered: int = 0
    ready: int | None = None
    dead: int | None = None
    breakers: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def settled_count(self) -> int:
        """Invoices with an outcome: ISSUED, REJECTED, or ERROR (recovery may retry those)."""
        return self.issued + self.rejected + self.error

    @property
    def settled(self) -> bool:
        return (self.published == self.total and self.invoices == self.total
                and self.received == 0 and self.sending == 0 and self.retryable == 0
                and self.ready == 0)

    def throughput(self) -> float:
        """Invoices settled per second over the last few seconds."""
        now = time.monotonic()
        window = [(t, n) for t, n in self.history if now - t <= THROUGHPUT_WINDOW_S]
        if len(window) < 2 or window[-1][0] <= window[0][0]:
            return 0.0
        return (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])

    def event(self, text: str) -> None:
        self.events.append(f"{self.elapsed:6.1f}s  {text}")

    def line(self) -> str:
        """One short progress line (for logs and non-terminals)."""
        return (f"{self.elapsed:5.1f}s pub {self.published}/{self.total} issued {self.issued} "
                f"sending {self.sending} err {self.error} rej {self.rejected} "
                f"orphans {self.recovered} {self.throughput():.0f}/s")


TOTAL_FIELDS = ("invoices", "received", "sending", "issued", "error", "retryable", "rejected",
                "recovered")


async def read_totals(db: Database) -> dict[str, int]:
    """The database's invoice counts (``TOTAL_FIELDS``), one snapshot."""
    from gapless.ledger.invoices import ALARM_PREFIX
    from gapless.ledger.queries import status as q

    row = await db.one(q.TOTALS, {"alarm_pattern": ALARM_PREFIX + "%"})
    return {name: int(getattr(row, name)) for name in TOTAL_FIELDS}


async def update_progress(db: Database, progress: Progress) -> None:
    totals = await read_totals(db)
    for name in TOTAL_FIELDS:
        setattr(progress, name, totals[name])
    progress.history.append((time.monotonic(), progress.settled_count))


def render(progress: Progress, header: str, children: list[Child]) -> Group:
    """The live panel; fits 80 columns."""
    waiting = max(0, progress.published - progress.invoices) + progress.received
    cells = [("published", f"{progress.published}/{progress.total}"),
             ("issued", f"{progress.issued}"), ("sending", f"{progress.sending}"),
             ("waiting", f"{waiting}"), ("errors", f"{progress.error}"),
             ("rejected", f"{progress.rejected}"), ("orphans repaired", f"{progress.recovered}"),
             ("throughput", f"{progress.throughput():.0f}/s"),
             ("elapsed", f"{progress.elapsed:.1f}s")]
    counts = Table.grid(padding=(0, 1))
    for column in range(3):
        if column:
            counts.add_column(width=1)  # a gap between the label/value pairs
        counts.add_column(style="dim")
        counts.add_column(justify="right", min_width=9)
    for row in range(0, len(cells), 3):
        counts.add_row(*cells[row], "", *cells[row + 1], "", *cells[row + 2])
    queue = "?" if progress.ready is None else str(progress.ready)
    dead = "?" if progress.dead is None else str(progress.dead)
    bar = Table.grid(padding=(0, 1))
    bar.add_column(width=44)
    bar.add_column()
    bar.add_row(ProgressBar(total=progress.total, completed=progress.settled_count),
                f"queue {queue} ready, {dead} dead")
    processes = Text("")
    for child in children:
        style = "green" if child.alive() else "red"
        processes.append(f"{child.name} {'●' if child.alive() else '✗'}  ", style=style)
    parts: list[Any] = [Text(header, style="bold"), counts, bar, processes]
    if progress.breakers:
        parts.append(Text("breakers: " + ", ".join(progress.breakers), style="dim"))
    parts.extend(Text(event, style="yellow") for event in progress.events[-4:])
    return Group(*parts)


# ---------------------------------------------------------------------------------- the run


@dataclass
class DemoResult:
    exit_code: int
    settled: bool
    elapsed_s: float
    progress: Progress
    log_dir: Path
    database_url: str
    queue: str
    audit_code: int | None = None
    #: (type, profile, count) of the ISSUED documents, in the contract's order.
    issued_by_kind: list[tuple[str, str, int]] = field(default_factory=list)


def child_env(settings: Settings) -> dict[str, str]:
    return process_environment(settings, GAPLESS_INTEGRATOR_URL=settings.integrator_url,
                               GAPLESS_LOG_LEVEL="info")


@dataclass
class Cast:
    """The processes of one demo run: the mock integrator, the workers, recovery."""

    mock: Child
    workers: list[Child]
    recovery: Child
    metrics_urls: list[str]

    @property
    def children(self) -> list[Child]:
        return [self.mock, *self.workers, self.recovery]


def cast(settings: Settings, config: DemoConfig, env: dict[str, str], log_dir: Path,
         mock_port: int) -> Cast:
    """The demo's processes (not started yet), each with a free metrics port."""
    mock = Child("mock-integrator", ["mock-integrator", "--port", str(mock_port),
                                     "--seed", str(config.seed), *MOCK_FAULTS], env, log_dir)
    ports = [free_port() for _ in range(config.workers + 1)]
    workers = [Child(f"worker-{n}", ["worker", "--concurrency", str(config.concurrency),
                                     "--metrics-port", str(ports[n - 1])], env, log_dir)
               for n in range(1, config.workers + 1)]
    recovery = Child("recovery", ["recovery", *RECOVERY_ARGS, "--metrics-port", str(ports[-1])],
                     env, log_dir)
    return Cast(mock, workers, recovery, [f"http://127.0.0.1:{port}/metrics" for port in ports])


@dataclass
class Outcome:
    """What a run came to (filled in as it goes)."""

    settled: bool = False
    elapsed_s: float | None = None
    audit_code: int | None = None
    sample: dict[str, Any] | None = None
    issued_by_kind: list[tuple[str, str, int]] = field(default_factory=list)


async def run_demo(base: Settings, config: DemoConfig, *, err: Console, out: Console
                   ) -> DemoResult:
    """Run the whole demo; progress on ``err``, the audit on the process's stdout."""
    from gapless.ledger.database import Database, make_engine

    run_id = uuid.uuid4().hex[:8]
    mock_port = free_port()
    err.print(f"gapless demo: {config.invoices} invoices, {config.workers} worker(s); "
              f"database {config.database}")
    database_url = await prepare_database(base, config)
    # Made once the database is ready: a demo refused before it starts leaves no folder behind.
    log_dir = config.log_dir or Path(tempfile.mkdtemp(prefix=f"gapless-demo-{run_id}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    settings = base.with_overrides(database_url=database_url, queue=f"gapless_demo_{run_id}",
                                   integrator_url=f"http://127.0.0.1:{mock_port}")
    env = child_env(settings)
    players = cast(settings, config, env, log_dir, mock_port)
    progress = Progress(total=config.invoices)
    engine = make_engine(database_url, actor="demo", pool_size=1)
    db = Database.borrowing(engine)
    outcome = Outcome()
    publisher: asyncio.Task[None] | None = None
    try:
        publisher = await _start(settings, config, players, progress, run_id)
        await _play(settings, config, players, progress, db, publisher, err, outcome)
        await _conclude(env, db, outcome)
    finally:
        await _clean_up(settings, config, players, engine, database_url, publisher)
    elapsed = outcome.elapsed_s if outcome.settled and outcome.elapsed_s else progress.elapsed
    exit_code = outcome.audit_code if outcome.audit_code else (0 if outcome.settled else 1)
    result = DemoResult(exit_code=exit_code, settled=outcome.settled, elapsed_s=elapsed,
                        progress=progress, log_dir=log_dir, database_url=database_url,
                        queue=settings.queue, audit_code=outcome.audit_code,
                        issued_by_kind=outcome.issued_by_kind)
    _summary(result, config, out)
    if result.issued_by_kind:
        _kinds_table(result.issued_by_kind, out)
    if outcome.sample is not None:
        _document_summary(outcome.sample, out)
    return result


async def _start(settings: Settings, config: DemoConfig, players: Cast, progress: Progress,
                 run_id: str) -> asyncio.Task[None]:
    """Start the integrator (and wait until it answers), the workers and recovery; then the
    publisher, in the background."""
    await players.mock.start()
    await wait_for_http(f"{settings.integrator_url}/admin/stats", 30, players.mock)
    await register_despatch_users(settings.integrator_url)
    for child in (*players.workers, players.recovery):
        await child.start()
    progress.started = time.monotonic()
    return asyncio.create_task(publish_load(
        settings, demo_load(config.invoices, config.seed, run_id), progress))


async def _play(settings: Settings, config: DemoConfig, players: Cast, progress: Progress,
                db: Database, publisher: asyncio.Task[None], err: Console,
                outcome: Outcome) -> None:
    """Watch until settled (or the deadline), then stop workers and recovery gracefully."""
    header = (f"gapless demo · {config.invoices} invoices · {config.workers} workers · "
              f"queue {settings.queue}")
    outcome.settled = await _watch(settings, config, progress, header, players, db,
                                   publisher, err)
    outcome.elapsed_s = progress.elapsed
    graceful = (*players.workers, players.recovery)
    stops = await asyncio.gather(*(child.stop() for child in graceful))
    unclean = [child.name for child, code in zip(graceful, stops, strict=True)
               if code not in (0, None)]
    if unclean:
        err.print(f"[yellow]graceful stop: {', '.join(unclean)} exited non-zero "
                  f"(see {players.mock.log_path.parent})[/]")


async def _conclude(env: dict[str, str], db: Database, outcome: Outcome) -> None:
    """``gapless audit --integrator`` on stdout; the issued documents by kind, and one
    document's summary."""
    audit = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gapless", "audit", "--integrator", env=env,
        stdin=asyncio.subprocess.DEVNULL)
    outcome.audit_code = await audit.wait()
    outcome.issued_by_kind = await issued_by_kind(db)
    outcome.sample = await sample_document(db)


async def _clean_up(settings: Settings, config: DemoConfig, players: Cast,
                    engine: AsyncEngine, database_url: str,
                    publisher: asyncio.Task[None] | None) -> None:
    """Stop everything still running; drop the run's queues and database unless ``keep``."""
    if publisher is not None and not publisher.done():
        publisher.cancel()
        with contextlib.suppress(BaseException):
            await publisher
    await asyncio.gather(*(child.stop(grace_s=10) for child in players.children),
                         return_exceptions=True)
    for child in players.children:
        child.close()
    await engine.dispose()
    if not config.keep:
        from gapless.ledger.migrations import drop_database

        await delete_queues(settings)
        await asyncio.to_thread(drop_database, database_url)


async def sample_document(db: Database) -> dict[str, Any] | None:
    """The summary of one issued UBL-TR document (the first ISSUED invoice of the profiled
    tenant), or None when there is none."""
    from gapless.documents import summarize
    from gapless.integrator.base import MEDIA_XML
    from gapless.ledger.queries import status as q

    row = await db.one(q.FIRST_ISSUED_DOCUMENT, {
        "tenant": TENANTS[0][0], "media_type": MEDIA_XML})
    if row is None:
        return None
    return {"invoice_id": row.invoice_id, "sha256": row.sha256, **summarize(bytes(row.body))}


async def issued_by_kind(db: Database) -> list[tuple[str, str, int]]:
    """(type, profile, count) of the ISSUED invoices, read from their stored messages (no type
    is a SATIS, no profile a TEMELFATURA: the document's defaults), in the contract's order of
    types, then of profiles."""
    from gapless.ledger.queries import status as q
    from gapless.message import INVOICE_TYPES, PROFILES
    from gapless.message.despatch import DEFAULT_PROFILE, DEFAULT_TYPE

    rows = await db.all(q.ISSUED_BY_KIND, {
        "default_type": INVOICE_TYPES[0], "default_profile": PROFILES[0],
        "despatch_type": DEFAULT_TYPE, "despatch_profile": DEFAULT_PROFILE})

    def rank(order: tuple[str, ...], value: str) -> tuple[int, str]:
        return (order.index(value) if value in order else len(order), value)

    kinds = [(str(row.type), str(row.profile), int(row.issued)) for row in rows]
    return sorted(kinds, key=lambda kind: (rank(INVOICE_TYPES, kind[0]),
                                           rank(PROFILES, kind[1])))


def _kinds_table(kinds: list[tuple[str, str, int]], out: Console) -> None:
    """The issued documents by type and profile, under the summary (fits 80 columns)."""
    out.print(f"  issued by kind ({sum(count for _, _, count in kinds)}):", highlight=False)
    table = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False)
    table.add_column("type")
    table.add_column("profile")
    table.add_column("issued", justify="right")
    for kind, profile, count in kinds:
        table.add_row(kind, profile, str(count))
    out.print(Padding(table, (0, 0, 0, 4), expand=False))


def _document_summary(sample: dict[str, Any], out: Console) -> None:
    out.print(f"  one UBL-TR document, invoice {sample['invoice_id']} "
              f"(gapless invoice show {sample['invoice_id']} --document):", highlight=False)
    for key, value in sample.items():
        if key != "invoice_id" and value is not None:
            out.print(f"    {key}: {value}", highlight=False, soft_wrap=True)


async def _observe(settings: Settings, progress: Progress, players: Cast,
                   db: Database) -> None:
    """Refresh the counts, the queue depths and (every two seconds) the breakers."""
    from gapless.amqp.management import queue_depths
    from gapless.amqp.topology import work_queues
    from gapless.ops.status import read_breakers

    await update_progress(db, progress)
    try:
        depths = await queue_depths(settings)
        progress.ready = sum(depths[name] for name in work_queues(settings))
        progress.dead = depths[dead_queue_name(settings.queue)]
    except GaplessError:
        progress.ready = progress.dead = None
    if int(progress.elapsed / 2) != int((progress.elapsed - REFRESH_S) / 2):
        progress.breakers = [f"{b.name or '?'} {b.state}"
                             for b in await read_breakers(players.metrics_urls)]


async def _kill_and_restart(victim: Child, progress: Progress) -> None:
    """kill -9 a worker midway, and start it again: recovery repairs what it left."""
    in_flight = progress.sending
    await victim.kill9()
    progress.event(f"kill -9 {victim.name} (pid {victim.pid}); "
                   f"{in_flight} invoices were SENDING")
    await victim.start()
    progress.event(f"{victim.name} restarted (pid {victim.pid}); recovery repairs orphans "
                   f"after {STUCK_AFTER_S:g}s")


class _Display:
    """The live panel on a terminal; elsewhere a line every few seconds and each event once."""

    def __init__(self, err: Console, header: str, progress: Progress,
                 players: Cast) -> None:
        from rich.live import Live

        self.err, self.header, self.progress, self.players = err, header, progress, players
        self.live = Live(render(progress, header, players.children), console=err,
                         auto_refresh=False, transient=False) if err.is_terminal else None
        self._last_line = 0.0
        self._shown = 0

    def show(self, *, final: bool) -> None:
        if self.live is not None:
            self.live.update(render(self.progress, self.header, self.players.children),
                             refresh=True)
            return
        if final or time.monotonic() - self._last_line >= PLAIN_PROGRESS_EVERY_S:
            self._last_line = time.monotonic()
            self.err.print(self.progress.line(), highlight=False)
        for event in self.progress.events[self._shown:]:
            self.err.print(f"  {event}", highlight=False)
        self._shown = len(self.progress.events)


async def _watch(settings: Settings, config: DemoConfig, progress: Progress, header: str,
                 players: Cast, db: Database, publisher: asyncio.Task[None],
                 err: Console) -> bool:
    """Refresh progress until settled or the deadline; kill and restart a worker midway."""
    killed = not config.kill_worker or not players.workers
    deadline = progress.started + config.deadline
    display = _Display(err, header, progress, players)
    with display.live if display.live is not None else contextlib.nullcontext():
        while True:
            if publisher.done() and publisher.exception() is not None:
                raise DemoFailed(f"publishing failed: {publisher.exception()}")
            for child in players.children:
                if child.died():
                    raise child.failure()
            await _observe(settings, progress, players, db)
            if not killed and progress.settled_count >= config.invoices // 2:
                await _kill_and_restart(players.workers[0], progress)
                killed = True
            done = progress.settled and killed
            if done:
                progress.event("settled")
            display.show(final=done)
            if done:
                return True
            if time.monotonic() > deadline:
                progress.event(f"deadline of {config.deadline:g}s passed before settling")
                err.print(f"[red]not settled within {config.deadline:g}s:[/] {progress.line()}")
                return False
            await asyncio.sleep(REFRESH_S)  # the refresh period of the display


def _summary(result: DemoResult, config: DemoConfig, out: Console) -> None:
    progress = result.progress
    rate = progress.settled_count / result.elapsed_s if result.elapsed_s > 0 else 0.0
    if result.audit_code is None:
        verdict = "no audit"
    else:
        verdict = {0: "audit clean", 1: "audit FAILED"}.get(result.audit_code, "audit error")
    settled = "settled" if result.settled else "NOT SETTLED"
    out.print(f"demo: {progress.settled_count}/{progress.total} invoices {settled} in "
              f"{result.elapsed_s:.1f}s ({rate:.0f}/s), {verdict}", highlight=False)
    out.print(f"  {progress.issued} issued, {progress.rejected} rejected, {progress.error} "
              f"error, {progress.recovered} orphans repaired by recovery", highlight=False)
    out.print(f"  logs: {result.log_dir}", highlight=False, soft_wrap=True)
    if config.keep:
        from gapless.urls import redact_url

        url = redact_url(result.database_url)
        out.print(f"  kept: gapless status --database-url {url} --queue {result.queue}",
                  highlight=False, soft_wrap=True)
