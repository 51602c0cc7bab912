"""Database access: engines, the hot path's statements, and the start-up checks every process runs.

Two ways to PostgreSQL, both psycopg 3:

* :class:`Database` — the issuing path (the worker's intake and outcomes, recovery, operator
  actions on one invoice): each domain operation is **one statement in autocommit mode**, i.e.
  one round trip and one transaction, run on the driver connection with server-side prepared
  statements. A long-running process opens its own psycopg pool (:meth:`Database.open`); a
  short-lived caller borrows the connections of a SQLAlchemy engine (:meth:`Database.borrowing`).
* SQLAlchemy's async engine (:func:`make_engine`) — everything else: the API's reads, status,
  audit, migrations, operator listings, where a statement's client cost does not matter.

SQL text lives in ``gapless.queries``; this module only opens connections and classifies driver
errors.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gapless.errors import ClusterMismatchError, NotMigratedError
from gapless.queries import config as q

LOCK_NOT_AVAILABLE = "55P03"
#: Seconds to wait for a PostgreSQL connection to be made (every engine, pool and one-off
#: connection of gapless), so an unreachable server is an error, not a hang.
CONNECT_TIMEOUT_S = 10


def sqlalchemy_url(database_url: str, *, driver: str = "psycopg") -> URL:
    """``postgresql://…`` (the contract form) as a SQLAlchemy URL for psycopg 3."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        url = url.set(drivername=f"postgresql+{driver}")
    return url


def make_engine(database_url: str, *, actor: str = "sql", application_name: str | None = None,
                pool_size: int = 10, pre_ping: bool = True, **kwargs: Any) -> AsyncEngine:
    """An async engine for one kind of process.

    ``actor`` (worker, recovery, operator, api) is recorded on every event the process causes
    (the ``gapless.actor`` setting read by the history trigger); ``application_name``
    (default ``gapless-<actor>``) lets operators find the process's backends. ``pre_ping``
    tests each pooled connection before use (a round trip); the worker turns it off because it
    treats a dead connection as a passing database error and retries the delivery.
    """
    return create_async_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=pre_ping,
        connect_args={
            "application_name": application_name or f"gapless-{actor}",
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": f"-c gapless.actor={actor}",
        },
        **kwargs,
    )


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind a SQLAlchemy/psycopg error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None)


def is_lock_timeout(exc: BaseException) -> bool:
    """A lock wait ran past ``lock_timeout`` (SQLSTATE 55P03): the statement rolled back."""
    return (isinstance(exc, DBAPIError | psycopg.Error)
            and sqlstate(exc) == LOCK_NOT_AVAILABLE)


def driver_conninfo(database_url: str, *, dbname: str | None = None) -> str:
    """``postgresql://…`` as a libpq connection string (no SQLAlchemy driver suffix), on
    database ``dbname`` of the same server when given."""
    url = make_url(database_url).set(drivername="postgresql")
    if dbname is not None:
        url = url.set(database=dbname)
    return url.render_as_string(hide_password=False)


Params = Mapping[str, Any] | None
Connect = Callable[[], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]


class Database:
    """Statements of the issuing path, each one statement in autocommit mode.

    One statement is one transaction and one round trip: a lock it takes (an invoice row, a
    counter row) is released by its own commit, never held across a client round trip. Rows come
    back as named tuples. A statement that needs company (the test-only fault hook that pauses
    inside the claim) runs in :meth:`transaction`.
    """

    def __init__(self, connect: Connect, *, pool: AsyncConnectionPool | None = None) -> None:
        self._connect = connect
        self._pool = pool
        self._checking: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, database_url: str, *, actor: str, size: int,
                   application_name: str | None = None, timeout_s: float = 10.0) -> Database:
        """A pool of ``size`` connections of its own (worker, recovery); close it with
        :meth:`close`. One connection is made at once, so an unreachable database, a wrong
        password or a missing database fail here (``psycopg.OperationalError``); the pool fills
        in the background, and a statement waits up to ``timeout_s`` for a connection."""
        conninfo = driver_conninfo(database_url)
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S,
                  "application_name": application_name or f"gapless-{actor}",
                  "options": f"-c gapless.actor={actor}"}
        probe = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        await probe.close()
        pool: AsyncConnectionPool = AsyncConnectionPool(
            conninfo, min_size=size, max_size=size, open=False, timeout=timeout_s,
            name=f"gapless-{actor}", kwargs=kwargs)
        await pool.open(wait=False)
        return cls(pool.connection, pool=pool)

    @classmethod
    def borrowing(cls, engine: AsyncEngine) -> Database:
        """Statements on connections borrowed from ``engine``'s pool (short-lived callers:
        operator commands, tests). Nothing to close: the engine owns the connections."""
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

        @asynccontextmanager
        async def connect() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
            async with autocommit.connect() as conn:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert isinstance(driver, psycopg.AsyncConnection)
                yield driver

        return cls(connect)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._connect() as conn:
            try:
                yield conn
            except psycopg.OperationalError:
                if conn.broken or conn.closed:
                    self._check_pool()
                raise

    def _check_pool(self) -> None:
        """A connection broke (the server restarted, or dropped it): test the idle ones in the
        background and replace the dead, so the next statements do not each find one."""
        if self._pool is None or (self._checking is not None and not self._checking.done()):
            return
        self._checking = asyncio.get_running_loop().create_task(self._pool.check())

    async def one(self, query: str, params: Params = None) -> Any:
        """The first row of one statement (a named tuple), or None."""
        async with self._connection() as conn:
            cursor = conn.cursor(row_factory=namedtuple_row)
            await cursor.execute(query, params, prepare=True)
            return await cursor.fetchone()

    async def all(self, query: str, params: Params = None) -> list[Any]:
        """Every row of one statement (named tuples)."""
        async with self._connection() as conn:
            cursor = conn.cursor(row_factory=namedtuple_row)
            await cursor.execute(query, params, prepare=True)
            return await cursor.fetchall()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Several statements in one transaction: committed on success, rolled back on error."""
        async with self._connection() as conn, conn.transaction():
            yield conn

    async def close(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
        if self._pool is not None:
            await self._pool.close()


_BORROWED: weakref.WeakKeyDictionary[AsyncEngine, Database] = weakref.WeakKeyDictionary()


def as_database(db: Database | AsyncEngine) -> Database:
    """``db`` itself, or the :class:`Database` borrowing an engine's connections (one per
    engine), so that callers holding an engine can run the issuing path's operations too."""
    if isinstance(db, Database):
        return db
    found = _BORROWED.get(db)
    if found is None:
        found = _BORROWED[db] = Database.borrowing(db)
    return found


def _cluster_id(row: Any) -> int:
    if row is None:
        raise NotMigratedError("the database has no cluster id; run `gapless migrate`")
    return int(row.cluster_id)


_NO_SCHEMA = "the database has no gapless schema; run `gapless migrate`"


async def stored_cluster_id(conn: AsyncConnection) -> int:
    """The cluster id recorded by ``gapless migrate`` (NotMigratedError when there is none)."""
    try:
        row = (await conn.exec_driver_sql(q.GET_CLUSTER_ID)).first()
    except DBAPIError as exc:
        if isinstance(exc.orig, psycopg.errors.UndefinedTable):
            raise NotMigratedError(_NO_SCHEMA) from exc
        raise
    return _cluster_id(row)


async def check_cluster(db: Database | AsyncEngine, configured: int) -> int:
    """Refuse to start when the configured cluster id disagrees with the database's.

    Raises NotMigratedError when the database has no gapless schema (or no cluster id),
    ClusterMismatchError on a mismatch; returns the cluster id.
    """
    try:
        stored = _cluster_id(await as_database(db).one(q.GET_CLUSTER_ID))
    except psycopg.errors.UndefinedTable as exc:
        raise NotMigratedError(_NO_SCHEMA) from exc
    if stored != configured:
        raise ClusterMismatchError(configured, stored)
    return stored
