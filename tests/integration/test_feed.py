"""The commit-ordered feed at the SQL level, with real concurrent transactions (I6).

Transactions are ordered with explicit steps on separate connections (each its own PostgreSQL
backend), never with sleeps; a blocked position-giver is observed in pg_locks.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gapless.errors import InvalidFeedRequest
from gapless.ledger.feed import (
    MAX_CURSOR,
    MAX_LIMIT,
    FeedEvent,
    events_after,
    parse_cursor,
    parse_limit,
    position_events,
)
from gapless.ledger.invoices import Draft, claim_for_sending, invoice_events, upsert_draft
from gapless.ledger.queries import feed as q_feed
from gapless.ledger.queries import invoices as qi
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.helpers import await_until, ledger


async def define(engine: AsyncEngine, tenant: str = "acme", code: str = "ABC") -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec(tenant, code))


async def insert_draft(conn: AsyncConnection, invoice_id: str, tenant: str = "acme",
                       series: str = "ABC") -> None:
    """The worker's draft insert, inside the caller's (open) transaction."""
    await conn.exec_driver_sql(qi.UPSERT_DRAFT, {"invoice_id": invoice_id, "tenant": tenant,
                                         "series": series, "priority": 1, "payload": "{}"})


async def poll(engine: AsyncEngine, cursor: int, limit: int = MAX_LIMIT,
               tenant: str | None = None) -> list[FeedEvent]:
    return await events_after(ledger(engine), cursor, limit, tenant)


async def backend_waits_for_lock(engine: AsyncEngine, pid: int) -> bool:
    async with engine.connect() as conn:
        return bool((await conn.execute(text(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = :pid AND NOT granted)"),
            {"pid": pid})).scalar())


async def test_late_commit_of_an_early_insert_is_not_skipped(engine: AsyncEngine) -> None:
    """A inserts first and stays open; B inserts and commits; the poll sees B; A commits; the
    next poll from B's cursor returns A — nothing skipped, nothing repeated."""
    await define(engine)
    async with engine.connect() as a, engine.connect() as b:
        await a.begin()
        await insert_draft(a, "inv-a")
        # Inside A the event exists but has no position yet: it gets one after A commits.
        own = (await a.execute(text(
            "SELECT id, sequence_id FROM invoice_events WHERE invoice_id = 'inv-a'"))).one()
        assert own.sequence_id is None

        await b.begin()
        await insert_draft(b, "inv-b")
        await b.commit()

        first = await poll(engine, 0)
        assert [(e.invoice_id, e.kind) for e in first] == [("inv-b", "received")]
        cursor = first[-1].sequence_id

        await a.commit()

    second = await poll(engine, cursor)
    assert [(e.invoice_id, e.kind) for e in second] == [("inv-a", "received")]
    assert second[0].sequence_id > cursor
    assert await poll(engine, second[-1].sequence_id) == []
    # The scenario really was out of order: by insertion id A came first.
    async with engine.connect() as conn:
        ids = {row.invoice_id: row.id for row in await conn.execute(text(
            "SELECT invoice_id, id FROM invoice_events"))}
    assert ids["inv-a"] < ids["inv-b"]
    assert own.id == ids["inv-a"]


async def hold_feed_lock(conn: AsyncConnection) -> None:
    """Take the position lock in ``conn``'s open transaction, as a position-giver does."""
    await conn.execute(text("LOCK TABLE invoice_events_feed IN EXCLUSIVE MODE"))


async def test_writers_never_wait_for_the_feed_nor_for_each_other(engine: AsyncEngine) -> None:
    """While a position-giver holds the feed lock and another writer's transaction is open, a
    writer commits at once; a reader does not hang either (it reads what is positioned). Once
    the lock is free, the next poll positions and returns the committed event."""
    await define(engine)
    async with engine.connect() as holder, engine.connect() as a, engine.connect() as b:
        await holder.begin()
        await hold_feed_lock(holder)
        await a.begin()
        await insert_draft(a, "inv-a")

        await b.begin()
        await insert_draft(b, "inv-b")
        await asyncio.wait_for(b.commit(), 10)  # would hang if writers took any shared lock

        assert await asyncio.wait_for(poll(engine, 0), 10) == []  # gave up on the lock
        await holder.rollback()
        assert [e.invoice_id for e in await poll(engine, 0)] == ["inv-b"]
        await a.commit()
    assert [e.invoice_id for e in await poll(engine, 0)] == ["inv-b", "inv-a"]


async def test_a_position_giver_waits_for_another_and_numbers_above_its_batch(
        engine: AsyncEngine) -> None:
    """Position-givers take turns: while L1's batch is uncommitted, L2 waits for the lock and a
    poller sees neither batch; L1 commits, L2 numbers the rest above L1's batch."""
    await define(engine)
    async with engine.begin() as conn:
        await insert_draft(conn, "first")
    async with engine.connect() as l1, engine.connect() as l2:
        await l1.begin()
        assert (await l1.execute(text("SELECT gapless_feed_assign()"))).scalar_one() == 1
        async with engine.begin() as conn:
            await insert_draft(conn, "second")

        await l2.begin()
        l2_pid = (await l2.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        l2_assign = asyncio.create_task(l2.execute(text("SELECT gapless_feed_assign()")))
        await await_until(lambda: backend_waits_for_lock(engine, l2_pid), 10,
                          message="L2 to wait for the position lock")
        assert not l2_assign.done()
        async with engine.connect() as reader:  # a plain read: L1's batch is not visible yet
            assert (await reader.exec_driver_sql(q_feed.EVENTS_AFTER,
                                                 {"cursor": 0, "limit": 10})).all() == []

        await l1.commit()
        assert (await asyncio.wait_for(l2_assign, 10)).scalar_one() == 1
        await l2.commit()

    events = await poll(engine, 0)
    assert [(e.invoice_id, e.sequence_id) for e in events] == [("first", 1), ("second", 2)]


async def test_rolled_back_writers_and_batches_leave_no_trace_and_no_hole(
        engine: AsyncEngine) -> None:
    await define(engine)
    async with engine.connect() as conn:
        await conn.begin()
        await insert_draft(conn, "gone")
        await conn.rollback()
    async with engine.begin() as conn:
        await insert_draft(conn, "kept")
    async with engine.connect() as conn:  # a batch that rolls back: its positions are reused
        await conn.begin()
        assert (await conn.execute(text("SELECT gapless_feed_assign()"))).scalar_one() == 1
        await conn.rollback()
    async with engine.begin() as conn:
        await insert_draft(conn, "later")
    events = await poll(engine, 0)
    assert [(e.invoice_id, e.sequence_id) for e in events] == [("kept", 1), ("later", 2)]


async def test_positions_continue_above_a_raised_floor(engine: AsyncEngine) -> None:
    # After a failover to an asynchronous standby an operator raises the floor past every
    # position clients may hold (docs/api.md); positions then continue above it.
    await define(engine)
    async with engine.begin() as conn:
        await insert_draft(conn, "before")
    assert [e.sequence_id for e in await poll(engine, 0)] == [1]
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE invoice_events_feed SET floor = 1000"))
        await insert_draft(conn, "after")
    assert [(e.invoice_id, e.sequence_id) for e in await poll(engine, 1)] == [("after", 1001)]
    with pytest.raises(DBAPIError, match=r"one_row|duplicate key"):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO invoice_events_feed (floor) VALUES (5)"))


async def test_a_transaction_left_open_for_seconds_delays_only_its_own_events(
        engine: AsyncEngine) -> None:
    """A writes an event and stays open for seconds while other writers commit and a poller
    follows the feed: the poller gets the others' events as they commit, then A's once A
    commits, above everything it has seen; nothing skipped, nothing repeated."""
    await define(engine)
    seen: list[FeedEvent] = []
    cursor = 0

    async def follow() -> list[FeedEvent]:
        nonlocal cursor
        while page := await poll(engine, cursor, 50):
            seen.extend(page)
            cursor = page[-1].sequence_id
        return seen

    async with engine.connect() as a:
        await a.begin()
        await insert_draft(a, "long")
        opened = time.monotonic()
        for i in range(20):
            async with engine.begin() as conn:
                await insert_draft(conn, f"quick-{i}")
            await follow()
        await await_until(lambda: _has(follow, 20), 10, message="the quick events")
        assert "long" not in {e.invoice_id for e in seen}
        # Held open for seconds while the poller keeps polling (deadline-bound, not a sleep).
        while time.monotonic() - opened < 3:
            await follow()
            await asyncio.sleep(0.05)
        assert "long" not in {e.invoice_id for e in seen}
        await a.commit()

    await await_until(lambda: _has(follow, 21), 10, message="the long transaction's event")
    assert [e.invoice_id for e in seen] == [f"quick-{i}" for i in range(20)] + ["long"]
    assert [e.sequence_id for e in seen] == list(range(1, 22))


async def _has(follow: Any, count: int) -> bool:
    return len(await follow()) >= count


async def test_events_of_the_issuing_flow_in_commit_order_with_actor(
        engine: AsyncEngine) -> None:
    await define(engine)
    await upsert_draft(ledger(engine), Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    claim = await claim_for_sending(ledger(engine), "inv-1", tenant="acme", lease_s=60,
                                    lock_timeout_ms=5000)
    assert claim.sending is not None
    events = await poll(engine, 0)
    assert [(e.kind, e.from_status, e.to_status) for e in events] == [
        ("received", None, "RECEIVED"),
        ("reserved", "RECEIVED", "RECEIVED"),
        ("sending", "RECEIVED", "SENDING"),
    ]
    assert events[1].number == events[2].number == claim.sending.number
    assert events[2].attempts == 1
    assert {e.actor for e in events} == {"test"}  # the engine's actor, via gapless.actor
    assert [e.sequence_id for e in events] == sorted({e.sequence_id for e in events})
    payload = events[2].as_json()
    assert payload["created_at"].endswith("Z")
    assert set(payload) == {"sequence_id", "invoice_id", "tenant", "series", "kind",
                            "from_status", "to_status", "number", "attempts", "detail",
                            "actor", "created_at"}


@pytest.mark.parametrize("limit", [1, 7, 500])
async def test_paging_by_last_id_returns_every_event_once(engine: AsyncEngine,
                                                          limit: int) -> None:
    await define(engine)
    await define(engine, "globex", "GLX")
    async with engine.begin() as conn:
        for i in range(40):
            await insert_draft(conn, f"a-{i}")
            await insert_draft(conn, f"g-{i}", "globex", "GLX")
    for tenant, expected in ((None, 80), ("acme", 40), ("globex", 40)):
        cursor, seen = 0, []
        while page := await poll(engine, cursor, limit, tenant):
            assert len(page) <= limit
            seen.extend(page)
            cursor = page[-1].sequence_id
        assert len(seen) == expected
        assert [e.sequence_id for e in seen] == sorted({e.sequence_id for e in seen})
        if tenant is not None:
            assert {e.tenant for e in seen} == {tenant}


async def test_events_are_append_only(engine: AsyncEngine) -> None:
    await define(engine)
    async with engine.begin() as conn:
        await insert_draft(conn, "inv-1")
    await poll(engine, 0)
    async with engine.begin() as conn:
        await insert_draft(conn, "inv-2")  # committed, not yet positioned
    for statement in ("UPDATE invoice_events SET kind = 'issued'",
                      "UPDATE invoice_events SET sequence_id = sequence_id + 1000",
                      # only gapless_feed_assign() gives a position
                      "UPDATE invoice_events SET sequence_id = 7 WHERE sequence_id IS NULL",
                      "DELETE FROM invoice_events"):
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text(statement))
    assert len(await poll(engine, 0)) == 2
    with pytest.raises(DBAPIError, match="append-only"):
        async with engine.begin() as conn:
            await conn.execute(text("TRUNCATE invoice_events"))
    assert len(await poll(engine, 0)) == 2


@pytest.mark.parametrize(("requested", "at_commit"), [
    ("off", "local"),                  # visible must mean durable: the commit is flushed
    ("local", "local"),
    ("on", "on"),
    ("remote_apply", "remote_apply"),  # stronger settings are left alone
])
@pytest.mark.parametrize("step", ["seal", "position"])
async def test_a_sealing_or_positioning_commit_is_never_asynchronous(
        engine: AsyncEngine, requested: str, at_commit: str, step: str) -> None:
    """A crash must not undo a commit someone may have seen: a sealed number (the integrator may
    hold it) or a feed position (a poller may have passed it). A transaction that changes a
    counter, or gives positions, upgrades an asynchronous commit to a locally flushed one."""
    await define(engine)
    await upsert_draft(ledger(engine), Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    async with engine.connect() as conn:
        await conn.begin()
        await conn.execute(text("SELECT set_config('synchronous_commit', :v, true)"),
                           {"v": requested})
        if step == "seal":
            await conn.execute(text("SELECT next_number('acme', 'ABC')"))
        else:
            assert (await conn.execute(text("SELECT gapless_feed_assign()"))).scalar_one() == 1
        after = (await conn.execute(text("SHOW synchronous_commit"))).scalar_one()
        await conn.commit()
        assert after == at_commit
        # SET LOCAL scope: the session's own setting is back once the transaction is over.
        assert (await conn.execute(text("SHOW synchronous_commit"))).scalar_one() == "on"
        await conn.rollback()


async def test_a_plain_write_keeps_its_asynchronous_commit(engine: AsyncEngine) -> None:
    # Only what others may act on is upgraded: a draft's insert may stay asynchronous.
    await define(engine)
    async with engine.connect() as conn:
        await conn.begin()
        await conn.execute(text("SELECT set_config('synchronous_commit', 'off', true)"))
        await insert_draft(conn, "inv-1")
        assert (await conn.execute(text("SHOW synchronous_commit"))).scalar_one() == "off"
        await conn.commit()
    assert [e.invoice_id for e in await poll(engine, 0)] == ["inv-1"]


@pytest.mark.parametrize(("cursor", "limit"), [(-1, 10), (0, 0), (0, MAX_LIMIT + 1),
                                               (MAX_CURSOR + 1, 10)])
async def test_out_of_range_cursor_or_limit_is_refused(engine: AsyncEngine, cursor: int,
                                                       limit: int) -> None:
    with pytest.raises(InvalidFeedRequest):
        await poll(engine, cursor, limit)


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "1e3", " 1", "+1", "١", "9" * 20])
def test_query_string_values_that_are_not_plain_integers_are_refused(value: str) -> None:
    with pytest.raises(InvalidFeedRequest, match="cursor must be an integer"):
        parse_cursor(value)
    with pytest.raises(InvalidFeedRequest, match="limit must be an integer"):
        parse_limit(value)


def test_query_string_defaults_and_bounds() -> None:
    assert parse_cursor(None) == 0
    assert parse_cursor("42") == 42
    assert parse_limit(None) == 100
    assert parse_limit("500") == 500
    with pytest.raises(InvalidFeedRequest, match="between 1 and 500"):
        parse_limit("501")
    with pytest.raises(InvalidFeedRequest):
        parse_limit("0")


async def test_an_invoice_history_is_in_order_before_and_after_its_events_are_positioned(
        engine: AsyncEngine) -> None:
    await define(engine)
    await upsert_draft(ledger(engine), Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    claim = await claim_for_sending(ledger(engine), "inv-1", tenant="acme", lease_s=60,
                                    lock_timeout_ms=5000)
    assert claim.sending is not None
    waiting = await invoice_events(ledger(engine), claim.sending.pk)
    await position_events(ledger(engine))
    positioned = await invoice_events(ledger(engine), claim.sending.pk)
    assert [(e.kind, e.sequence_id) for e in waiting] == [
        ("received", None), ("reserved", None), ("sending", None)]
    assert [e.kind for e in positioned] == ["received", "reserved", "sending"]
    positions = [e.sequence_id for e in positioned]
    assert None not in positions
    assert positions == sorted(positions)


async def test_an_update_that_fails_after_its_history_trigger_leaves_no_event(
        engine: AsyncEngine) -> None:
    """An update's event is written before the row (schema 0006, BEFORE UPDATE); a constraint
    that refuses the row afterwards takes the event with it."""
    await define(engine)
    await upsert_draft(ledger(engine), Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    with pytest.raises(DBAPIError, match="payload"):
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE invoices SET status = 'CANCELLED', payload = NULL "
                                    "WHERE invoice_id = 'inv-1'"))
    async with engine.connect() as conn:
        pk = (await conn.execute(text("SELECT id FROM invoices WHERE invoice_id = 'inv-1'"))
              ).scalar_one()
        assert [e.kind for e in await invoice_events(ledger(engine), pk)] == ["received"]


async def test_an_update_that_waited_for_a_row_records_the_state_it_found(
        engine: AsyncEngine) -> None:
    """READ COMMITTED: an update that waits for another transaction's row lock is rechecked
    against the row that transaction committed. Its event starts from that state, and an
    update whose condition no longer holds writes nothing."""
    await define(engine)
    await upsert_draft(ledger(engine), Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    await upsert_draft(ledger(engine), Draft("inv-2", "acme", "ABC", 4, {"lines": []}))
    async with engine.connect() as holder, engine.connect() as erring, \
            engine.connect() as cancelling:
        await holder.begin()
        for invoice_id in ("inv-1", "inv-2"):
            await holder.execute(text("SELECT * FROM claim_invoice(:i, 60)"), {"i": invoice_id})
        pids = []
        for conn in (erring, cancelling):
            await conn.begin()
            pids.append((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
        error = asyncio.ensure_future(erring.execute(text(
            "UPDATE invoices SET status = 'ERROR', last_error = 'timeout' "
            "WHERE invoice_id = 'inv-1' AND status IN ('RECEIVED', 'SENDING')")))
        cancel = asyncio.ensure_future(cancelling.execute(text(
            "UPDATE invoices SET status = 'CANCELLED' "
            "WHERE invoice_id = 'inv-2' AND status = 'RECEIVED'")))
        for pid in pids:
            await await_until(lambda pid=pid: backend_waits_for_lock(engine, pid), 10,
                              message="the update waiting for the claimed row")
        await holder.commit()
        assert (await error).rowcount == 1
        assert (await cancel).rowcount == 0
        await erring.commit()
        await cancelling.commit()
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT invoice_id, kind, from_status, to_status, attempts, detail "
            "FROM invoice_events ORDER BY id"))).all()
    assert [tuple(r) for r in rows if r.invoice_id == "inv-1"] == [
        ("inv-1", "received", None, "RECEIVED", 0, None),
        ("inv-1", "reserved", "RECEIVED", "RECEIVED", 0, None),
        ("inv-1", "sending", "RECEIVED", "SENDING", 1, None),
        ("inv-1", "error", "SENDING", "ERROR", 1, "timeout")]
    assert [r.kind for r in rows if r.invoice_id == "inv-2"] == [
        "received", "reserved", "sending"]
