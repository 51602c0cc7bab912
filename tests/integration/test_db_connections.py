"""A pooled connection that meets a read-only server (SQLSTATE 25006 — what a connection to an
old primary that came back as a standby would meet) is thrown away, never lent out again: the
next statement runs on a new connection, made from the URL. Every pool gapless has: the psycopg
pool of the worker, recovery and the API, an engine's, and the issuing path borrowing an engine's.
And the API's pool lends no connection whose backend died while it sat idle (its idle check).

The server is not made read-only (it is the shared one): the pooled connection is, with
``SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY``, which fails a write the same way."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.database import Database, make_engine
from gapless.ledger.sqlstates import is_database_unavailable, must_discard
from tests.helpers import await_until

READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
WRITE = "UPDATE gapless_config SET cluster_id = cluster_id RETURNING cluster_id"
WHO = "SELECT pg_backend_pid() AS pid, current_setting('transaction_read_only') AS read_only"


async def _made_read_only(db: Database) -> int:
    async with db._connection() as conn:
        await conn.execute(READ_ONLY)
        return conn.info.backend_pid


async def test_the_worker_pool_drops_a_connection_that_met_a_read_only_server(
        db_url: str) -> None:
    db = await Database.open(db_url, actor="test", size=1)
    try:
        first = await _made_read_only(db)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as caught:
            await db.one(WRITE)
        assert must_discard(caught.value)
        assert is_database_unavailable(caught.value)  # the worker requeues and pauses
        row: Any = await db.one(WHO)
        assert (row.pid != first, row.read_only) == (True, "off")
        await db.one(WRITE)
    finally:
        await db.close()


async def test_an_engine_drops_a_connection_that_met_a_read_only_server(db_url: str) -> None:
    engine = make_engine(db_url, actor="test", pool_size=1, pre_ping=False)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(READ_ONLY)
            first = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
            await conn.commit()
        with pytest.raises(sa_exc.InternalError) as caught:
            async with engine.begin() as conn:
                await conn.exec_driver_sql(WRITE)
        assert caught.value.connection_invalidated
        assert is_database_unavailable(caught.value)
        async with engine.begin() as conn:
            row = (await conn.exec_driver_sql(WHO)).one()
            await conn.exec_driver_sql(WRITE)
        assert (row.pid != first, row.read_only) == (True, "off")
    finally:
        await engine.dispose()


async def test_the_issuing_path_on_an_engine_drops_it_too(db_url: str) -> None:
    engine = make_engine(db_url, actor="test", pool_size=1, pre_ping=False)
    try:
        db = Database.borrowing(engine)
        first = await _made_read_only(db)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await db.one(WRITE)
        row: Any = await db.one(WHO)
        assert (row.pid != first, row.read_only) == (True, "off")
    finally:
        await engine.dispose()


async def _terminate_and_idle(db_url: str, actor: str, idle_s: float) -> None:
    """Terminate every backend of ``actor``'s pool (what a restart does to idle connections)
    and wait until they are gone and the pool's connections have sat idle ``idle_s``."""
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(driver_conninfo(db_url),
                                                     autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                            "datname = current_database() AND application_name = %s",
                            (f"gapless-{actor}",))

        async def gone() -> bool:
            cursor = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = %s", (f"gapless-{actor}",))
            row = await cursor.fetchone()
            return row is not None and row[0] == 0

        await await_until(gone, 15, message=f"the {actor} pool's backends to be gone")
    # The condition is the time itself: the idle check tests a connection idle this long.
    await await_until(lambda: asyncio.sleep(0, time.monotonic() - started > idle_s), 5,
                      message="the pool's connections to have sat idle")


async def test_a_pool_with_an_idle_check_lends_no_dead_connection(db_url: str) -> None:
    """The API's pool (``check_idle_s``) tests a connection that sat idle before lending it: after
    its backends were terminated, every statement runs (on new connections)."""
    db = await Database.open(db_url, actor="idlecheck", size=2, check_idle_s=0.2)
    try:
        await asyncio.gather(db.one("SELECT pg_sleep(0.05)"), db.one("SELECT pg_sleep(0.05)"))
        await _terminate_and_idle(db_url, "idlecheck", 0.3)
        for _ in range(4):
            row: Any = await db.one("SELECT 1 AS one")
            assert row.one == 1
    finally:
        await db.close()


async def test_a_pool_without_it_lends_the_dead_connection_once(db_url: str) -> None:
    """The worker's pool (no idle check: the worker treats a dead connection as a passing
    database error and retries the delivery) lends a dead connection: the statement fails as the
    database being unavailable, and the pool is checked and repaired behind it."""
    db = await Database.open(db_url, actor="nocheck", size=1)
    try:
        await db.one("SELECT 1")
        await _terminate_and_idle(db_url, "nocheck", 0.3)
        with pytest.raises(psycopg.OperationalError) as caught:
            await db.one("SELECT 1")
        assert is_database_unavailable(caught.value)

        async def answers() -> bool:
            try:
                return bool(await db.one("SELECT 1 AS one"))
            except psycopg.OperationalError:
                return False

        await await_until(answers, 15, message="the pool to be repaired")
    finally:
        await db.close()
