"""The numbering core against real PostgreSQL with real concurrent connections (I1–I3)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.errors import ReservationLockTimeout, UnknownSeriesError
from gapless.ledger.counters import reserve_number
from gapless.ledger.invoices import Draft, upsert_draft
from gapless.ledger.series import add_series, preview_next
from gapless.numbers import build_series_spec
from tests.helpers import await_until, ledger

IST = ZoneInfo("Europe/Istanbul")


class RolledBack(Exception):
    """Ends a test transaction with a rollback."""


async def define(engine: AsyncEngine, tenant: str = "acme", code: str = "ABC",
                 **kw: object) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec(tenant, code, **kw))  # type: ignore[arg-type]


async def draft(engine: AsyncEngine, invoice_id: str, tenant: str = "acme",
                series: str = "ABC") -> None:
    await upsert_draft(ledger(engine), Draft(invoice_id, tenant, series, 1, {"lines": []}))


async def reserve(engine: AsyncEngine, invoice_id: str, at: datetime | None = None,  # type: ignore[no-untyped-def]
                  tenant: str = "acme"):
    async with ledger(engine).transaction() as tx:
        return await reserve_number(tx, invoice_id, tenant=tenant, at=at, lock_timeout_ms=10_000)


async def numbers(engine: AsyncEngine, tenant: str = "acme", series: str = "ABC") -> list[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT reserved_no FROM invoices WHERE tenant = :t AND series = :s "
            "AND reserved_no IS NOT NULL ORDER BY reserved_no"), {"t": tenant, "s": series})
        return [row.reserved_no for row in rows]


async def test_400_reservations_from_20_connections_are_exactly_1_to_400(
        engine: AsyncEngine) -> None:
    await define(engine)
    ids = [f"inv-{i}" for i in range(400)]
    for invoice_id in ids:
        await draft(engine, invoice_id)

    async def connection_worker(chunk: list[str]) -> list[int]:
        got = []
        for invoice_id in chunk:
            got.append((await reserve(engine, invoice_id)).reserved_no)
        return got

    chunks = [ids[i::20] for i in range(20)]
    results = await asyncio.gather(*(connection_worker(chunk) for chunk in chunks))
    reserved = sorted(n for chunk in results for n in chunk)
    assert reserved == list(range(1, 401))
    assert await numbers(engine) == list(range(1, 401))
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT last_no FROM number_counters"))).scalar_one() == 400
        distinct = (await conn.execute(
            text("SELECT count(DISTINCT number) FROM invoices"))).scalar()
        assert distinct == 400


async def test_rolled_back_reservation_consumes_nothing(engine: AsyncEngine) -> None:
    await define(engine)
    await draft(engine, "a")
    await draft(engine, "b")
    got: list[int] = []

    async def reserve_then_roll_back() -> None:
        async with ledger(engine).transaction() as tx:
            got.append((await reserve_number(tx, "a", tenant="acme")).reserved_no)
            raise RolledBack

    with pytest.raises(RolledBack):
        await reserve_then_roll_back()
    assert got == [1]
    assert (await reserve(engine, "b")).reserved_no == 1
    assert (await reserve(engine, "a")).reserved_no == 2
    assert await numbers(engine) == [1, 2]


async def test_reservation_is_idempotent_per_invoice(engine: AsyncEngine) -> None:
    await define(engine)
    await draft(engine, "a")
    first = await reserve(engine, "a")
    again = await reserve(engine, "a")
    assert (first.reserved_no, first.fresh) == (1, True)
    assert (again.reserved_no, again.number, again.fresh) == (1, first.number, False)
    await draft(engine, "a")  # duplicate message: same row, still one number
    assert await numbers(engine) == [1]


async def test_first_use_of_a_period_raced_by_20_connections(engine: AsyncEngine) -> None:
    await define(engine, reset="daily")
    for i in range(20):
        await draft(engine, f"d-{i}")
    at = datetime(2026, 3, 1, 9, 0, tzinfo=IST)
    start = asyncio.Barrier(20)

    async def racer(i: int) -> int:
        async with ledger(engine).transaction() as tx:
            await start.wait()
            return (await reserve_number(tx, f"d-{i}", tenant="acme", at=at,
                                         lock_timeout_ms=10_000)).reserved_no

    got = await asyncio.gather(*(racer(i) for i in range(20)))
    assert sorted(got) == list(range(1, 21))
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT period_key, last_no FROM number_counters"))).all()
    assert [(r.period_key, r.last_no) for r in rows] == [("2026-03-01", 20)]


@pytest.mark.parametrize(("reset", "before", "after", "keys", "numbers_"), [
    ("daily", datetime(2026, 11, 22, 23, 59, 59, 999000, tzinfo=IST),
     datetime(2026, 11, 23, 0, 0, 0, tzinfo=IST), ("2026-11-22", "2026-11-23"),
     ("ABC202611220000" "1", "ABC202611230000" "1")),
    ("monthly", datetime(2026, 11, 30, 23, 59, 59, 999000, tzinfo=IST),
     datetime(2026, 12, 1, 0, 0, 0, tzinfo=IST), ("2026-11", "2026-12"),
     ("ABC2026110000001", "ABC2026120000001")),
    ("yearly", datetime(2026, 12, 31, 23, 59, 59, 999000, tzinfo=IST),
     datetime(2027, 1, 1, 0, 0, 0, tzinfo=IST), ("2026", "2027"),
     ("ABC2026000000001", "ABC2027000000001")),
])
async def test_period_boundaries_in_the_series_time_zone(
        engine: AsyncEngine, reset: str, before: datetime, after: datetime,
        keys: tuple[str, str], numbers_: tuple[str, str]) -> None:
    await define(engine, reset=reset)
    for name in ("before", "after", "again"):
        await draft(engine, name)
    first = await reserve(engine, "before", before)
    second = await reserve(engine, "after", after)
    third = await reserve(engine, "again", after + timedelta(hours=1))
    assert (first.period_key, second.period_key) == keys
    assert (first.reserved_no, second.reserved_no, third.reserved_no) == (1, 1, 2)
    assert (first.number, second.number) == numbers_
    # The same instants in UTC are three hours earlier: the boundary is Istanbul's, not UTC's.
    assert before.astimezone(UTC).hour == 20


async def test_utc_midnight_is_not_the_boundary_of_an_istanbul_series(engine: AsyncEngine) -> None:
    await define(engine, reset="daily")
    await draft(engine, "x")
    await draft(engine, "y")
    a = await reserve(engine, "x", datetime(2026, 11, 22, 21, 30, tzinfo=UTC))  # 00:30 local
    b = await reserve(engine, "y", datetime(2026, 11, 22, 23, 30, tzinfo=UTC))  # 02:30 local
    assert (a.period_key, b.period_key) == ("2026-11-23", "2026-11-23")
    assert (a.reserved_no, b.reserved_no) == (1, 2)


async def test_tenants_and_series_are_independent(engine: AsyncEngine) -> None:
    await define(engine, "acme", "ABC")
    await define(engine, "acme", "XYZ")
    await define(engine, "globex", "ABC")
    for tenant, series in (("acme", "ABC"), ("acme", "XYZ"), ("globex", "ABC")):
        for i in range(3):
            await draft(engine, f"{tenant}-{series}-{i}", tenant, series)
            await reserve(engine, f"{tenant}-{series}-{i}", tenant=tenant)
        assert await numbers(engine, tenant, series) == [1, 2, 3]
    async with engine.connect() as conn:
        printed = (await conn.execute(text(
            "SELECT tenant, number FROM invoices WHERE reserved_no = 1 ORDER BY tenant, series"
        ))).all()
    assert [tuple(r) for r in printed] == [("acme", "ABC2026000000001"),
                                           ("acme", "XYZ2026000000001"),
                                           ("globex", "ABC2026000000001")]


async def test_second_transaction_waits_for_the_first_commit(engine: AsyncEngine) -> None:
    """Lock order, as django-sequences proves it: two real transactions, the exact event order."""
    await define(engine)
    await draft(engine, "first")
    await draft(engine, "second")
    events: list[str] = []
    first_reserved = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with ledger(engine).transaction() as tx:
            got = await reserve_number(tx, "first", tenant="acme", lock_timeout_ms=10_000)
            events.append(f"first reserved {got.reserved_no}")
            first_reserved.set()
            await release_first.wait()
            # Recorded before COMMIT is sent: the second cannot have its number before this.
            events.append("first commits")

    async def second() -> None:
        await first_reserved.wait()
        async with ledger(engine).transaction() as tx:
            pid = (await tx.one("SELECT pg_backend_pid() AS pid")).pid
            second_pid.set_result(pid)
            got = await reserve_number(tx, "second", tenant="acme", lock_timeout_ms=10_000)
            events.append(f"second reserved {got.reserved_no}")

    second_pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def observer() -> None:
        pid = await second_pid

        async def second_is_waiting() -> bool:
            async with engine.connect() as conn:
                wait = (await conn.execute(text(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                    {"pid": pid})).scalar()
            return wait == "Lock"

        await await_until(second_is_waiting, 10, message="second transaction to wait on a lock")
        events.append("second waits")
        release_first.set()

    await asyncio.gather(first(), second(), observer())
    assert events == ["first reserved 1", "second waits", "first commits", "second reserved 2"]


async def test_lock_timeout_raises_a_clear_error_and_consumes_nothing(engine: AsyncEngine) -> None:
    await define(engine)
    await draft(engine, "holder")
    await draft(engine, "waiter")
    async with ledger(engine).transaction() as holder:
        await reserve_number(holder, "holder", tenant="acme")
        with pytest.raises(ReservationLockTimeout, match="within 200 ms"):
            async with ledger(engine).transaction() as tx:
                await reserve_number(tx, "waiter", tenant="acme", lock_timeout_ms=200)
    assert (await reserve(engine, "waiter")).reserved_no == 2
    assert await numbers(engine) == [1, 2]


async def test_unknown_series_is_refused_at_the_draft(engine: AsyncEngine) -> None:
    with pytest.raises(UnknownSeriesError, match="unknown series 'NOPE'"):
        await upsert_draft(ledger(engine), Draft("z", "acme", "NOPE", 1, {}))


async def test_preview_shows_the_next_number_without_consuming_it(engine: AsyncEngine) -> None:
    await define(engine)
    at = datetime(2026, 6, 1, tzinfo=IST)
    assert (await preview_next(ledger(engine), "acme", "ABC", at)).number == "ABC2026000000001"
    assert (await preview_next(ledger(engine), "acme", "ABC", at)).next_no == 1
    await draft(engine, "p")
    got = await reserve(engine, "p", datetime(2026, 6, 1, tzinfo=IST))
    assert got.reserved_no == 1
    assert (await preview_next(ledger(engine), "acme", "ABC", at)).number == "ABC2026000000002"


async def test_a_reserved_number_can_never_change_or_be_deleted(engine: AsyncEngine) -> None:
    await define(engine)
    await draft(engine, "n")
    await reserve(engine, "n")
    for statement in ("UPDATE invoices SET reserved_no = 7",
                      "UPDATE invoices SET number = 'X'",
                      "DELETE FROM invoices"):
        with pytest.raises(Exception, match=r"never changed|cannot be deleted"):
            async with engine.begin() as conn:
                await conn.execute(text(statement))
    assert await numbers(engine) == [1]
