"""A pooled connection that meets a read-only server (SQLSTATE 25006 — what a connection to an
old primary that came back as a standby would meet) is thrown away, never lent out again: the
next statement runs on a new connection, made from the URL. Every pool gapless has: the psycopg
pool of the worker and recovery, an engine's, and the issuing path borrowing an engine's.

The server is not made read-only (it is the shared one): the pooled connection is, with
``SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY``, which fails a write the same way."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from gapless.ledger.database import Database, make_engine
from gapless.ledger.sqlstates import is_database_unavailable, must_discard

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
