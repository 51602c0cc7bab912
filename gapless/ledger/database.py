"""Database access: engines, the hot path's statements, and the start-up checks every process runs.

One handle, :class:`Database` (psycopg 3), for every domain function of the ledger: each
statement is a plain string with psycopg's named parameters (``%(name)s``) from
``gapless.ledger.queries``, run **in autocommit mode** — one round trip and one transaction —
with server-side prepared statements. Several statements that must commit together run in
:meth:`Database.transaction`; reads that must see one state of the database run in
:meth:`Database.snapshot` (REPEATABLE READ, READ ONLY). Both hand out a :class:`Database` bound
to that transaction, so the domain functions take the same handle in or out of one.

Where the connections come from is the caller's edge: a long-running process (worker, recovery,
the API) opens a psycopg pool of its own (:meth:`Database.open`); a short-lived one (operator
commands, the demo, tests) borrows the pool of a SQLAlchemy async engine (:func:`make_engine`,
:meth:`Database.borrowing`). Migrations use a synchronous engine (:func:`make_sync_engine`).

This module only opens connections and runs statements; driver errors are classified in
:mod:`gapless.ledger.sqlstates`.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from gapless.errors import ClusterMismatchError, NotMigratedError
from gapless.ledger.conninfo import conninfo_parts, driver_conninfo, libpq_url
from gapless.ledger.queries import config as q
from gapless.ledger.sqlstates import must_discard
from gapless.logging import get_logger

log = get_logger(__name__)


T = TypeVar("T")


#: Seconds to wait for a PostgreSQL connection to be made (every engine, pool and one-off
#: connection of gapless), so an unreachable server is an error, not a hang.
CONNECT_TIMEOUT_S = 10


#: How long a slot of :meth:`Database.open`'s pool keeps trying to connect (its attempts back
#: off 1, 2, 4 … s, the last one at this limit) before it is given up and made again, at once,
#: when a statement waits for a connection. Short, so that after a long outage (a failover)
#: the pool tries again within seconds of the promotion rather than after a doubled delay.
RECONNECT_TIMEOUT_S = 10.0

#: A pool opened with ``fail_fast`` (the API's): once a wait for a connection ended with none
#: lent to anyone meanwhile — the database out of reach, not merely busy —, how long each next
#: wait lasts, until a connection is lent again. A client then gets its 503 in a moment rather
#: than after the pool's whole timeout, while the pool keeps reconnecting.
UNREACHABLE_WAIT_S = 0.5


class IdleCheck:
    """psycopg_pool's ``check`` and ``reset`` callbacks for a pool whose connections must be
    alive when lent (the API answers a client: a dead connection is a 503), without a round
    trip per loan: a connection is tested (an empty query) only when it was not lent for
    ``idle_s`` seconds, or never yet. Under load connections come back within milliseconds and
    go out untested; after an outage (a restart, a failover) every idle one is tested and a
    dead one is replaced before any request meets it."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary())

    async def reset(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._returned[conn] = time.monotonic()

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        returned = self._returned.get(conn)
        if returned is None or time.monotonic() - returned >= self.idle_s:
            await AsyncConnectionPool.check_connection(conn)


def connect_kwargs(actor: str | None, application_name: str | None) -> dict[str, Any]:
    """The connection parameters gapless adds to the URL's (a connect timeout, and who the
    backend works for: ``application_name`` and the ``gapless.actor`` setting)."""
    kwargs: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
    if actor is not None:
        kwargs["application_name"] = application_name or f"gapless-{actor}"
        kwargs["options"] = f"-c gapless.actor={actor}"
    elif application_name is not None:
        kwargs["application_name"] = application_name
    return kwargs


def _discard_on_handle_error(context: ExceptionContext) -> None:
    """SQLAlchemy's ``handle_error`` hook: a connection that met DISCARD_SQLSTATES is treated
    as disconnected, so the pool invalidates it instead of lending it out again."""
    if context.original_exception is not None and must_discard(context.original_exception):
        context.is_disconnect = True


def make_engine(database_url: str, *, actor: str = "sql", application_name: str | None = None,
                pool_size: int = 10, pre_ping: bool = True, **kwargs: Any) -> AsyncEngine:
    """An async engine for one kind of process.

    ``actor`` (worker, recovery, operator, api) is recorded on every event the process causes
    (the ``gapless.actor`` setting read by the history trigger); ``application_name``
    (default ``gapless-<actor>``) lets operators find the process's backends. ``pre_ping``
    tests each pooled connection before use (a round trip); the worker turns it off because it
    treats a dead connection as a passing database error and retries the delivery.

    Connections are made by psycopg from the URL itself (:func:`libpq_url`), so a multi-host
    URL with ``target_session_attrs=read-write`` reaches whichever host is the primary now; a
    connection that meets a read-only server or a shutdown is discarded, never lent again.
    """
    url = libpq_url(database_url)
    conninfo_parts(url)
    connect_params = connect_kwargs(actor, application_name)

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(url, **connect_params)

    engine = create_async_engine(
        "postgresql+psycopg://", async_creator=connect, pool_size=pool_size,
        max_overflow=pool_size, pool_pre_ping=pre_ping, **kwargs)
    event.listen(engine.sync_engine, "handle_error", _discard_on_handle_error)
    return engine


def make_sync_engine(database_url: str, **kwargs: Any) -> Engine:
    """A synchronous engine without a pool (migrations, schema checks): one connection per
    ``connect()``, made by psycopg from the URL itself (multi-host URLs included)."""
    url = libpq_url(database_url)
    conninfo_parts(url)
    connect_params = connect_kwargs(None, None)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(url, **connect_params)

    engine = create_engine("postgresql+psycopg://", creator=connect, poolclass=NullPool,
                           **kwargs)
    event.listen(engine, "handle_error", _discard_on_handle_error)
    return engine


Params = Mapping[str, Any] | None


async def to_completion(statement: Awaitable[T]) -> T:
    """Await ``statement`` (a database call already on its way) to its end, whatever happens
    to the caller meanwhile; a cancellation of the caller takes effect only then.

    Why: psycopg answers a cancelled ``execute`` by sending PostgreSQL a cancel request. For a
    statement in autocommit mode, or a COMMIT, that is a cancelled *commit*; and a commit that
    waits for a synchronous standby, cancelled, is kept on the primary and reported as a success
    ("canceling wait for synchronous replication … the transaction has already committed
    locally, but might not have been replicated to the standby"). A failover then loses it —
    a sealed number that the standby never had, handed out again. So no cancellation (a
    shutdown's, a timeout's) reaches a statement once it is sent: the caller waits for the
    outcome, then goes on being cancelled. Used by every statement of :class:`Database` (the
    issuing path: seals, claims, outcomes).
    """
    task = asyncio.ensure_future(statement)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError as exc:
        if task.cancelled():
            raise  # the statement's own task was cancelled, not the caller: nothing to wait for
        await outlast(task, exc)
        raise  # outlast always raises; for the type checker


async def outlast(sent: asyncio.Future[Any], interrupted: BaseException) -> NoReturn:
    """The rest of :func:`to_completion` for a caller cancelled (``interrupted``) while ``sent``
    (its statement, already on its way) runs: wait for ``sent`` to end, cancelled again or not,
    then raise the caller's cancellation. ``sent``'s own outcome is the database's business."""
    log.warning("database_cancel_deferred",
                detail="a sent statement is awaited to its end before the cancellation")
    while not sent.done():
        try:
            await asyncio.wait([sent])
        except asyncio.CancelledError as exc:
            interrupted = exc
    if not sent.cancelled():
        sent.exception()  # retrieved: its outcome is the database's business now
    raise interrupted


async def _fetch(conn: psycopg.AsyncConnection[Any], query: str, params: Params, *,
                 every: bool) -> Any:
    cursor = conn.cursor(row_factory=namedtuple_row)
    await cursor.execute(query, params, prepare=True)
    return await (cursor.fetchall() if every else cursor.fetchone())


async def _execute(conn: psycopg.AsyncConnection[Any], query: str, params: Params) -> int:
    cursor = conn.cursor()
    await cursor.execute(query, params, prepare=True)
    return cursor.rowcount


Connect = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]


class _Loan:
    """One connection of ``pool`` for one use: ``pool.connection()`` without its ``async with
    conn``, whose COMMIT (or ROLLBACK) is a no-op for connections in autocommit mode that still
    takes the connection's lock and runs a generator at every statement. A connection that comes
    back inside a transaction all the same (a failure between BEGIN and COMMIT) is rolled back
    by the pool, or discarded if a statement is still running. A class, not a generator: it is
    entered once per statement."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def __aenter__(self) -> psycopg.AsyncConnection[Any]:
        self._conn: psycopg.AsyncConnection[Any] = await self._pool.getconn()
        return self._conn

    async def __aexit__(self, *exc_info: object) -> None:
        await self._pool.putconn(self._conn)


class _Reach:
    """Whether a pool's database was reached lately (shared by a :class:`_FastLoan`'s loans)."""

    __slots__ = ("lent_at", "unreachable")

    def __init__(self) -> None:
        #: When a connection was last lent (monotonic clock).
        self.lent_at = 0.0
        #: Whether the last wait ended with no connection lent to anyone meanwhile.
        self.unreachable = False


class _FastLoan(_Loan):
    """A :class:`_Loan` that does not make every caller wait the pool's whole timeout while the
    database is out of reach: after a wait that ended with no connection lent to anyone since
    it began, the next waits last :data:`UNREACHABLE_WAIT_S`, until a connection is lent again.
    A pool that is only busy lends connections to others meanwhile, and its callers wait in
    full. Each short wait still queues for a connection, so the pool goes on reconnecting."""

    __slots__ = ("_reach",)

    def __init__(self, pool: AsyncConnectionPool, reach: _Reach) -> None:
        super().__init__(pool)
        self._reach = reach

    async def __aenter__(self) -> psycopg.AsyncConnection[Any]:
        reach = self._reach
        asked = time.monotonic()
        try:
            conn: psycopg.AsyncConnection[Any] = await self._pool.getconn(
                UNREACHABLE_WAIT_S if reach.unreachable else None)
        except PoolTimeout:
            if reach.lent_at < asked:
                reach.unreachable = True
            raise
        reach.lent_at = time.monotonic()
        reach.unreachable = False
        self._conn = conn
        return conn


class _Use:
    """:meth:`Database._connection`: a connection from the database's ``connect`` for one use.
    On a driver error that leaves it useless but open (a read-only server, a shutdown under
    way), a pooled connection is closed, so the pool drops it and connects again from the URL;
    a broken or closed one has the pool test its idle ones."""

    __slots__ = ("_conn", "_db", "_lent")

    def __init__(self, db: Database) -> None:
        self._db = db

    async def __aenter__(self) -> psycopg.AsyncConnection[Any]:
        self._lent = self._db._connect()
        self._conn: psycopg.AsyncConnection[Any] = await self._lent.__aenter__()
        return self._conn

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, traceback: TracebackType | None) -> bool | None:
        try:
            if isinstance(exc, psycopg.Error):
                conn = self._conn
                if self._db._pool is not None and must_discard(exc) and not conn.closed:
                    await conn.close()
                if conn.broken or conn.closed:
                    self._db._check_pool()
        finally:
            handled = await self._lent.__aexit__(exc_type, exc, traceback)
        return handled


@asynccontextmanager
async def _transaction(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[Database]:
    """A transaction on ``conn`` (a savepoint if one is open), and a Database bound to it."""
    transaction = conn.transaction()
    await transaction.__aenter__()
    try:
        yield Database._bound(conn)
    except BaseException as exc:
        if not await transaction.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await to_completion(transaction.__aexit__(None, None, None))


class Database:
    """The ledger's database handle: statements in autocommit mode, or in one transaction.

    Out of a transaction, one statement is one transaction and one round trip: a lock it takes
    (an invoice row, a counter row) is released by its own commit, never held across a client
    round trip. Rows come back as named tuples. :meth:`transaction` and :meth:`snapshot` hand
    out a Database bound to one connection inside one transaction: the same domain functions
    then run in the caller's transaction.
    """

    def __init__(self, connect: Connect, *, pool: AsyncConnectionPool | None = None) -> None:
        self._connect = connect
        self._pool = pool
        self._checking: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, database_url: str, *, actor: str, size: int,
                   application_name: str | None = None, timeout_s: float = 10.0,
                   check_idle_s: float | None = None, fail_fast: bool = False) -> Database:
        """A pool of ``size`` connections of its own (worker, recovery); close it with
        :meth:`close`. One connection is made at once, so an unreachable database, a wrong
        password or a missing database fail here (``psycopg.OperationalError``); the pool fills
        in the background, and a statement waits up to ``timeout_s`` for a connection.

        Every connection is made from the URL itself, so with several hosts and
        ``target_session_attrs=read-write`` a replacement connection finds the primary of the
        moment (after a promotion: the new one).

        ``check_idle_s``: a connection idle that long is tested before it is lent
        (:class:`IdleCheck`); by default none is (the worker and recovery treat a dead
        connection as a passing database error and retry).

        ``fail_fast``: once a wait for a connection ended with none lent to anyone, the next
        waits last :data:`UNREACHABLE_WAIT_S` until one is lent again (:class:`_FastLoan`; the
        API, whose clients get a 503 at once during an outage rather than after ``timeout_s``
        each)."""
        conninfo = driver_conninfo(database_url)
        kwargs: dict[str, Any] = {"autocommit": True,
                                  **connect_kwargs(actor, application_name)}
        probe = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        await probe.close()
        idle = None if check_idle_s is None else IdleCheck(check_idle_s)
        pool: AsyncConnectionPool = AsyncConnectionPool(
            conninfo, min_size=size, max_size=size, open=False, timeout=timeout_s,
            reconnect_timeout=RECONNECT_TIMEOUT_S, name=f"gapless-{actor}", kwargs=kwargs,
            check=None if idle is None else idle.check,
            reset=None if idle is None else idle.reset)
        await pool.open(wait=False)
        if fail_fast:
            return cls(functools.partial(_FastLoan, pool, _Reach()), pool=pool)
        return cls(functools.partial(_Loan, pool), pool=pool)

    @classmethod
    def borrowing(cls, engine: AsyncEngine) -> Database:
        """Statements on connections borrowed from ``engine``'s pool (short-lived callers: the
        API, operator commands, the demo, tests). Nothing to close: the engine owns the
        connections (dispose of the engine)."""
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

        @asynccontextmanager
        async def connect() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
            async with autocommit.connect() as conn:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert isinstance(driver, psycopg.AsyncConnection)
                try:
                    yield driver
                except psycopg.Error as exc:
                    if must_discard(exc):
                        await conn.invalidate()  # the engine's pool makes a new one
                    raise

        return cls(connect)

    @classmethod
    def _bound(cls, conn: psycopg.AsyncConnection[Any]) -> Database:
        """Statements on ``conn`` alone, in the transaction open on it."""

        @asynccontextmanager
        async def connect() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
            yield conn

        return cls(connect)

    def _connection(self) -> _Use:
        return _Use(self)

    def _check_pool(self) -> None:
        """A connection broke (the server restarted, or dropped it): test the idle ones in the
        background and replace the dead, so the next statements do not each find one."""
        if self._pool is None or (self._checking is not None and not self._checking.done()):
            return
        self._checking = asyncio.get_running_loop().create_task(self._pool.check())

    async def one(self, query: str, params: Params = None) -> Any:
        """The first row of one statement (a named tuple), or None.

        Once sent, the statement is awaited to its end even if the caller is cancelled (see
        :func:`to_completion`): in autocommit mode the statement is its own commit."""
        async with self._connection() as conn:
            return await to_completion(_fetch(conn, query, params, every=False))

    async def all(self, query: str, params: Params = None) -> list[Any]:
        """Every row of one statement (named tuples); awaited to its end like :meth:`one`."""
        async with self._connection() as conn:
            rows: list[Any] = await to_completion(_fetch(conn, query, params, every=True))
            return rows

    async def execute(self, query: str, params: Params = None) -> int:
        """One statement that returns no rows; how many rows it touched. Awaited to its end
        like :meth:`one`."""
        async with self._connection() as conn:
            return await to_completion(_execute(conn, query, params))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Database]:
        """Several statements in one transaction: committed on success, rolled back on error.
        Yields a Database bound to it (on a bound Database: a savepoint).

        A cancellation inside the block rolls back; the COMMIT, once sent, is awaited to its
        end (:func:`to_completion`)."""
        async with self._connection() as conn, _transaction(conn) as bound:
            yield bound

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[Database]:
        """Reads that see one state of the database: one REPEATABLE READ, READ ONLY transaction
        (``BEGIN`` says so: no extra round trip), no locks beyond MVCC; every statement of the
        block sees the snapshot its first one took. Yields a Database bound to it. Not on a
        Database already bound to a transaction."""
        async with self._connection() as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await conn.set_read_only(True)
            try:
                async with _transaction(conn) as bound:
                    yield bound
            finally:
                if not conn.closed:  # the connection goes back to its pool as it came
                    await conn.set_isolation_level(None)
                    await conn.set_read_only(None)

    async def close(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
        if self._pool is not None:
            await self._pool.close()


def _cluster_id(row: Any) -> int:
    if row is None:
        raise NotMigratedError("the database has no cluster id; run `gapless migrate`")
    return int(row.cluster_id)


@asynccontextmanager
async def short_lived(database_url: str, *, actor: str, pool_size: int = 1,
                      **engine_kwargs: Any) -> AsyncIterator[Database]:
    """A Database for a short-lived caller (an operator command, the demo): on the pool of an
    async engine of its own (:func:`make_engine`), disposed of when the block ends."""
    engine = make_engine(database_url, actor=actor, pool_size=pool_size, **engine_kwargs)
    try:
        yield Database.borrowing(engine)
    finally:
        await engine.dispose()


_NO_SCHEMA = "the database has no gapless schema; run `gapless migrate`"


async def stored_cluster_id(db: Database) -> int:
    """The cluster id recorded by ``gapless migrate`` (NotMigratedError when there is none, or
    no gapless schema at all)."""
    try:
        return _cluster_id(await db.one(q.GET_CLUSTER_ID))
    except psycopg.errors.UndefinedTable as exc:
        raise NotMigratedError(_NO_SCHEMA) from exc


async def check_cluster(db: Database, configured: int) -> int:
    """Refuse to start when the configured cluster id disagrees with the database's.

    Raises NotMigratedError when the database has no gapless schema (or no cluster id),
    ClusterMismatchError on a mismatch; returns the cluster id.
    """
    stored = await stored_cluster_id(db)
    if stored != configured:
        raise ClusterMismatchError(configured, stored)
    return stored
