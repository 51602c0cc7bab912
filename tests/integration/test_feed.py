"""The commit-ordered feed at the SQL level, with real concurrent transactions (I6).

Transactions are ordered with explicit steps on separate connections (each its own PostgreSQL
backend), never with sleeps; a blocked commit is observed in pg_locks.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gapless.errors import InvalidFeedRequest
from gapless.feed import MAX_CURSOR, MAX_LIMIT, FeedEvent, events_after, parse_cursor, parse_limit
from gapless.invoices import Draft, claim_for_sending, upsert_draft
from gapless.numbering import add_series, build_series_spec
from gapless.queries import invoices as qi
from tests.helpers import await_until


async def define(engine: AsyncEngine, tenant: str = "acme", code: str = "ABC") -> None:
    async with engine.begin() as conn:
        await add_series(conn, build_series_spec(tenant, code))


async def insert_draft(conn: AsyncConnection, invoice_id: str, tenant: str = "acme",
                       series: str = "ABC") -> None:
    """The worker's draft insert, inside the caller's (open) transaction."""
    await conn.execute(qi.INSERT_DRAFT, {"invoice_id": invoice_id, "tenant": tenant,
                                         "series": series, "priority": 1, "payload": "{}"})


async def poll(engine: AsyncEngine, cursor: int, limit: int = MAX_LIMIT,
               tenant: str | None = None) -> list[FeedEvent]:
    async with engine.connect() as conn:
        return await events_after(conn, cursor, limit, tenant)


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
        # Inside A the event exists but has no position yet: it gets one at commit.
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


async def test_a_commit_waits_for_the_commit_lock_and_is_ordered_after_its_holder(
        engine: AsyncEngine) -> None:
    """The commit lock directly: while A holds it (its sequence trigger has run), B's COMMIT
    waits; a poller sees neither; once A commits, B's commit completes with a higher id."""
    await define(engine)
    async with engine.connect() as a, engine.connect() as b:
        await a.begin()
        await insert_draft(a, "inv-a")
        # Fire A's deferred sequence trigger now: it takes the commit lock until A ends.
        await a.execute(text("SET CONSTRAINTS invoice_events_sequence_trigger IMMEDIATE"))
        a_seq = (await a.execute(text(
            "SELECT sequence_id FROM invoice_events WHERE invoice_id = 'inv-a'"))).scalar_one()
        assert a_seq is not None

        await b.begin()
        await insert_draft(b, "inv-b")
        b_pid = (await b.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        b_commit = asyncio.create_task(b.commit())
        await await_until(lambda: backend_waits_for_lock(engine, b_pid), 10,
                          message="B's commit to wait for the commit lock")
        assert not b_commit.done()
        assert await poll(engine, 0) == []

        await a.commit()
        await asyncio.wait_for(b_commit, 10)

    events = await poll(engine, 0)
    assert [e.invoice_id for e in events] == ["inv-a", "inv-b"]
    assert events[0].sequence_id == a_seq < events[1].sequence_id


async def test_rolled_back_events_never_appear_and_their_hole_is_passed(
        engine: AsyncEngine) -> None:
    await define(engine)
    async with engine.connect() as conn:
        await conn.begin()
        await insert_draft(conn, "gone")
        await conn.execute(text("SET CONSTRAINTS invoice_events_sequence_trigger IMMEDIATE"))
        lost = (await conn.execute(text("SELECT sequence_id FROM invoice_events"))).scalar_one()
        await conn.rollback()
    async with engine.begin() as conn:
        await insert_draft(conn, "kept")
    events = await poll(engine, 0)
    assert [e.invoice_id for e in events] == ["kept"]
    # The rolled-back transaction took an id before it died; the feed just moves past the hole.
    assert events[0].sequence_id == lost + 1


async def test_events_of_the_issuing_flow_in_commit_order_with_actor(
        engine: AsyncEngine) -> None:
    await define(engine)
    await upsert_draft(engine, Draft("inv-1", "acme", "ABC", 4, {"lines": []}))
    claim = await claim_for_sending(engine, "inv-1", lease_s=60, lock_timeout_ms=5000)
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
    for statement in ("UPDATE invoice_events SET kind = 'issued'",
                      "UPDATE invoice_events SET sequence_id = sequence_id + 1000",
                      "DELETE FROM invoice_events"):
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text(statement))
    assert len(await poll(engine, 0)) == 1
    with pytest.raises(DBAPIError, match="append-only"):
        async with engine.begin() as conn:
            await conn.execute(text("TRUNCATE invoice_events"))
    assert len(await poll(engine, 0)) == 1


@pytest.mark.parametrize(("requested", "at_commit"), [
    ("off", "local"),                  # visible must mean durable: the commit is flushed
    ("local", "local"),
    ("on", "on"),
    ("remote_apply", "remote_apply"),  # stronger settings are left alone
])
async def test_an_event_writing_commit_is_never_asynchronous(
        engine: AsyncEngine, requested: str, at_commit: str) -> None:
    """A crash must not undo a commit a poller may have seen (its sequence_id would be handed
    out again below the poller's cursor), so the sequence trigger upgrades an asynchronous
    commit to a locally flushed one, for the transaction that writes events only."""
    await define(engine)
    async with engine.connect() as conn:
        await conn.begin()
        await conn.execute(text("SELECT set_config('synchronous_commit', :v, true)"),
                           {"v": requested})
        await insert_draft(conn, "inv-1")
        before = (await conn.execute(text("SHOW synchronous_commit"))).scalar_one()
        # Run the deferred sequence trigger now, as the commit would.
        await conn.execute(text("SET CONSTRAINTS invoice_events_sequence_trigger IMMEDIATE"))
        after = (await conn.execute(text("SHOW synchronous_commit"))).scalar_one()
        await conn.commit()
        assert (before, after) == (requested, at_commit)
        # SET LOCAL scope: the session's own setting is back once the transaction is over.
        assert (await conn.execute(text("SHOW synchronous_commit"))).scalar_one() == "on"
        await conn.rollback()
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
