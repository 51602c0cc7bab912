"""The group seal against real PostgreSQL: ``intake_drafts`` (many drafts of a tenant, of any of
its series, in one statement and one commit; ``intake_invoices`` for one series) and the worker's
:class:`gapless.issuing.seals.SealQueue`, which groups the intakes of concurrent deliveries —
with real concurrent transactions on separate pools."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.errors import ReservationLockTimeout, UnknownSeriesError
from gapless.issuing.seals import SealQueue
from gapless.ledger.database import Database
from gapless.ledger.invoices import Claim, ClaimKind, Draft, intake_many, mark_issued_many
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.helpers import await_until, ledger, loop_turns


def draft(invoice_id: str, *, series: str = "ABC", payload: dict[str, Any] | None = None,
          text_: str | None = None) -> Draft:
    return Draft(invoice_id, "acme", series, 1, payload or {"invoice_id": invoice_id},
                 text_)


@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "XYZ"))


@pytest.fixture
async def pools(db_url: str) -> AsyncIterator[list[Database]]:
    """Three pools of their own, as three worker processes have."""
    opened = [await Database.open(db_url, actor="worker", size=4) for _ in range(3)]
    try:
        yield opened
    finally:
        for db in opened:
            await db.close()


async def numbers(engine: AsyncEngine, series: str = "ABC") -> dict[str, int]:
    async with engine.connect() as conn:
        result = await conn.execute(text(
            "SELECT invoice_id, reserved_no FROM invoices WHERE series = :s"
            " AND reserved_no IS NOT NULL"), {"s": series})
        return {row.invoice_id: row.reserved_no for row in result}


async def counter(engine: AsyncEngine, series: str = "ABC") -> int:
    async with engine.connect() as conn:
        value = await conn.scalar(text(
            "SELECT coalesce(max(last_no), 0) FROM number_counters WHERE series = :s"),
            {"s": series})
    return int(value)


@asynccontextmanager
async def held(engine: AsyncEngine) -> AsyncIterator[None]:
    """Invoice 'held' sealed (number 1, its lease already stale), its row locked by another
    transaction until the block ends."""
    await intake_many(ledger(engine), [draft("held")], lease_s=0, lock_timeout_ms=5000,
                      profile_versions=[None])
    async with engine.connect() as conn:
        trans = await conn.begin()
        await conn.execute(text("SELECT 1 FROM invoices WHERE invoice_id = 'held' FOR UPDATE"))
        try:
            yield
        finally:
            await trans.rollback()


def counted(db: Database, **options: Any) -> tuple[SealQueue, list[int]]:
    """A queue (lease 300 s, lock timeout 5 s, ``options`` on top) and the number of drafts of
    each statement it commits, in order."""
    statements: list[int] = []
    queue = SealQueue(db, lease_s=300, lock_timeout_ms=5000,
                      on_statement=lambda drafts, _seconds: statements.append(drafts), **options)
    return queue, statements


def sealed(claims: list[Claim]) -> list[int]:
    return [c.sending.reserved_no for c in claims if c.sending is not None and c.fresh_number]


# -- intake_drafts ---------------------------------------------------------------------------


@pytest.mark.usefixtures("series")
async def test_many_drafts_are_sealed_in_their_order_in_one_statement(
        engine: AsyncEngine) -> None:
    drafts = [draft(f"m-{i}") for i in range(5)]
    claims = await intake_many(ledger(engine), drafts, lease_s=300, lock_timeout_ms=5000,
                               profile_versions=[None] * 5)
    assert [c.kind for c in claims] == [ClaimKind.SEND] * 5
    assert [c.sending.invoice_id for c in claims if c.sending] == [d.invoice_id for d in drafts]
    assert sealed(claims) == [1, 2, 3, 4, 5]
    assert all(c.created for c in claims)
    assert await numbers(engine) == {f"m-{i}": i + 1 for i in range(5)}
    assert await counter(engine) == 5


@pytest.mark.usefixtures("series")
async def test_a_batch_decides_each_draft_as_one_intake_would(engine: AsyncEngine) -> None:
    db = ledger(engine)
    [first] = await intake_many(db, [draft("d-1")], lease_s=300, lock_timeout_ms=5000,
                                profile_versions=[None])
    await intake_many(db, [draft("other", series="XYZ")], lease_s=300, lock_timeout_ms=5000,
                      profile_versions=[None])
    # A redelivery of d-1 (busy: its lease is fresh), a duplicate inside the batch (busy after
    # its first copy's seal), a key that names an invoice of another series (conflict).
    claims = await intake_many(
        db, [draft("d-1"), draft("d-2"), draft("d-2"), draft("other"), draft("d-3")],
        lease_s=300, lock_timeout_ms=5000, profile_versions=[None] * 5)
    assert [c.kind for c in claims] == [ClaimKind.BUSY, ClaimKind.SEND, ClaimKind.BUSY,
                                        ClaimKind.CONFLICT, ClaimKind.SEND]
    assert [c.created for c in claims] == [False, True, False, False, True]
    assert sealed(claims) == [2, 3]
    assert first.sending is not None
    assert first.sending.reserved_no == 1
    assert await counter(engine) == 3


@pytest.mark.usefixtures("series")
async def test_a_stale_profile_seals_nothing_for_that_draft(engine: AsyncEngine) -> None:
    claims = await intake_many(ledger(engine), [draft("s-1"), draft("s-2"), draft("s-3")],
                               lease_s=300, lock_timeout_ms=5000,
                               profile_versions=[None, 7, None])
    assert [c.kind for c in claims] == [ClaimKind.SEND, ClaimKind.STALE, ClaimKind.SEND]
    assert await numbers(engine) == {"s-1": 1, "s-3": 2}


@pytest.mark.usefixtures("series")
async def test_a_lock_not_granted_fails_the_whole_batch_and_consumes_nothing(
        engine: AsyncEngine) -> None:
    async with held(engine):
        with pytest.raises(ReservationLockTimeout, match="3 invoices of series 'ABC'"):
            await intake_many(ledger(engine), [draft("a-1"), draft("held"), draft("a-2")],
                              lease_s=0, lock_timeout_ms=200, profile_versions=[None] * 3)
    assert await numbers(engine) == {"held": 1}
    assert await counter(engine) == 1
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM invoices")) == 1


@pytest.mark.usefixtures("series")
async def test_unknown_series_and_mismatched_arrays_are_refused(engine: AsyncEngine) -> None:
    db = ledger(engine)
    with pytest.raises(UnknownSeriesError):
        await intake_many(db, [draft("u-1", series="NOPE")], lease_s=300, lock_timeout_ms=5000,
                          profile_versions=[None])
    with pytest.raises(ValueError, match="share a tenant"):
        await intake_many(db, [draft("u-1"), Draft("u-2", "other", "ABC", 1, {})], lease_s=300,
                          lock_timeout_ms=5000, profile_versions=[None, None])
    # Among drafts of several series, the driver's error: the queue retries them one by one.
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        await intake_many(db, [draft("u-1"), draft("u-2", series="NOPE")], lease_s=300,
                          lock_timeout_ms=5000, profile_versions=[None, None])
    async with engine.connect() as conn:
        with pytest.raises(Exception, match="every array must have one element per invoice_id"):
            await conn.execute(text(
                "SELECT * FROM intake_invoices(ARRAY['x', 'y'], 'acme', 'ABC',"
                " ARRAY[1]::smallint[], ARRAY['{}', '{}']::jsonb[], 300)"))
    async with engine.connect() as conn:
        with pytest.raises(Exception, match="every array must have one element per invoice_id"):
            await conn.execute(text(
                "SELECT * FROM intake_drafts(ARRAY['x', 'y'], 'acme', ARRAY['ABC'],"
                " ARRAY[1, 1]::smallint[], ARRAY['{}', '{}']::jsonb[], 300)"))
    async with engine.connect() as conn:
        empty = await conn.execute(text(
            "SELECT * FROM intake_invoices(ARRAY[]::text[], 'acme', 'ABC',"
            " ARRAY[]::smallint[], ARRAY[]::jsonb[], 300)"))
        assert empty.all() == []
    assert await counter(engine) == 0


@pytest.mark.usefixtures("series")
async def test_drafts_of_several_series_share_one_statement_each_series_in_its_order(
        engine: AsyncEngine) -> None:
    drafts = [draft("n-1", series="XYZ"), draft("n-2"), draft("n-3", series="XYZ"),
              draft("n-4"), draft("n-5", series="XYZ")]
    claims = await intake_many(ledger(engine), drafts, lease_s=300, lock_timeout_ms=5000,
                               profile_versions=[None] * 5)
    assert [c.sending.invoice_id for c in claims if c.sending] == [d.invoice_id for d in drafts]
    assert [c.series for c in claims] == ["XYZ", "ABC", "XYZ", "ABC", "XYZ"]
    assert sealed(claims) == [1, 1, 2, 2, 3]
    assert await numbers(engine, "ABC") == {"n-2": 1, "n-4": 2}
    assert await numbers(engine, "XYZ") == {"n-1": 1, "n-3": 2, "n-5": 3}
    # The one-series form is the same function with one series for every draft.
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT invoice_id, reserved_no FROM intake_invoices(ARRAY['n-6', 'n-7'], 'acme',"
            " 'XYZ', ARRAY[1, 1]::smallint[], ARRAY['{}', '{}']::jsonb[], 300)"
            " WITH ORDINALITY ORDER BY ordinality"))).all()
        await conn.commit()
    assert [tuple(row) for row in rows] == [("n-6", 4), ("n-7", 5)]


@pytest.mark.usefixtures("series")
async def test_batches_of_two_series_in_crossed_orders_never_deadlock(
        engine: AsyncEngine, pools: list[Database]) -> None:
    # Two processes' statements, each sealing both series, one XYZ first and the other ABC
    # first, while a third settles the round before's invoices (their chain records extend the
    # same counters): the counters are locked in key order whatever the drafts' order, so none
    # waits for another in a circle (PostgreSQL would fail one with a deadlock — it does when
    # the seal takes them in arrival order). No retry here: each call must succeed every time.
    settled: set[int] = set()
    previous: list[Claim] = []
    for round_ in range(40):
        first = [draft(f"k{round_}-a{i}", series=("XYZ", "ABC")[i % 2]) for i in range(6)]
        second = [draft(f"k{round_}-b{i}", series=("ABC", "XYZ")[i % 2]) for i in range(6)]
        sealing = [intake_many(db, drafts, lease_s=300, lock_timeout_ms=10000,
                               profile_versions=[None] * 6)
                   for db, drafts in ((pools[0], first), (pools[1], second))]
        settling = mark_issued_many(pools[2], {c.sending.pk: (f"ref-{c.sending.pk}", None)
                                               for c in previous if c.sending})
        *claims, done = await asyncio.gather(*sealing, settling)
        settled |= done
        previous = [c for batch in claims for c in batch]
    assert len(settled) == 39 * 12
    for code in ("ABC", "XYZ"):
        assert sorted((await numbers(engine, code)).values()) == list(range(1, 241))
        assert await counter(engine, code) == 240


# -- the queue -------------------------------------------------------------------------------


@pytest.mark.usefixtures("series")
async def test_concurrent_intakes_share_statements_and_number_in_arrival_order(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue, statements = counted(pools[0])
    claims = await asyncio.gather(*(queue.intake(draft(f"q-{i}"), profile_version=None)
                                    for i in range(40)))
    assert all(isinstance(c, Claim) and c.kind is ClaimKind.SEND for c in claims)
    assert [c.sending.reserved_no for c in claims if isinstance(c, Claim) and c.sending] == (
        list(range(1, 41)))
    assert sum(statements) == 40
    assert len(statements) < 40, statements  # they waited together: fewer statements
    assert max(statements) > 1


@pytest.mark.usefixtures("series")
async def test_concurrent_intakes_of_two_series_share_statements(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue, statements = counted(pools[0])
    codes = [("ABC", "XYZ")[i % 3 == 0] for i in range(40)]
    claims = await asyncio.gather(*(queue.intake(draft(f"v-{i}", series=code),
                                                 profile_version=None)
                                    for i, code in enumerate(codes)))
    assert all(isinstance(c, Claim) and c.kind is ClaimKind.SEND for c in claims)
    for code in ("ABC", "XYZ"):
        got = [c.sending.reserved_no for c in claims
               if isinstance(c, Claim) and c.sending and c.series == code]
        assert got == list(range(1, codes.count(code) + 1))  # each series in arrival order
    assert sum(statements) == 40
    # Two statements of the tenant at most in flight: the rest went together, both series
    # in one statement.
    assert len(statements) < 20, statements


@pytest.mark.usefixtures("series")
async def test_a_lingering_queue_waits_for_enough_drafts_then_seals_them_in_one_statement(
        engine: AsyncEngine, pools: list[Database]) -> None:
    # A linger far longer than the test: only the third draft's arrival can start the statement.
    queue, statements = counted(pools[0], linger_s=60, enough=3)
    first = asyncio.create_task(queue.intake(draft("g-1"), profile_version=None))
    second = asyncio.create_task(queue.intake(draft("g-2"), profile_version=None))
    await loop_turns()  # turns, not time: the queue is waiting for company
    assert not first.done()
    assert statements == []
    third = await asyncio.wait_for(queue.intake(draft("g-3"), profile_version=None), 10)
    claims = [await first, await second, third]
    assert [c.sending.reserved_no for c in claims if isinstance(c, Claim) and c.sending] == [
        1, 2, 3]
    assert statements == [3]


@pytest.mark.usefixtures("series")
async def test_a_lone_draft_lingers_no_longer_than_the_linger(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue, statements = counted(pools[0], linger_s=0.05, enough=4)
    claim = await asyncio.wait_for(queue.intake(draft("l-1"), profile_version=None), 10)
    assert isinstance(claim, Claim)
    assert claim.kind is ClaimKind.SEND
    assert statements == [1]
    with pytest.raises(ValueError, match="seconds must be at least 0"):
        SealQueue(pools[0], lease_s=300, lock_timeout_ms=5000, linger_s=-1)


@pytest.mark.usefixtures("series")
async def test_an_unknown_series_among_others_fails_only_its_own_draft(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue = SealQueue(pools[0], lease_s=300, lock_timeout_ms=5000, per_tenant=1)
    results = await asyncio.gather(
        queue.intake(draft("w-0"), profile_version=None),
        *(queue.intake(draft(f"w-{i}", series="NOPE" if i == 2 else "XYZ"),
                       profile_version=None) for i in range(1, 5)),
        return_exceptions=True)
    assert isinstance(results[2], UnknownSeriesError)
    assert all(isinstance(r, Claim) and r.kind is ClaimKind.SEND
               for i, r in enumerate(results) if i != 2)
    assert await numbers(engine, "XYZ") == {"w-1": 1, "w-3": 2, "w-4": 3}


@pytest.mark.usefixtures("series")
async def test_a_draft_not_ready_when_its_turn_comes_is_answered_and_not_stored(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue = SealQueue(pools[0], lease_s=300, lock_timeout_ms=5000)
    results = await asyncio.gather(
        queue.intake(draft("r-1"), profile_version=None),
        queue.intake(draft("r-2"), profile_version=None),
        *(queue.intake(draft(f"r-{i}"), profile_version=None, ready=lambda: "held back")
          for i in range(3, 6)))
    assert [r if isinstance(r, str) else r.kind for r in results] == [
        ClaimKind.SEND, ClaimKind.SEND, "held back", "held back", "held back"]
    assert await numbers(engine) == {"r-1": 1, "r-2": 2}
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM invoices")) == 2


@pytest.mark.usefixtures("series")
async def test_a_bad_draft_in_a_batch_does_not_fail_its_neighbours(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue, statements = counted(pools[0], per_tenant=1)
    # Payload text that PostgreSQL refuses as jsonb fails the statement it is in.
    results = await asyncio.gather(
        *(queue.intake(draft(f"b-{i}", text_="{not json" if i == 3 else None),
                       profile_version=None) for i in range(6)),
        return_exceptions=True)
    assert isinstance(results[3], psycopg.errors.InvalidTextRepresentation)
    good = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(r, Claim) and r.kind is ClaimKind.SEND for r in good)
    assert sorted(await numbers(engine)) == sorted(f"b-{i}" for i in range(6) if i != 3)
    assert sorted((await numbers(engine)).values()) == [1, 2, 3, 4, 5]
    assert statements == [1] * 5  # the batch failed; then one statement per good draft


@pytest.mark.usefixtures("series")
async def test_a_lock_timeout_of_a_batch_reaches_every_draft_of_it(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue = SealQueue(pools[0], lease_s=0, lock_timeout_ms=300, per_tenant=1)
    async with held(engine):
        results = await asyncio.gather(
            queue.intake(draft("held"), profile_version=None),
            queue.intake(draft("t-1"), profile_version=None),
            queue.intake(draft("t-2"), profile_version=None), return_exceptions=True)
    # The three went together and waited; the batch failed, and one by one only the held
    # invoice's intake failed again: its neighbours were sealed.
    assert isinstance(results[0], ReservationLockTimeout)
    assert all(isinstance(r, Claim) and r.kind is ClaimKind.SEND for r in results[1:])
    assert await numbers(engine) == {"held": 1, "t-1": 2, "t-2": 3}


@pytest.mark.usefixtures("series")
async def test_two_processes_sealing_the_same_messages_in_crossed_orders_lose_no_number(
        engine: AsyncEngine, pools: list[Database]) -> None:
    # Two pools are two worker processes; each gets every message (duplicated deliveries), in
    # opposite orders, so their batches lock each other's fresh rows: PostgreSQL may find a
    # deadlock and fail one batch, which the queue retries draft by draft.
    ids = [f"x-{i}" for i in range(30)]
    queues = [SealQueue(db, lease_s=300, lock_timeout_ms=10000) for db in pools]
    results = await asyncio.gather(
        *(queues[0].intake(draft(i), profile_version=None) for i in ids),
        *(queues[1].intake(draft(i), profile_version=None) for i in reversed(ids)))
    claims = [r for r in results if isinstance(r, Claim)]
    assert len(claims) == 60
    fresh = sorted(c.sending.invoice_id for c in claims if c.sending and c.fresh_number)
    assert fresh == sorted(ids)  # each sealed once, by one of them
    assert {c.kind for c in claims if not c.fresh_number} == {ClaimKind.BUSY}
    assert sorted((await numbers(engine)).values()) == list(range(1, 31))
    assert await counter(engine) == 30


@pytest.mark.usefixtures("series")
async def test_many_concurrent_sealers_of_one_series_leave_no_gap_and_no_duplicate(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queues = [SealQueue(db, lease_s=300, lock_timeout_ms=10000) for db in pools]
    claims = await asyncio.gather(*(queues[i % 2].intake(draft(f"c-{i}"), profile_version=None)
                                    for i in range(300)))
    assert all(isinstance(c, Claim) and c.fresh_number for c in claims)
    got = await numbers(engine)
    assert sorted(got.values()) == list(range(1, 301))
    assert len(got) == 300


@pytest.mark.usefixtures("series")
async def test_a_cancelled_caller_waits_for_a_sent_statement_and_leaves_a_waiting_draft_unsent(
        engine: AsyncEngine, pools: list[Database]) -> None:
    queue = SealQueue(pools[0], lease_s=0, lock_timeout_ms=30000, per_tenant=1)
    async with held(engine):
        sent = asyncio.create_task(queue.intake(draft("held"), profile_version=None))

        async def blocked() -> bool:
            async with engine.connect() as probe:
                return bool(await probe.scalar(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%intake_invoice%'")))

        await await_until(blocked, 10, message="the statement waits for the row lock")
        behind = asyncio.create_task(queue.intake(draft("w-1"), profile_version=None))
        await asyncio.sleep(0)  # queued behind the running statement
        sent.cancel()
        behind.cancel()
        with pytest.raises(asyncio.CancelledError):
            await behind  # never sent: gone at once
        done, _ = await asyncio.wait([sent], timeout=0.5)
        assert not done, "the caller of a sent statement waits for its end"
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(sent, 10)  # the statement ended; then the cancellation
    await queue.aclose()
    # The sent statement committed (the lease taken over); the draft that waited never went.
    assert await numbers(engine) == {"held": 1}
    async with engine.connect() as conn:
        attempts = await conn.scalar(text(
            "SELECT attempts FROM invoices WHERE invoice_id = 'held'"))
        assert attempts == 2
        assert await conn.scalar(text(
            "SELECT count(*) FROM invoices WHERE invoice_id = 'w-1'")) == 0


# -- any mix of intakes ----------------------------------------------------------------------

ACTIONS = ("go", "held back", "cancel")


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(st.tuples(st.integers(0, 11), st.sampled_from(ACTIONS)), min_size=1,
                       max_size=30),
       per_tenant=st.integers(1, 3), max_batch=st.integers(1, 8))
async def test_any_mix_of_intakes_leaves_each_invoice_one_number_and_no_gap(
        engine: AsyncEngine, pools: list[Database], script: list[tuple[int, str]],
        per_tenant: int, max_batch: int) -> None:
    # Two processes' queues, duplicated messages (12 invoices at most, of two series: a tenant's
    # drafts share statements whatever their series), drafts held back when their turn comes,
    # callers cancelled while they wait or while their statement runs. Each example has series
    # and invoice ids of its own (the database is the test's).
    tag = uuid.uuid4().hex[:8]
    codes = (f"P{tag}", f"Q{tag}")
    async with ledger(engine).transaction() as tx:
        for code in codes:
            await add_series(tx, build_series_spec("acme", code))
    queues = [SealQueue(db, lease_s=300, lock_timeout_ms=10000, per_tenant=per_tenant,
                        max_batch=max_batch) for db in pools]
    tasks = []
    for k, (n, action) in enumerate(script):
        ready = (lambda: "held back") if action == "held back" else (lambda: None)
        tasks.append(asyncio.create_task(queues[k % 2].intake(
            draft(f"{tag}-{n}", series=codes[n % 2]), profile_version=None, ready=ready)))
    await asyncio.sleep(0)  # every intake queued; the first statements are on their way
    for task, (_, action) in zip(tasks, script, strict=True):
        if action == "cancel":
            task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for queue in queues:
        await queue.aclose()

    got: dict[str, int] = {}
    for code in codes:
        numbered = await numbers(engine, code)
        # Each series: no gap, none twice.
        assert sorted(numbered.values()) == list(range(1, len(numbered) + 1)), numbered
        assert await counter(engine, code) == len(numbered)
        got.update(numbered)
    fresh: dict[str, int] = {}
    for (_, action), result in zip(script, results, strict=True):
        if action == "held back":
            assert result == "held back"
        elif action == "go":
            assert isinstance(result, Claim), result
            assert result.kind in (ClaimKind.SEND, ClaimKind.BUSY)
        else:
            assert isinstance(result, asyncio.CancelledError | Claim), result
        if isinstance(result, Claim) and result.fresh_number and result.sending:
            assert result.sending.invoice_id not in fresh, "sealed twice"
            fresh[result.sending.invoice_id] = result.sending.reserved_no
    # Every seal a caller saw is the database's; a seal nobody saw was a cancelled caller's.
    assert all(got[invoice_id] == number for invoice_id, number in fresh.items())
    went = {f"{tag}-{n}" for n, action in script if action == "go"}
    assert went <= set(got)
