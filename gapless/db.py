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
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from gapless.errors import ClusterMismatchError, ConfigurationError, NotMigratedError
from gapless.logging import get_logger
from gapless.queries import config as q

log = get_logger(__name__)
T = TypeVar("T")

LOCK_NOT_AVAILABLE = "55P03"
#: Seconds to wait for a PostgreSQL connection to be made (every engine, pool and one-off
#: connection of gapless), so an unreachable server is an error, not a hang.
CONNECT_TIMEOUT_S = 10
#: How long a slot of :meth:`Database.open`'s pool keeps trying to connect (its attempts back
#: off 1, 2, 4 … s, the last one at this limit) before it is given up and made again, at once,
#: when a statement waits for a connection. Short, so that after a long outage (a failover)
#: the pool tries again within seconds of the promotion rather than after a doubled delay.
RECONNECT_TIMEOUT_S = 10.0


#: URL schemes libpq reads (``postgres://`` is its alias of ``postgresql://``).
_LIBPQ_SCHEMES = ("postgresql", "postgres")


def libpq_url(database_url: str) -> str:
    """GAPLESS_DATABASE_URL as libpq reads it: every host, port and parameter intact (a
    multi-host URL ``postgresql://u@h1:5441,h2:5442/db?target_session_attrs=read-write`` is
    passed through as written); only a SQLAlchemy-style driver suffix in the scheme
    (``postgresql+psycopg://``) is dropped. A ``key=value`` connection string is returned as
    it is.

    libpq parses the URL, never SQLAlchemy: SQLAlchemy's URL has one host and one port, and a
    second host would be lost (or refused) on the way.
    """
    scheme, separator, rest = database_url.partition("://")
    base = scheme.split("+", 1)[0]
    if separator and base in _LIBPQ_SCHEMES and base != scheme:
        return f"{base}://{rest}"
    return database_url


def conninfo_parts(database_url: str) -> dict[str, str]:
    """The connection parameters libpq reads from the URL (``host`` and ``port`` comma-separated
    for a multi-host URL). Raises ConfigurationError when libpq cannot parse it."""
    try:
        return {key: str(value) for key, value in
                conninfo_to_dict(libpq_url(database_url)).items()}
    except psycopg.ProgrammingError as exc:
        from gapless.publisher import redact_url

        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(f"GAPLESS_DATABASE_URL {redact_url(database_url)} is not a "
                                 f"PostgreSQL connection URL: {detail}") from None


def database_name(database_url: str) -> str | None:
    """The database the URL names (None: none named, libpq then takes the user's name)."""
    return conninfo_parts(database_url).get("dbname") or None


def with_database(database_url: str, dbname: str) -> str:
    """The same URL on database ``dbname`` of the same servers: every host, port, user,
    password and parameter (``target_session_attrs``, ``sslmode`` …) kept as written.

    The path of the URL is replaced (and a ``dbname=`` query parameter, which libpq would read
    instead, dropped); a ``key=value`` connection string gets ``dbname`` set.
    """
    conninfo_parts(database_url)  # refuse what libpq cannot read, before cutting it up
    url = libpq_url(database_url)
    scheme, separator, rest = url.partition("://")
    if not separator:
        return make_conninfo(url, dbname=dbname)
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    tail = tail.split("#", 1)[0]
    query = tail.partition("?")[2]
    kept = "&".join(part for part in query.split("&")
                    if part and part.split("=", 1)[0] != "dbname")
    path = "/" + urllib.parse.quote(dbname, safe="")
    return f"{scheme}://{netloc}{path}" + (f"?{kept}" if kept else "")


def _connect_kwargs(actor: str | None, application_name: str | None) -> dict[str, Any]:
    """The connection parameters gapless adds to the URL's (a connect timeout, and who the
    backend works for: ``application_name`` and the ``gapless.actor`` setting)."""
    kwargs: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S}
    if actor is not None:
        kwargs["application_name"] = application_name or f"gapless-{actor}"
        kwargs["options"] = f"-c gapless.actor={actor}"
    elif application_name is not None:
        kwargs["application_name"] = application_name
    return kwargs


#: SQLSTATEs after which a connection must not be used again, though the driver may still
#: think it open: the server is shutting down (57P01 admin, 57P02 crash), is not accepting
#: connections yet (57P03), or is read-only (25006: a standby, e.g. an old primary that came
#: back demoted; its next statement would fail the same way).
DISCARD_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})
READ_ONLY_SQL_TRANSACTION = "25006"


def must_discard(exc: BaseException) -> bool:
    """The connection that raised ``exc`` must be thrown away (see DISCARD_SQLSTATES)."""
    return sqlstate(exc) in DISCARD_SQLSTATES


def is_read_only(exc: BaseException) -> bool:
    """The statement met a read-only server (SQLSTATE 25006): a standby, not the primary —
    during a failover, until every connection has found the promoted one."""
    return sqlstate(exc) == READ_ONLY_SQL_TRANSACTION


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
    connect_kwargs = _connect_kwargs(actor, application_name)

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(url, **connect_kwargs)

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
    connect_kwargs = _connect_kwargs(None, None)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(url, **connect_kwargs)

    engine = create_engine("postgresql+psycopg://", creator=connect, poolclass=NullPool,
                           **kwargs)
    event.listen(engine, "handle_error", _discard_on_handle_error)
    return engine


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind a SQLAlchemy/psycopg error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None)


def is_lock_timeout(exc: BaseException) -> bool:
    """A lock wait ran past ``lock_timeout`` (SQLSTATE 55P03): the statement rolled back."""
    return (isinstance(exc, DBAPIError | psycopg.Error)
            and sqlstate(exc) == LOCK_NOT_AVAILABLE)


def driver_conninfo(database_url: str, *, dbname: str | None = None) -> str:
    """The URL as psycopg/libpq take it (:func:`libpq_url`), on database ``dbname`` of the same
    servers when given (:func:`with_database`: every host and parameter kept)."""
    if dbname is not None:
        return with_database(database_url, dbname)
    url = libpq_url(database_url)
    conninfo_parts(url)
    return url


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
        interrupted = exc
    log.warning("database_cancel_deferred",
                detail="a sent statement is awaited to its end before the cancellation")
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError as exc:
            interrupted = exc
    if not task.cancelled():
        task.exception()  # retrieved: its outcome is the database's business now
    raise interrupted


async def _fetch(conn: psycopg.AsyncConnection[Any], query: str, params: Params, *,
                 every: bool) -> Any:
    cursor = conn.cursor(row_factory=namedtuple_row)
    await cursor.execute(query, params, prepare=True)
    return await (cursor.fetchall() if every else cursor.fetchone())

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
        in the background, and a statement waits up to ``timeout_s`` for a connection.

        Every connection is made from the URL itself, so with several hosts and
        ``target_session_attrs=read-write`` a replacement connection finds the primary of the
        moment (after a promotion: the new one)."""
        conninfo = driver_conninfo(database_url)
        kwargs: dict[str, Any] = {"autocommit": True,
                                  **_connect_kwargs(actor, application_name)}
        probe = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
        await probe.close()
        pool: AsyncConnectionPool = AsyncConnectionPool(
            conninfo, min_size=size, max_size=size, open=False, timeout=timeout_s,
            reconnect_timeout=RECONNECT_TIMEOUT_S, name=f"gapless-{actor}", kwargs=kwargs)
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
                try:
                    yield driver
                except psycopg.Error as exc:
                    if must_discard(exc):
                        await conn.invalidate()  # the engine's pool makes a new one
                    raise

        return cls(connect)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._connect() as conn:
            try:
                yield conn
            except psycopg.Error as exc:
                if self._pool is not None and must_discard(exc) and not conn.closed:
                    # Still open, yet useless (a read-only server, a shutdown under way):
                    # closed, the pool drops it and connects again from the URL.
                    await conn.close()
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

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Several statements in one transaction: committed on success, rolled back on error.

        A cancellation inside the block rolls back; the COMMIT, once sent, is awaited to its
        end (:func:`to_completion`)."""
        async with self._connection() as conn:
            transaction = conn.transaction()
            await transaction.__aenter__()
            try:
                yield conn
            except BaseException as exc:
                if not await transaction.__aexit__(type(exc), exc, exc.__traceback__):
                    raise
            else:
                await to_completion(transaction.__aexit__(None, None, None))

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
