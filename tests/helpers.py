"""Test helpers: conditions with deadlines, free ports, gapless processes in subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar
from zoneinfo import ZoneInfo

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import harness
from gapless.integrator.base import Document
from gapless.issuing.render import JSON_FORMAT, canonical_json
from gapless.ledger.database import Database
from tests import forked

GAPLESS = [sys.executable, "-m", "gapless"]
ROOT = Path(__file__).resolve().parent.parent


def ledger(engine: AsyncEngine) -> Database:
    """The ledger's handle on ``engine``'s pool: tests keep their engines for their own SQL and
    hand the domain functions this."""
    return Database.borrowing(engine)


def today(tz: str = "Europe/Istanbul") -> str:
    """Today's date in a series' time zone (a message's issue_date must not be in the future
    there, nor older than the window)."""
    return datetime.now(ZoneInfo(tz)).date().isoformat()


def json_document(tenant: str, number: str, invoice_id: str,
                  payload: dict[str, Any] | None = None, *,
                  document_uuid: str | None = None) -> Document:
    """The JSON document of an invoice of a tenant without an issuer profile (its UUID fixed by
    tenant and invoice_id, as an invoice's is)."""
    fixed = uuid.uuid5(uuid.NAMESPACE_URL, f"gapless-test:{tenant}:{invoice_id}")
    return Document.of(tenant=tenant, number=number, invoice_id=invoice_id,
                       uuid=document_uuid or str(fixed),
                       body=canonical_json(payload or {}), media_type="application/json",
                       format=JSON_FORMAT)


def wait_until(predicate: Callable[[], Any], timeout: float, *, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes (then fail):
    bench/harness.py's :func:`~bench.harness.wait_until`, failing with an AssertionError."""
    return harness.wait_until(predicate, timeout, interval=interval, message=message,
                              error=AssertionError)


def at_once(check: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    """A predicate for :func:`await_until` that checks this process's own state (no I/O)."""
    async def predicate() -> object:
        return check()
    return predicate


async def loop_turns(count: int = 20) -> None:
    """Let the event loop run ``count`` turns: what is ready runs, no time passes (to see that
    something waits, where waiting on a condition cannot show it)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def await_until(predicate: Callable[[], Awaitable[Any]], timeout: float, *,
                      interval: float = 0.05, message: str = "condition") -> Any:
    """Async twin of :func:`wait_until`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(interval)


async def await_sql(engine: AsyncEngine, query: str, timeout: float, *, message: str,
                    interval: float = 0.05, **params: Any) -> None:
    """Wait until the one-value ``query`` (bound ``params``) answers true, each try its own
    transaction."""

    async def answered() -> bool:
        async with engine.connect() as conn:
            return bool((await conn.execute(text(query), params)).scalar_one())

    await await_until(answered, timeout, interval=interval, message=message)


#: Ports for servers the tests start, below Linux's ephemeral range (32768–60999), so that no
#: outgoing connection of the run (thousands: PostgreSQL, RabbitMQ, the mock) can take a port
#: between the moment it is chosen and the moment the server binds it. Each pytest-xdist process
#: draws from its own slice, so two processes never choose the same port.
_PORTS_FIRST, _PORTS_END = 20000, 32768
_given: set[int] = set()


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    size = (_PORTS_END - _PORTS_FIRST) // max(count, 1)
    first = _PORTS_FIRST + (index % max(count, 1)) * size
    return range(first, first + size)


def free_port() -> int:
    """A loopback port nothing listens on, never given before in this process (see above)."""
    ports = _port_slice()
    for _ in range(200):
        port = random.choice(ports)
        if port in _given:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {ports.start}..{ports.stop - 1}")


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    harness.wait_for_port(port, timeout, error=AssertionError)


def text_after(path: Path, offset: int) -> str:
    """What the log file at ``path`` holds after byte ``offset`` (its size before something
    happened), undecodable bytes replaced."""
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


class GaplessProcess:
    """A ``gapless`` sub-command running in a subprocess, its output kept in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str) -> None:
        self.args = args
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("ab")
        self.proc: subprocess.Popen[bytes] | forked.ForkedProcess
        if forked.enabled():
            self.proc = forked.ForkedProcess(args, env, ROOT, stdout_path=self.log_path)
        else:
            self.proc = subprocess.Popen(
                [*GAPLESS, *args], env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()


def run_gapless(args: list[str], env: dict[str, str], *, timeout: float = 120.0,
                input_text: str | None = None,
                address_space: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run a ``gapless`` command to completion and capture its output (forked from a warm
    interpreter, :mod:`tests.forked`)."""
    if forked.enabled():
        return forked.run(GAPLESS, args, env, ROOT, timeout=timeout, input_text=input_text,
                          address_space=address_space)

    def limit() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.run([*GAPLESS, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, input=input_text, check=False,
                          preexec_fn=limit)


def run_ok(argv: list[str], *, cwd: Path, env: dict[str, str],
           timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output unless it exits 0."""
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False)
    assert result.returncode == 0, (f"{' '.join(argv)} exited {result.returncode}\n"
                                    f"{result.stdout}\n{result.stderr}")
    return result


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 that the test can cut and restore: a service outage as the
    API sees it, without touching the shared PostgreSQL or RabbitMQ."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", self.port))
        except OSError:
            listener.close()
            raise
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Stop listening and reset every open connection."""
        if self._listener is not None:
            # shutdown wakes the thread blocked in accept(); close alone would not (Linux).
            self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                # The second pump of a pair closes both (the first only shut them down).
                if source not in self._sockets:
                    source.close()
                    sink.close()
                self._sockets.discard(source)
                self._sockets.discard(sink)


def schema_at(database_url: str, revision: str) -> None:
    """Rebuild the database's schema as migration ``revision`` left it (everything in it is
    dropped first): an older database to upgrade, now that forward-only migrations cannot be
    stepped down."""
    import psycopg
    from alembic import command

    from gapless.ledger.conninfo import driver_conninfo
    from gapless.ledger.migrations import alembic_config

    with psycopg.connect(driver_conninfo(database_url), autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    command.upgrade(alembic_config(database_url), revision)


T = TypeVar("T")
#: How many tasks :func:`together` starts.
CALLERS = 40


class GatedDatabase:
    """The real database handle, counting its reads by statement; while ``gate`` is clear a
    read waits for it (so that every caller has arrived before the first read answers), and
    ``fail_next`` makes the next read raise instead."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.reads: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_next = False

    async def _pass(self, query: str) -> None:
        self.reads[query] += 1
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise psycopg.OperationalError("the connection was lost")

    async def one(self, query: str, params: Any = None) -> Any:
        await self._pass(query)
        return await self.db.one(query, params)

    async def all(self, query: str, params: Any = None) -> list[Any]:
        await self._pass(query)
        return await self.db.all(query, params)


async def together(gated: GatedDatabase, call: Callable[[], Awaitable[T]],
                   callers: int = CALLERS) -> list[asyncio.Task[T]]:
    """``callers`` tasks making the same call while the reads are held; returns them once every
    one has made its call (each has run up to its first wait), the reads still held."""
    gated.gate.clear()
    arrived = 0

    async def caller() -> T:
        nonlocal arrived
        arrived += 1
        return await call()

    async def all_arrived() -> bool:
        return arrived == callers

    tasks = [asyncio.create_task(caller()) for _ in range(callers)]
    await await_until(all_arrived, timeout=10, message="every caller arrived")
    return tasks
