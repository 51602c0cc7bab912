"""Database access: engines, transactions, and the start-up checks every process runs.

Every process talks to PostgreSQL through SQLAlchemy's async engine over psycopg 3. SQL text lives
in ``gapless.queries``; this module only opens connections and turns driver errors into gapless
errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gapless.errors import ClusterMismatchError, NotMigratedError
from gapless.queries import config as q

LOCK_NOT_AVAILABLE = "55P03"
UNDEFINED_TABLE = "42P01"
UNIQUE_VIOLATION = "23505"


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
            "connect_timeout": 10,
            "options": f"-c gapless.actor={actor}",
        },
        **kwargs,
    )


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind a SQLAlchemy/psycopg error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None)


def is_lock_timeout(exc: BaseException) -> bool:
    return isinstance(exc, DBAPIError) and sqlstate(exc) == LOCK_NOT_AVAILABLE


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One short transaction: commit on success, roll back on any exception."""
    async with engine.begin() as conn:
        yield conn


async def set_lock_timeout(conn: AsyncConnection, timeout_ms: int) -> None:
    """Bound every lock wait in the current transaction (``SET LOCAL``, gone at commit)."""
    await conn.execute(q.SET_LOCK_TIMEOUT, {"timeout": f"{int(timeout_ms)}ms"})


async def stored_cluster_id(conn: AsyncConnection) -> int:
    """The cluster id recorded by ``gapless migrate``; NotMigratedError when there is none."""
    try:
        row = (await conn.execute(q.GET_CLUSTER_ID)).first()
    except ProgrammingError as exc:
        if sqlstate(exc) == UNDEFINED_TABLE:
            raise NotMigratedError(
                "the database has no gapless schema; run `gapless migrate`"
            ) from exc
        raise
    if row is None:
        raise NotMigratedError("the database has no cluster id; run `gapless migrate`")
    return int(row.cluster_id)


async def check_cluster(engine: AsyncEngine, configured: int) -> int:
    """Refuse to start when the configured cluster id disagrees with the database's."""
    async with engine.connect() as conn:
        stored = await stored_cluster_id(conn)
    if stored != configured:
        raise ClusterMismatchError(configured, stored)
    return stored
