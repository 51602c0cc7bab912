"""Fixtures: a fresh database per test (cloned from a template migrated once per session), a
unique queue prefix per test, and settings pointing at both.

PostgreSQL and RabbitMQ are the real servers named by GAPLESS_DATABASE_URL / GAPLESS_AMQP_URL
(defaults: the contract's loopback URLs). Nothing is mocked but the integrator, which runs as the
real ``gapless mock-integrator`` over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.conninfo import with_database
from gapless.ledger.database import make_engine
from gapless.settings import Settings, process_environment
from tests.helpers import GaplessProcess, GatedDatabase, free_port, ledger
from tests.mock_client import MockIntegratorClient, running_mock

RUN_ID = uuid.uuid4().hex[:10]
BASE_URL = os.environ.get("GAPLESS_DATABASE_URL", Settings().database_url)


def database_url(name: str) -> str:
    """GAPLESS_DATABASE_URL on database ``name`` (every host and parameter kept)."""
    return with_database(BASE_URL, name)


def admin_conninfo() -> str:
    return with_database(BASE_URL, "postgres")


def create_database(name: str, template: str | None = None) -> None:
    with psycopg.connect(admin_conninfo(), autocommit=True) as conn:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template))
        conn.execute(statement)


def drop_database(name: str) -> None:
    with psycopg.connect(admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    """A database migrated from schema/ once per test session; every test clones it."""
    from gapless.ledger.migrations import migrate

    name = f"gapless_tpl_{RUN_ID}"
    migrate(database_url(name), 0)
    yield name
    drop_database(name)


class DatabaseSupply:
    """Fresh copies of the template, one made ahead while the test before runs, and the used
    ones dropped behind it, on one background thread (in order: a copy is made before the drop
    queued after it).

    Each copy is made from the template exactly as a test's own ``CREATE DATABASE ... TEMPLATE``
    would be, so a test still starts on a database nothing has touched; the wait for PostgreSQL
    to copy and to drop (each drop forces a checkpoint) is no longer on the test's path. The
    queues of a finished test are deleted on the same thread. What fails there is raised when
    the session ends."""

    def __init__(self, template: str) -> None:
        self.template = template
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gapless-dbs")
        self._next: Future[str] | None = None
        self._chores: list[Future[None]] = []

    def _made(self) -> Future[str]:
        name = f"gapless_t_{RUN_ID}_{uuid.uuid4().hex[:8]}"

        def make() -> str:
            create_database(name, template=self.template)
            return name

        return self._thread.submit(make)

    def take(self) -> str:
        """A fresh copy of the template (made ahead); the next one is begun at once."""
        made = self._next if self._next is not None else self._made()
        self._next = self._made()
        return made.result()

    def later(self, chore: Callable[[], None]) -> None:
        """Run ``chore`` (a drop, a queue deletion) behind the tests."""
        self._chores = [done for done in self._chores if not done.done() or done.exception()]
        self._chores.append(self._thread.submit(chore))

    def close(self) -> None:
        if self._next is not None:
            spare = self._next.result()
            self._chores.append(self._thread.submit(drop_database, spare))
        self._thread.shutdown(wait=True)
        failed = [done.exception() for done in self._chores if done.exception() is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} clean-ups behind the tests failed; the first: "
                               f"{failed[0]!r}")


@pytest.fixture(scope="session")
def database_supply(template_db: str) -> Iterator[DatabaseSupply]:
    supply = DatabaseSupply(template_db)
    yield supply
    supply.close()


@pytest.fixture
def db_name(database_supply: DatabaseSupply) -> Iterator[str]:
    name = database_supply.take()
    yield name
    database_supply.later(lambda: drop_database(name))


@pytest.fixture
def db_url(db_name: str) -> str:
    return database_url(db_name)


@pytest.fixture
def queue_prefix(database_supply: DatabaseSupply) -> Iterator[str]:
    prefix = f"gapless_test_{RUN_ID}_{uuid.uuid4().hex[:8]}"
    yield prefix
    database_supply.later(lambda: _delete_queues(prefix))


def _delete_queues(prefix: str) -> None:
    """Remove every queue/exchange the test declared under its prefix (best effort)."""
    import asyncio

    import aio_pika

    from gapless.constants import dead_exchange_name, dead_queue_name, user_queue_name

    async def delete() -> None:
        try:
            connection = await aio_pika.connect(Settings().amqp_url, timeout=5)
        except Exception:  # broker gone: nothing to clean
            return
        async with connection:
            for queue in (prefix, user_queue_name(prefix), dead_queue_name(prefix)):
                channel = await connection.channel()
                with contextlib.suppress(Exception):  # absent queue
                    await channel.queue_delete(queue)
            channel = await connection.channel()
            with contextlib.suppress(Exception):  # absent exchange
                await channel.exchange_delete(dead_exchange_name(prefix))

    asyncio.run(delete())


@pytest.fixture
def settings(db_url: str, queue_prefix: str) -> Settings:
    return Settings(database_url=db_url, queue=queue_prefix)


@pytest.fixture
def gapless_env(settings: Settings) -> dict[str, str]:
    """Environment for gapless subprocesses of this test."""
    return process_environment(settings)


@pytest.fixture
async def engines(db_url: str) -> AsyncIterator[Callable[..., AsyncEngine]]:
    """Makes engines on the test's database (``engines(actor, pool_size=5)``); all disposed
    after the test."""
    made: list[AsyncEngine] = []

    def make(actor: str, *, pool_size: int = 5) -> AsyncEngine:
        made.append(make_engine(db_url, actor=actor, pool_size=pool_size))
        return made[-1]

    yield make
    for each in made:
        await each.dispose()


@pytest.fixture
def engine(engines: Callable[..., AsyncEngine]) -> AsyncEngine:
    return engines("test", pool_size=25)


@pytest.fixture
def gated(engine: AsyncEngine) -> GatedDatabase:
    """The test database's handle, its reads counted and held at will (:class:`GatedDatabase`)."""
    return GatedDatabase(ledger(engine))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture
def mock_integrator(log_dir: Path) -> Iterator[MockIntegratorClient]:
    """``gapless mock-integrator`` on a free port, no faults, seeded; stopped after the test."""
    with running_mock(log_dir, seed=1) as client:
        yield client


@pytest.fixture
def integrated_env(gapless_env: dict[str, str],
                   mock_integrator: MockIntegratorClient) -> dict[str, str]:
    """``gapless_env`` pointed at this test's mock integrator."""
    return {**gapless_env, "GAPLESS_INTEGRATOR_URL": mock_integrator.url}


class ApiServers:
    """Starts ``gapless api`` subprocesses on free ports; every one is stopped after the test."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.started: list[GaplessProcess] = []

    def start(self, tokens: str = "", *, extra_args: tuple[str, ...] = (),
              env: dict[str, str] | None = None, name: str = "api") -> tuple[str, GaplessProcess]:
        """``(base URL, process)`` of a running API with ``GAPLESS_API_TOKEN=tokens``."""
        import socket

        from tests.helpers import wait_until

        port = free_port()
        proc_env = {**self.env, **(env or {}), "GAPLESS_API_TOKEN": tokens}
        proc = GaplessProcess(["api", "--port", str(port), *extra_args], proc_env, self.log_dir,
                              f"{name}-{len(self.started)}")
        self.started.append(proc)

        def listening_or_dead() -> bool:
            if not proc.alive():
                return True
            with socket.socket() as sock:
                sock.settimeout(0.2)
                return sock.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening_or_dead, 30, message="gapless api to listen")
        if not proc.alive():
            raise AssertionError(f"gapless api exited at start-up:\n{proc.output()}")
        return f"http://127.0.0.1:{port}", proc

    def close(self) -> None:
        for proc in self.started:
            if proc.alive():
                proc.terminate(timeout=20)
            proc.close()


@pytest.fixture
def api_servers(gapless_env: dict[str, str], log_dir: Path) -> Iterator[ApiServers]:
    """Factory of ``gapless api`` subprocesses for this test's database and queue prefix."""
    servers = ApiServers(gapless_env, log_dir)
    yield servers
    servers.close()


# ------------------------------------------------------------------- lines for the summary

#: user_properties key of a line a test wants in the terminal summary. user_properties travel
#: with the test's report, so the lines reach the summary from pytest-xdist's processes too.
SUMMARY_KEY = "gapless_summary"
_summary_lines: list[str] = []


@pytest.fixture
def summary_line(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Print a line now (seen with ``-s``) and again in the terminal summary (always seen)."""

    def add(line: str) -> None:
        print(line)
        request.node.user_properties.append((SUMMARY_KEY, line))

    return add


def pytest_configure(config: pytest.Config) -> None:
    _name_where_unclosed_connections_were_opened()


def _name_where_unclosed_connections_were_opened() -> None:
    """Diagnostics of the test run only: psycopg warns of an async connection garbage-collected
    while open (a ResourceWarning) without saying whose it was, and the warning surfaces under
    whichever test the collector happened to run in. Every ``AsyncConnection.connect`` of the
    run keeps the stack that opened it, and the warning names it."""
    import traceback
    import warnings

    connection = psycopg.AsyncConnection
    if getattr(connection, "_gapless_traced", False):
        return
    connect = connection.connect.__func__  # type: ignore[attr-defined]
    collected = connection.__del__

    async def traced_connect(cls: type[psycopg.AsyncConnection[Any]], *args: Any,
                             **kwargs: Any) -> psycopg.AsyncConnection[Any]:
        conn = await connect(cls, *args, **kwargs)
        # The test that ran, and the project's own frames of the stack (SQLAlchemy's and
        # psycopg's are most of it); under SQLAlchemy's greenlet only the engine's side shows.
        frames = traceback.extract_stack(limit=80)[:-1]
        ours = [frame for frame in frames if "site-packages" not in frame.filename
                and "/lib/python3" not in frame.filename] or frames[-6:]
        conn._gapless_opened_at = (  # type: ignore[attr-defined]
            f"during {os.environ.get('PYTEST_CURRENT_TEST', 'no test')}\n"
            + "".join(traceback.format_list(ours[-12:])))
        return conn

    def traced_del(self: psycopg.AsyncConnection[Any]) -> None:
        opened = getattr(self, "_gapless_opened_at", None)
        if opened is None:
            collected(self)
            return

        def warn_naming_it(message: str, category: type[Warning]) -> None:
            warnings.warn(f"{message}; it was opened {opened}", category, stacklevel=2)

        # psycopg decides whether to warn (open, not a pool's); its warning gets the origin.
        collected(self, warn_naming_it)  # type: ignore[call-arg]

    connection.connect = classmethod(traced_connect)  # type: ignore[assignment,method-assign]
    connection.__del__ = traced_del  # type: ignore[method-assign]
    connection._gapless_traced = True  # type: ignore[attr-defined]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        _summary_lines.extend(str(value) for key, value in report.user_properties
                              if key == SUMMARY_KEY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _summary_lines:
        terminalreporter.section("what the service-restart tests saw")
        for line in _summary_lines:
            terminalreporter.write_line(line)


# ------------------------------------------------------------ xdist groups under pytest ≥ 9.2


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup``: send the tests of one ``xdist_group`` to one process again.

    pytest-xdist (3.8) names a test's group by setting ``item._nodeid`` to ``<nodeid>@<group>``
    in each worker, and its scheduler reads the group from that suffix. pytest 9.2 keeps a
    node's id in ``item._id`` instead, so the suffix never appears and every test is scheduled
    alone (pytest-dev/pytest-xdist#1386, open): a session fixture shared by a group (the private
    RabbitMQ cluster of tests/ha) would be started once per process. This sets the id xdist
    meant to set, where xdist did not.
    """
    if not getattr(config.option, "loadgroup", False):  # only in a loadgroup worker
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(groups)}"
        node_id = getattr(item, "_id", None)
        if groups and node_id is not None and not item.nodeid.endswith(suffix):
            item._id = type(node_id).parse(f"{item.nodeid}{suffix}")
