"""The ledger's one database handle: a Database in autocommit, bound to a transaction
(:meth:`Database.transaction`), or bound to a read-only snapshot (:meth:`Database.snapshot`) —
and the transitional bridge for callers that still hold a SQLAlchemy connection."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.database import Database, make_engine, short_lived
from gapless.ledger.series import add_series, list_series
from gapless.numbers import build_series_spec
from tests.helpers import ledger

SERIES_COUNT = "SELECT count(*) AS n FROM series"
SESSION = ("SELECT current_setting('transaction_isolation') AS isolation, "
           "current_setting('transaction_read_only') AS read_only, pg_backend_pid() AS pid")


class RolledBack(Exception):
    """Ends a test transaction with a rollback."""


async def count(db: Database) -> int:
    return int((await db.one(SERIES_COUNT)).n)


async def test_a_snapshot_sees_one_state_of_the_database(engine: AsyncEngine) -> None:
    db = ledger(engine)
    async with db.snapshot() as snap:
        assert await count(snap) == 0
        await add_series(db, build_series_spec("acme", "ABC"))  # committed by another session
        assert await count(snap) == 0
        assert (await snap.one(SESSION)).isolation == "repeatable read"
    assert await count(db) == 1


async def test_a_snapshot_refuses_writes(engine: AsyncEngine) -> None:
    async def write_in_a_snapshot() -> None:
        async with ledger(engine).snapshot() as snap:
            await snap.one("INSERT INTO series (tenant, code, prefix) "
                           "VALUES ('acme', 'ABC', 'ABC')")

    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        await write_in_a_snapshot()


async def test_a_snapshots_connection_goes_back_to_its_pool_as_it_came(db_url: str) -> None:
    engine = make_engine(db_url, actor="test", pool_size=1, pre_ping=False)
    try:
        db = Database.borrowing(engine)
        async with db.snapshot() as snap:
            inside = await snap.one(SESSION)
        after = await db.one(SESSION)
        assert (inside.isolation, inside.read_only) == ("repeatable read", "on")
        assert (after.pid, after.isolation, after.read_only) == (
            inside.pid, "read committed", "off")
    finally:
        await engine.dispose()


async def test_a_transaction_commits_everything_or_nothing(engine: AsyncEngine) -> None:
    db = ledger(engine)

    async def two_series_then_fail() -> None:
        async with db.transaction() as tx:
            await add_series(tx, build_series_spec("acme", "ABC"))
            await add_series(tx, build_series_spec("acme", "XYZ"))
            assert await count(tx) == 2
            raise RolledBack

    with pytest.raises(RolledBack):
        await two_series_then_fail()
    assert await count(db) == 0
    async with db.transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "XYZ"))
    assert [row.code for row in await list_series(db)] == ["ABC", "XYZ"]


async def test_a_short_lived_database_is_closed_with_its_block(db_url: str) -> None:
    async with short_lived(db_url, actor="test") as db:
        assert await count(db) == 0
