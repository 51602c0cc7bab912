"""The benchmarks' harness: what every ``bench/*.py`` script shares, in one module.

* **Report** — :func:`machine`, :func:`median`, :func:`percentile`, :func:`print_table` (Markdown
  that ``bench/run_all.py`` pastes into docs/benchmarks.md).
* **Databases** — :func:`bench_database`: a throw-away database per run, cloned from a template
  migrated once per process (``CREATE DATABASE … TEMPLATE``), dropped afterwards.
* **Processes** — :func:`free_port`, :func:`wait_for_port`, :func:`wait_until` (a condition and
  a deadline, never a bare sleep), :class:`Proc` (a subprocess with its log, CPU time and RSS from
  /proc), :func:`start_mock` / :func:`mock_integrator` (``gapless mock-integrator``),
  :func:`start_api` (``gapless api``), :func:`start_workers` (``gapless worker`` processes).
* **Broker** — :func:`queue_prefix` (every run its own queue names, as the tests do),
  :func:`settings_of`, :func:`publish`, :func:`delete_queues`.
* **Worker runs** — :func:`environment` (database, series, queue prefix, mock reset), and
  counting what was issued: :func:`issued_count`, :func:`wait_issued`, :func:`issued_before`
  (:func:`issued_before_on`, also the tests').
* **Documents** — :func:`json_document`, :func:`gib_findings` (GİB's XSD and schematron).
* **Private replicated servers** (bench/ha.py) — :class:`PrivateRabbitCluster` (three nodes),
  :class:`PrivatePostgresPair` (a primary and its streaming standby).

Nothing here imports ``tests``; the tests import from here what both need (GİB's validator, the
helpers of private servers), so that each piece exists once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import os
import platform
import pwd
import secrets
import shutil
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
from alembic import command
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.connection import connect_once
from gapless.amqp.publisher import Publisher
from gapless.amqp.topology import work_queues
from gapless.constants import dead_exchange_name, dead_queue_name
from gapless.integrator.base import MEDIA_JSON, Document
from gapless.issuing.render import JSON_FORMAT, canonical_json
from gapless.ledger.conninfo import driver_conninfo, with_database
from gapless.ledger.database import make_engine
from gapless.ledger.migrations import alembic_config, migrate
from gapless.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
#: ``gapless`` as a subprocess, from this interpreter.
GAPLESS = [sys.executable, "-m", "gapless"]
#: The processes' logs of the last runs (outside the tree).
LOGS = Path(tempfile.gettempdir()) / "gapless-bench"
#: How long a process may take to come up on a small shared machine.
STARTUP_S = 60.0
#: How long one probe invoice may take to be issued behind a backlog.
ISSUE_DEADLINE_S = 600.0

T = TypeVar("T")


# ------------------------------------------------------------------------------------ report


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}")


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Print (and return) a Markdown table, ready to paste into docs/benchmarks.md."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [f"**{title}**", ""]
    for index, row in enumerate(cells):
        padded = (c.ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    table = "\n".join(lines)
    print(table)
    print()
    return table


# --------------------------------------------------------------------------------- databases

BASE_URL = os.environ.get("GAPLESS_DATABASE_URL", Settings().database_url)


def database_url(name: str) -> str:
    return with_database(BASE_URL, name)


def conninfo(url: str) -> str:
    return driver_conninfo(url)


def _admin(statement: sql.Composed) -> None:
    with psycopg.connect(conninfo(database_url("postgres")), autocommit=True) as conn:
        conn.execute(statement)


def _drop(name: str) -> None:
    _admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _exit_on_sigterm() -> None:
    """Make SIGTERM end this process through SystemExit, so that its ``finally`` blocks and
    atexit handlers still drop its databases (``timeout``, a killed run_all.py); the default
    action would leave them behind. Only where no handler was set already."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


@functools.cache
def _template() -> str:
    """This process's migrated template database (made on first use, dropped at exit)."""
    _exit_on_sigterm()
    name = f"gapless_bench_template_{uuid.uuid4().hex[:8]}"
    atexit.register(_drop, name)
    migrate(database_url(name), 0)
    return name


@contextmanager
def bench_database(label: str, revision: str | None = None) -> Iterator[str]:
    """A freshly migrated database for one benchmark run (a copy of the process's template),
    dropped afterwards; its URL. With ``revision``, an empty database brought up to that older
    schema version instead (a benchmark's "previous design": migrations from 0010 on are
    forward-only, so an older schema is made by stopping the upgrade there, not by stepping a
    migrated one down)."""
    name = f"gapless_bench_{label}_{uuid.uuid4().hex[:8]}"
    if revision is None:
        _admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(_template())))
    else:
        _admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        if revision is not None:
            command.upgrade(alembic_config(database_url(name)), revision)
            with psycopg.connect(conninfo(database_url(name)), autocommit=True) as conn:
                conn.execute("INSERT INTO gapless_config (cluster_id) VALUES (0)")
        yield database_url(name)
    finally:
        _drop(name)


# --------------------------------------------------------------------------------- processes


def clean_env() -> dict[str, str]:
    """This process's environment without any GAPLESS_* setting (a run sets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GAPLESS_")}


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], T], timeout: float, *, interval: float = 0.05,
               message: str = "condition", error: type[Exception] = TimeoutError) -> T:
    """Poll ``predicate`` until it returns a truthy value (returned) or ``timeout`` passes
    (``error``, TimeoutError unless told, naming ``message``: the tests' failures are
    AssertionErrors)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout:g}s waiting for {message}")
        time.sleep(interval)


def wait_for_port(port: int, timeout: float = 30.0, *,
                  error: type[Exception] = TimeoutError) -> None:
    """Wait until something accepts connections on loopback ``port`` (``error`` after
    ``timeout``)."""
    def is_open() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_until(is_open, timeout, message=f"port {port} to accept connections", error=error)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc; 0 once it is gone);
    with ``children``, those of its children it has waited for instead (cutime + cstime)."""
    return sum(cpu_split(pid, children=children))


def cpu_split(pid: int, *, children: bool = False) -> tuple[float, float]:
    """:func:`cpu_seconds` as (user, system) seconds: the process's own code, and the kernel's
    work on its behalf (system calls; on loopback, much of the other end's TCP receive too)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    first = 13 if children else 11
    return int(fields[first]) / CLOCK_TICKS, int(fields[first + 1]) / CLOCK_TICKS


#: The roles :func:`cpu_by_role` reports, in table order; ``other`` is the rest of the machine.
CPU_ROLES = ("workers", "postgres", "rabbitmq", "mock", "other")
#: Process names (``comm``) of the broker's runtime.
_RABBITMQ_COMMS = frozenset({"beam.smp", "erl_child_setup", "epmd", "inet_gethost"})


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy so far (every core; /proc/stat: user, nice,
    system, irq, softirq and steal — everything but idle and I/O wait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def cpu_by_role(workers: Sequence[int]) -> dict[str, float]:
    """CPU seconds used so far by the processes of each role on this machine: ``workers`` (the
    given pids), ``postgres`` (every PostgreSQL process: backends, WAL writer, checkpointer …),
    ``rabbitmq`` (the Erlang runtime), ``mock`` (``gapless mock-integrator``), and ``machine``
    (the whole machine, :func:`machine_cpu_s`). Two readings' difference is what a window cost;
    ``machine`` minus the roles is the rest (this script, the kernel, a backend that exited)."""
    totals = dict.fromkeys(CPU_ROLES[:-1], 0.0)
    wanted = set(workers)
    machine = machine_cpu_s()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        used = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if int(entry.name) in wanted:
            totals["workers"] += used
        elif comm == "postgres":
            totals["postgres"] += used
        elif comm in _RABBITMQ_COMMS:
            totals["rabbitmq"] += used
        elif b"mock-integrator" in cmdline:
            totals["mock"] += used
    totals["machine"] = machine
    return totals


def cpu_ms_per_item(before: dict[str, float], after: dict[str, float],
                    items: int) -> dict[str, float]:
    """CPU ms per item of each role between two :func:`cpu_by_role` readings, ``other`` (the
    machine's busy time the roles do not explain) and ``total`` (the machine's)."""
    if items <= 0:
        return dict.fromkeys((*CPU_ROLES, "total"), float("nan"))
    spent = {role: after[role] - before[role] for role in after}
    result = {role: 1000 * spent[role] / items for role in CPU_ROLES[:-1]}
    result["total"] = 1000 * spent["machine"] / items
    result["other"] = max(0.0, result["total"] - sum(result[r] for r in CPU_ROLES[:-1]))
    return result


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Proc:
    """A subprocess, its output kept in ``LOGS/<name>.log``; stopped with SIGTERM (then killed
    after 40 s)."""

    def __init__(self, args: list[str], env: dict[str, str], name: str, *,
                 metrics_port: int | None = None, url: str | None = None) -> None:
        self.metrics_port = metrics_port
        self.url = url
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, size: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-size:]

    def wait_for(self, marker: str, timeout: float = STARTUP_S) -> None:
        """Wait until ``marker`` is in the log (RuntimeError with the log's tail if the process
        exits or the deadline passes first)."""
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log_path.name}: exited before {marker!r}:\n"
                                   + self.log_tail())
            return marker in self.log_path.read_text(errors="replace")

        try:
            wait_until(seen, timeout, message=marker)
        except TimeoutError:
            raise RuntimeError(f"{self.log_path.name}: no {marker!r}:\n"
                               + self.log_tail()) from None

    def cpu_s(self) -> float:
        return cpu_seconds(self.proc.pid)

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds so far."""
        return cpu_split(self.proc.pid)

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_mock(latency_ms: float | None = None, *, name: str = "mock") -> Proc:
    """``gapless mock-integrator --seed 1`` on a free port, answering (its URL in ``.url``)."""
    port = free_port()
    args = [*GAPLESS, "mock-integrator", "--port", str(port), "--seed", "1"]
    if latency_ms is not None:
        args += ["--latency-ms", f"{latency_ms:g}"]
    url = f"http://127.0.0.1:{port}"
    proc = Proc(args, clean_env(), name, url=url)
    try:
        proc.wait_for("mock_integrator_started")

        def answers() -> bool:
            try:
                return httpx.get(f"{url}/admin/stats", timeout=1).is_success
            except httpx.HTTPError:
                return False

        wait_until(answers, 20, interval=0.1, message="answer from the mock integrator")
    except BaseException:
        proc.stop()
        raise
    return proc


@contextmanager
def mock_integrator(latency_ms: float | None = None, *, name: str = "mock") -> Iterator[str]:
    """:func:`start_mock` for the length of a block; its URL."""
    proc = start_mock(latency_ms, name=name)
    try:
        assert proc.url is not None
        yield proc.url
    finally:
        proc.stop()


def start_api(env: dict[str, str], token: str, *, name: str = "api") -> Proc:
    """``gapless api`` with the run's environment and ``token`` (an all-tenant bearer token) on
    a free port, answering /healthz (its base URL in ``.url``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Proc([*GAPLESS, "api", "--port", str(port)], {**env, "GAPLESS_API_TOKEN": token},
                name, url=url)

    def healthy() -> bool:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"gapless api exited:\n{proc.log_tail()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, STARTUP_S, interval=0.1, message="gapless api answering /healthz")
    except BaseException:
        proc.stop()
        raise
    return proc


def start_workers(env: dict[str, str], processes: int, concurrency: int, label: str, *,
                  command: Callable[[int], list[str]] | None = None,
                  marker: str = "worker_started") -> list[Proc]:
    """``processes`` workers, each started (``marker`` in its log) before this returns; each
    ``gapless worker --concurrency C --metrics-port P`` unless ``command(port)`` says otherwise.
    All are stopped if one fails to start."""
    procs: list[Proc] = []
    try:
        for index in range(processes):
            port = free_port()
            args = (command(port) if command else
                    [*GAPLESS, "worker", "--concurrency", str(concurrency),
                     "--metrics-port", str(port)])
            procs.append(Proc(args, env, f"{label}-{processes}x{concurrency}-{index}",
                              metrics_port=port))
        for proc in procs:
            proc.wait_for(marker)
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return procs


# ------------------------------------------------------------------------------------ broker


def queue_prefix(label: str) -> str:
    """A queue prefix (GAPLESS_QUEUE) of this run only: runs never share or purge queues."""
    return f"gapless_bench_{label}_{uuid.uuid4().hex[:8]}"


def settings_of(env: dict[str, str]) -> Settings:
    """The settings of a run's environment (its GAPLESS_* variables)."""
    given = {key.removeprefix("GAPLESS_").lower(): value for key, value in env.items()
             if key.startswith("GAPLESS_")}
    return Settings.model_validate(given)


async def publish(env: dict[str, str], messages: list[dict[str, Any]]) -> None:
    """Publish ``messages`` to the run's queues (confirmed, 200 in flight)."""
    async with Publisher(settings_of(env)) as publisher:
        for start in range(0, len(messages), 200):
            await asyncio.gather(*(publisher.publish(m) for m in messages[start:start + 200]))


async def queue_depth(env: dict[str, str]) -> int:
    """Messages ready in the run's work queues."""
    settings = settings_of(env)
    connection = await connect_once(settings)
    async with connection:
        channel = await connection.channel()
        total = 0
        for name in work_queues(settings):
            queue = await channel.declare_queue(name, passive=True)
            total += queue.declaration_result.message_count or 0
        return total


async def delete_queues(settings: Settings) -> None:
    """Delete a run's queues, its dead-letter queue and exchange."""
    connection = await connect_once(settings)
    async with connection:
        channel = await connection.channel()
        for name in (*work_queues(settings), dead_queue_name(settings.queue)):
            await channel.queue_delete(name)
        await channel.exchange_delete(dead_exchange_name(settings.queue))


# ------------------------------------------------------------------------------- worker runs


@contextmanager
def environment(label: str, mock_url: str, *, extra: dict[str, str] | None = None,
                database: Callable[[str], AbstractContextManager[str]] = bench_database,
                setup: Callable[[dict[str, str]], None] | None = None,
                ) -> Iterator[dict[str, str]]:
    """A run's GAPLESS_* environment: a fresh database with series bench/ABC, a fresh queue
    prefix (its queues deleted afterwards), the mock's ledger reset.

    ``extra``: more settings of the run (the broker's nodes, the queue type); ``database``:
    makes the run's database (default: a fresh one on the shared server); ``setup``: more
    preparation with the environment (a tenant's profile, more series).
    """
    httpx.post(f"{mock_url}/admin/reset", timeout=10).raise_for_status()
    with database(label) as url:
        env = clean_env()
        env.update({"GAPLESS_DATABASE_URL": url, "GAPLESS_QUEUE": queue_prefix(label),
                    "GAPLESS_INTEGRATOR_URL": mock_url, "GAPLESS_LOG_FORMAT": "json",
                    **(extra or {})})
        subprocess.run([*GAPLESS, "series", "add", "bench", "ABC"], env=env, check=True,
                       capture_output=True, cwd=ROOT)
        if setup:
            setup(env)
        try:
            yield env
        finally:
            asyncio.run(delete_queues(settings_of(env)))


async def _with_engine(env: dict[str, str], use: Callable[[AsyncEngine], Any]) -> Any:
    engine = make_engine(env["GAPLESS_DATABASE_URL"], actor="bench", pool_size=1)
    try:
        return await use(engine)
    finally:
        await engine.dispose()


async def issued_count(env: dict[str, str]) -> int:
    """How many invoices of the run are ISSUED."""
    async def count(engine: AsyncEngine) -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(text(
                "SELECT count(*) FROM invoices WHERE status = 'ISSUED'"))).scalar_one())

    return int(await _with_engine(env, count))


async def wait_issued(env: dict[str, str], invoice_id: str, started: float) -> float:
    """Seconds from ``started`` (``time.perf_counter``) until ``invoice_id`` is ISSUED (at most
    ``ISSUE_DEADLINE_S``)."""
    async def poll(engine: AsyncEngine) -> float:
        while True:
            async with engine.connect() as conn:
                status = (await conn.execute(text(
                    "SELECT status FROM invoices WHERE invoice_id = :i"),
                    {"i": invoice_id})).scalar_one_or_none()
            if status == "ISSUED":
                return time.perf_counter() - started
            if time.perf_counter() - started > ISSUE_DEADLINE_S:
                raise TimeoutError(f"{invoice_id} was not issued in {ISSUE_DEADLINE_S:g} s")
            await asyncio.sleep(0.01)  # a latency probe: the poll interval bounds its error

    return float(await _with_engine(env, poll))


async def issued_before_on(engine: AsyncEngine, invoice_id: str) -> int:
    """How many other invoices were ISSUED before ``invoice_id`` was (by feed position): what a
    user message did not overtake."""
    async with engine.connect() as conn:
        return int((await conn.execute(text("""
            SELECT count(*) FROM invoice_events e
             WHERE e.kind = 'issued' AND e.invoice_id <> :id
               AND e.sequence_id < (SELECT sequence_id FROM invoice_events
                                     WHERE invoice_id = :id AND kind = 'issued')
        """), {"id": invoice_id})).scalar_one())


async def issued_before(env: dict[str, str], invoice_id: str) -> int:
    """:func:`issued_before_on` the run's database."""
    return int(await _with_engine(env, lambda engine: issued_before_on(engine, invoice_id)))


# --------------------------------------------------------------------------------- documents


def json_document(tenant: str, number: str, invoice_id: str) -> Document:
    """The JSON document of an invoice of a tenant without an issuer profile (an empty message;
    its UUID fixed by tenant and invoice_id, as an invoice's is)."""
    fixed = uuid.uuid5(uuid.NAMESPACE_URL, f"gapless-bench:{tenant}:{invoice_id}")
    return Document.of(tenant=tenant, number=number, invoice_id=invoice_id, uuid=str(fixed),
                       body=canonical_json({}), media_type=MEDIA_JSON, format=JSON_FORMAT)


@functools.cache
def _validator() -> Any:
    """efatura-kontrol's validator (a dev dependency), its XSD and schematron compiled once per
    process.

    GİB's schematron refuses an IssueDate after the validator's own today (``current-date()``),
    and GİB validates on Turkish time: on a host running on UTC, a document dated today in
    Istanbul would be "in the future" from 21:00 to midnight UTC. So the validating process runs
    on Istanbul's clock, as GİB's does (set before the XSLT engine starts).
    """
    os.environ["TZ"] = "Europe/Istanbul"
    time.tzset()
    from efatura_kontrol import kontrol  # type: ignore[import-untyped,unused-ignore]

    kontrol.hazirla()
    return kontrol.kontrol_et


#: The two "hesap" (arithmetic) warnings that line discounts raise, because efatura-kontrol reads
#: LegalMonetaryTotal the EN 16931 way (LineExtensionAmount = Σ line net amounts,
#: AllowanceTotalAmount = document-level allowances only) while gapless writes it the way Turkish
#: invoices show it: goods before discounts, the line discounts' total, then the VAT base
#: (TaxExclusiveAmount = LineExtensionAmount − AllowanceTotalAmount, which efatura-kontrol checks
#: and which holds). :func:`_discount_convention_holds` accepts them only when the document's
#: numbers are exactly that convention's.
_DISCOUNT_CONVENTION = frozenset({"hesap-dip-satir", "hesap-dip-indirim"})
#: UBL's namespaces, by the prefixes the documents use.
UBL_NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
          "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}


def parse_ubl(document: bytes) -> Any:
    """The document's root element (no entities resolved, no network)."""
    from lxml import etree

    return etree.fromstring(document, etree.XMLParser(resolve_entities=False, no_network=True))


def _discount_convention_holds(document: bytes) -> bool:
    """LineExtensionAmount = Σ line net + Σ line discounts, AllowanceTotalAmount = Σ line
    discounts, and no document-level allowance or charge."""
    root = parse_ubl(document)

    def amount(element: Any, path: str) -> Decimal:
        return Decimal(element.findtext(path, namespaces=UBL_NS) or "0")

    if root.find("cac:AllowanceCharge", UBL_NS) is not None:
        return False
    lines = root.findall("cac:InvoiceLine", UBL_NS)
    nets = sum((amount(line, "cbc:LineExtensionAmount") for line in lines), Decimal(0))
    discounts = sum((amount(charge, "cbc:Amount") for line in lines
                     for charge in line.findall("cac:AllowanceCharge", UBL_NS)
                     if charge.findtext("cbc:ChargeIndicator", namespaces=UBL_NS) == "false"),
                    Decimal(0))
    total = "cac:LegalMonetaryTotal/cbc:"
    return (amount(root, total + "LineExtensionAmount") == nets + discounts
            and amount(root, total + "AllowanceTotalAmount") == discounts)


def gib_findings(document: bytes) -> list[str]:
    """Every error GİB's XSD and schematron find in a UBL-TR document, and every inconsistency of
    its amounts ("hesap" warnings), one line each; empty when it passes."""
    report = _validator()(document)
    problems = [f for f in report.bulgular if f.seviye == "hata" or f.kaynak == "hesap"]
    if {f.kod for f in problems} & _DISCOUNT_CONVENTION and _discount_convention_holds(document):
        problems = [f for f in problems if f.kod not in _DISCOUNT_CONVENTION]
    return [f"{f.kaynak}/{f.kod}: {f.mesaj}" for f in problems]


# ------------------------------------------------------- private replicated servers (bench/ha.py)
#
# A three-node RabbitMQ cluster and a PostgreSQL primary with a streaming standby, in temp dirs
# on free ports, removed afterwards; the shared servers are never reconfigured. Finding the
# servers' programs (:func:`postgres_bin_dir`, :func:`rabbitmq_scripts`, :func:`epmd_binary`),
# :class:`ServiceUnavailable`, :func:`amqp_listening`, :func:`tail` and :func:`kill_group` are
# also the tests' (tests/private_services.py, tests/ha/); the servers here are cut to what the
# bench needs (start, URLs, databases, close), the tests' also crash, restart and promote.

#: Temp dirs are named like this, so a leftover of a killed run is easy to spot.
TEMP_PREFIX = "gapless-bench-private-"
#: How long the nodes may take to see each other as running after they are up.
FORM_S = 60.0
#: Where distributions install the servers (besides the PATH and the GAPLESS_TEST_* overrides).
POSTGRES_LIB_DIR = Path("/usr/lib/postgresql")
RABBITMQ_SBIN_DIR = Path("/usr/lib/rabbitmq/bin")
ERLANG_LIB_DIR = Path("/usr/lib/erlang")


class ServiceUnavailable(Exception):
    """A private server cannot run here (no binaries, no account to run them as, …); the
    message says why (the tests' skip reason)."""


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a server started in a session of its own).

    Only while the leader has not been reaped (``poll()`` returned None): until then no other
    process can own that group id.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def postgres_bin_dir(programs: Sequence[str] = ("initdb", "pg_ctl")) -> Path:
    """Where ``programs`` (PostgreSQL's server binaries) live: GAPLESS_TEST_PG_BIN,
    ``pg_config --bindir``, the newest /usr/lib/postgresql/*/bin, or the PATH."""
    candidates: list[Path] = []
    if configured := os.environ.get("GAPLESS_TEST_PG_BIN"):
        candidates.append(Path(configured))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            candidates.append(Path(subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10,
                check=True).stdout.strip()))

    def version(path: Path) -> float:
        try:
            return float(path.parent.name)
        except ValueError:
            return 0.0

    candidates += sorted(POSTGRES_LIB_DIR.glob("*/bin"), key=version, reverse=True)
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).parent)
    for path in candidates:
        if all((path / name).is_file() for name in programs):
            return path
    raise ServiceUnavailable(f"PostgreSQL server binaries ({', '.join(programs)}) not found; "
                             "set GAPLESS_TEST_PG_BIN to their directory")


class PrivatePostgres:
    """A PostgreSQL server of one run, in a temp dir, on a free port (tests/private_services.py
    adds stopping and restarting it).

    ``fsync = off`` keeps a crash of the server honest: see tests/private_services.py."""

    SUPERUSER = "postgres"

    def __init__(self, *, programs: Sequence[str] = ("initdb", "pg_ctl", "pg_basebackup"),
                 temp_prefix: str = TEMP_PREFIX) -> None:
        self.bin_dir = postgres_bin_dir(programs)
        self.account: pwd.struct_passwd | None = None
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            try:
                self.account = pwd.getpwnam("postgres")
            except KeyError:
                raise ServiceUnavailable("running as root and there is no 'postgres' user to "
                                         "run initdb as") from None
        self.root = Path(tempfile.mkdtemp(prefix=f"{temp_prefix}pg-"))
        if self.account is not None:
            os.chown(self.root, self.account.pw_uid, self.account.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()

    def run(self, *args: str, timeout: float = STARTUP_S) -> subprocess.CompletedProcess[str]:
        """One of the server's programs (``initdb``, ``pg_ctl``, …) as the server's account."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        account = self.account
        return subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]], capture_output=True, text=True,
            timeout=timeout, cwd=self.root, env=env, check=False,
            user=None if account is None else account.pw_uid,
            group=None if account is None else account.pw_gid,
            extra_groups=None if account is None else [])

    def pg_ctl(self, *args: str, timeout: float = STARTUP_S) -> subprocess.CompletedProcess[str]:
        # -l every time: without it the server's log would go to pg_ctl's captured stdout, and
        # the server would hold that pipe open after pg_ctl returned.
        return self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), *args,
                        timeout=timeout)

    def init(self, conf: str = "") -> None:
        result = self.run("initdb", "-D", str(self.data), "-U", self.SUPERUSER, "--auth=trust",
                          "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
        if result.returncode != 0:
            raise ServiceUnavailable(f"initdb failed ({result.returncode}): "
                                     f"{(result.stderr or result.stdout)[-2000:]}")
        with (self.data / "postgresql.conf").open("a") as file:
            file.write(f"""
# gapless: a private server (bench/harness.py)
listen_addresses = '127.0.0.1'
port = {self.port}
unix_socket_directories = '{self.root}'
max_connections = 200
# A server-process crash keeps what was written to the kernel (tests/private_services.py).
fsync = off
synchronous_commit = on
full_page_writes = off
{conf}""")

    def start(self) -> None:
        result = self.pg_ctl("start", "-w", "-t", str(int(STARTUP_S)), timeout=STARTUP_S + 10)
        if result.returncode != 0:
            raise ServiceUnavailable(f"private PostgreSQL did not start within {STARTUP_S:g}s "
                                     f"({result.stdout.strip()} {result.stderr.strip()}):\n"
                                     f"{tail(self.log)}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def _is_our_postmaster(self, pid: int) -> bool:
        """Whether ``pid`` is a postgres process on this data directory (not a reused pid)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.data).encode() in cmdline

    def url(self, database: str) -> str:
        return f"postgresql://{self.SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def close(self) -> None:
        """Stop the server if it runs (immediate: nothing needs its data) and remove the temp
        dir. The postmaster is killed by its pid if pg_ctl cannot stop it."""
        try:
            if (self.data / "postmaster.pid").exists():
                pid = self.postmaster_pid()
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self.pg_ctl("stop", "-w", "-m", "immediate", "-t", "30", timeout=40)
                if pid is not None and (self.data / "postmaster.pid").exists() and \
                        self._is_our_postmaster(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def scalar(url: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    """One statement in autocommit mode; the first value of its first row (None: no row)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(query, params)
        row = cursor.fetchone() if cursor.description is not None else None
        return None if row is None else row[0]


class PrivatePostgresPair:
    """A primary and its streaming standby (``synchronous``: the primary waits for the standby
    at every commit), with a migrated template database on the primary."""

    STANDBY_NAME = "standby"
    SLOT = "gapless_standby"
    TEMPLATE = "gapless_template"

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PrivatePostgres()
        try:
            self.standby = PrivatePostgres()
        except BaseException:
            self.primary.close()
            raise

    def start(self) -> None:
        primary, standby = self.primary, self.standby
        primary.init("wal_level = replica\nmax_wal_senders = 5\nmax_replication_slots = 5\n"
                     "wal_sender_timeout = 10s\n")
        primary.start()
        scalar(primary.url("postgres"), "SELECT pg_create_physical_replication_slot(%s)",
                (self.SLOT,))
        result = standby.run(
            "pg_basebackup", "-D", str(standby.data), "-h", "127.0.0.1",
            "-p", str(primary.port), "-U", PrivatePostgres.SUPERUSER, "-R", "-X", "stream",
            "-S", self.SLOT, "--checkpoint=fast", "--no-sync")
        if result.returncode != 0:
            raise ServiceUnavailable(f"pg_basebackup failed ({result.returncode}): "
                                     f"{(result.stderr or result.stdout)[-2000:]}")
        with (standby.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {standby.port}\nunix_socket_directories = '{standby.root}'\n")
        # postgresql.auto.conf is read last: this primary_conninfo (naming the standby) wins
        # over the one pg_basebackup -R wrote.
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={primary.port} "
                       f"user={PrivatePostgres.SUPERUSER} application_name={self.STANDBY_NAME}'"
                       f"\nprimary_slot_name = '{self.SLOT}'\n")
        standby.start()
        if self.synchronous:
            # Only now: with no standby yet, every commit on the primary would wait for it.
            scalar(primary.url("postgres"), "ALTER SYSTEM SET synchronous_standby_names = "
                    f"'FIRST 1 ({self.STANDBY_NAME})'")
            scalar(primary.url("postgres"), "SELECT pg_reload_conf()")
        wanted = "sync" if self.synchronous else "async"
        wait_until(lambda: scalar(
            primary.url("postgres"), "SELECT sync_state FROM pg_stat_replication WHERE "
            "application_name = %s AND state = 'streaming'", (self.STANDBY_NAME,)) == wanted,
            30, message=f"the standby streaming ({wanted})")
        migrate(primary.url(self.TEMPLATE), 0)

    def url(self, database: str) -> str:
        """The multi-host URL of ``database``: both servers, the writable one chosen by libpq."""
        return (f"postgresql://{PrivatePostgres.SUPERUSER}@127.0.0.1:{self.primary.port},"
                f"127.0.0.1:{self.standby.port}/{database}?target_session_attrs=read-write")

    def clone_template(self, name: str) -> str:
        """Database ``name`` cloned on the primary from the migrated template; its URL."""
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.TEMPLATE)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.primary.url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def close(self) -> None:
        try:
            self.standby.close()
        finally:
            self.primary.close()


def rabbitmq_scripts() -> tuple[Path, Path]:
    """``rabbitmq-server`` and ``rabbitmqctl`` themselves, not a distribution's wrapper that
    switches to the ``rabbitmq`` user and its home (Debian's rabbitmq-script-wrapper)."""
    found = []
    for name in ("rabbitmq-server", "rabbitmqctl"):
        script = None
        configured = os.environ.get("GAPLESS_TEST_RABBITMQ_SBIN")
        for directory in [*([Path(configured)] if configured else []), RABBITMQ_SBIN_DIR]:
            if (directory / name).is_file():
                script = directory / name
                break
        if script is None and (on_path := shutil.which(name)):
            resolved = Path(on_path).resolve()
            script = resolved.parent / name if resolved.name.endswith("wrapper") else resolved
        if script is None or not script.is_file():
            raise ServiceUnavailable(f"{name} not found (install rabbitmq-server, or set "
                                     f"GAPLESS_TEST_RABBITMQ_SBIN to its sbin directory)")
        found.append(script)
    return found[0], found[1]


def epmd_binary() -> Path:
    if on_path := shutil.which("epmd"):
        return Path(on_path)
    for candidate in sorted(ERLANG_LIB_DIR.glob("erts-*/bin/epmd"), reverse=True):
        return candidate
    raise ServiceUnavailable("epmd (Erlang) not found")


def amqp_listening(port: int) -> bool:
    """True when an AMQP 0-9-1 server answers the protocol header on ``port`` (Connection.Start:
    a method frame), not merely when something accepts TCP connections there."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return sock.recv(1) == b"\x01"
    except OSError:
        return False


class PrivateRabbitCluster:
    """``size`` private RabbitMQ nodes clustered together: names of this run only, one Erlang
    cookie, one private epmd (never the machine's on 4369). Node 1 is every node's one listed
    peer (``classic_config``): it starts alone, then the others join it as they boot."""

    def __init__(self, size: int = 3) -> None:
        self.server_script, self.ctl_script = rabbitmq_scripts()
        self.epmd_bin = epmd_binary()
        self.epmd_port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}rabbitmq-"))
        run = secrets.token_hex(4)
        self.names = [f"gapless-bench-{run}-{index}@localhost" for index in range(1, size + 1)]
        self.ports = [free_port() for _ in self.names]
        cookie = "".join(secrets.choice(string.ascii_uppercase) for _ in range(20))
        self.envs = [self._environment(index, cookie) for index in range(size)]
        self._epmd: subprocess.Popen[bytes] | None = None
        self._servers: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def amqp_url(self) -> str:
        """Every node's URL, comma-separated: the form ``GAPLESS_AMQP_URL`` takes."""
        return ",".join(f"amqp://guest:guest@127.0.0.1:{port}/" for port in self.ports)

    def _environment(self, index: int, cookie: str) -> dict[str, str]:
        root = self.root / f"node{index + 1}"
        root.mkdir()
        (root / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.ports[index]}\n"
            "loopback_users.guest = true\nlog.console = false\nlog.file.level = info\n"
            "cluster_formation.peer_discovery_backend = classic_config\n"
            f"cluster_formation.classic_config.nodes.1 = {self.names[0]}\n")
        (root / "enabled_plugins").write_text("[].\n")  # no management listener
        (root / "rabbitmq-env.conf").write_text("")  # not the system's /etc/rabbitmq one
        cookie_file = root / ".erlang.cookie"
        cookie_file.write_text(cookie)
        cookie_file.chmod(0o400)
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(root),  # the Erlang cookie of the node and of rabbitmqctl
            "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.names[index], "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.ports[index]),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_CONF_ENV_FILE": str(root / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_PID_FILE": str(root / "rabbitmq.pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(root / "plugins-expand"),
        })
        return env

    def _start_node(self, index: int) -> None:
        env = self.envs[index]
        with (Path(env["HOME"]) / "server.log").open("ab") as log:
            # A session of its own: the script, the Erlang VM and its helpers die as one group.
            server = subprocess.Popen([str(self.server_script)], env=env, cwd=env["HOME"],
                                      stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self._servers[index] = server

        def up() -> bool:
            if server.poll() is not None:
                raise ServiceUnavailable(f"RabbitMQ node {index + 1} exited at start "
                                         f"({server.returncode}):\n"
                                         f"{tail(Path(env['HOME']) / 'server.log')}")
            return amqp_listening(self.ports[index])

        wait_until(up, STARTUP_S, interval=0.1, message=f"RabbitMQ node {index + 1}")

    def kill_node(self, index: int) -> None:
        """A crash of node ``index + 1``: SIGKILL to its process group; its data stays, and
        :meth:`start_node` brings it back from it."""
        server = self._servers[index]
        if server.poll() is None:
            kill_group(server.pid)
        server.wait(timeout=60)

    def start_node(self, index: int) -> None:
        """Start node ``index + 1`` again on its data directory; returns once it speaks AMQP."""
        self._start_node(index)

    def _running_nodes(self) -> set[str]:
        """The nodes node 1 sees running in its cluster (empty while it does not answer)."""
        try:
            result = subprocess.run(
                [str(self.ctl_script), "-n", self.names[0], "cluster_status", "--formatter",
                 "json"], env=self.envs[0], cwd=self.envs[0]["HOME"], capture_output=True,
                text=True, timeout=60, check=False)
            return set(json.loads(result.stdout)["running_nodes"]) & set(self.names)
        except (ValueError, KeyError, subprocess.TimeoutExpired):
            return set()

    def start(self) -> None:
        """The epmd, node 1, then the others side by side; returns once node 1 sees them all
        running."""
        self._epmd = subprocess.Popen(
            [str(self.epmd_bin), "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for_port(self.epmd_port, 20)
        self._start_node(0)
        with ThreadPoolExecutor(max(1, len(self.names) - 1)) as pool:
            list(pool.map(self._start_node, range(1, len(self.names))))  # raises the first error
        wait_until(lambda: len(self._running_nodes()) == len(self.names), FORM_S, interval=0.2,
                   message=f"{len(self.names)} RabbitMQ nodes running as one cluster")

    def close(self) -> None:
        """Kill every node by its process group (the data is thrown away), stop the epmd and
        remove the temp dir."""
        try:
            for server in self._servers.values():
                if server.poll() is None:  # not reaped: the group id is still the node's
                    kill_group(server.pid)
                with contextlib.suppress(subprocess.SubprocessError):
                    server.wait(timeout=10)
            if self._epmd is not None and self._epmd.poll() is None:
                self._epmd.terminate()
                self._epmd.wait(timeout=10)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
