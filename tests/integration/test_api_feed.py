"""``GET /v1/events`` over real HTTP from a ``gapless api`` process: commit order under
out-of-order commits, paging with ``next``, bad parameters, and a 20 s soak with 8 writers (I6).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gapless.integrator.base import Receipt
from gapless.ledger.counters import reserve_number
from gapless.ledger.feed import MAX_LIMIT, events_after, position_events
from gapless.ledger.invoices import Draft, claim_for_sending, mark_error, mark_issued, upsert_draft
from gapless.ledger.queries import invoices as qi
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.conftest import ApiServers
from tests.helpers import ledger

FEED_COLUMNS = ("sequence_id", "invoice_id", "tenant", "series", "kind", "from_status",
                "to_status", "number", "attempts", "detail", "actor")


class Feed:
    """A feed client following the API's own URLs, as a downstream system would."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {token}"}
        self.start = f"{url}/v1/events"

    async def get(self, url: str, **params: Any) -> dict[str, Any]:
        response = await self.http.get(url, params=params or None, headers=self.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def walk(self, url: str) -> tuple[list[dict[str, Any]], str, int]:
        """Follow ``next`` to the end: (events, the last page's poll_more, pages read)."""
        events: list[dict[str, Any]] = []
        pages = 0
        while True:
            page = await self.get(url)
            pages += 1
            events.extend(page["results"])
            if page["next"] is None:
                return events, page["poll_more"], pages
            url = page["next"]


@pytest.fixture
async def feed_api(api_servers: ApiServers, engine: AsyncEngine) -> AsyncIterator[Feed]:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    token = secrets.token_urlsafe(24)
    url, _ = api_servers.start(token)
    async with httpx.AsyncClient(timeout=30) as http:
        yield Feed(http, url, token)


class RolledBack(Exception):
    """Ends a test transaction with a rollback."""


async def insert_draft(conn: AsyncConnection, invoice_id: str, tenant: str = "acme",
                       series: str = "ABC") -> None:
    await conn.exec_driver_sql(qi.UPSERT_DRAFT, {"invoice_id": invoice_id, "tenant": tenant,
                                         "series": series, "priority": 1, "payload": "{}"})


async def table(engine: AsyncEngine) -> list[dict[str, Any]]:
    """The whole invoice_events table in sequence_id order, as the feed renders it (every
    committed event positioned first)."""
    await position_events(ledger(engine))
    async with engine.connect() as conn:
        rows = await conn.execute(text(
            f"SELECT {', '.join(FEED_COLUMNS)} FROM invoice_events "
            "ORDER BY sequence_id"))
        return [{**{c: getattr(row, c) for c in FEED_COLUMNS}} for row in rows]


def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{c: e[c] for c in FEED_COLUMNS} for e in events]


async def test_late_commit_is_returned_by_the_next_poll_more(feed_api: Feed,
                                                             engine: AsyncEngine) -> None:
    async with engine.connect() as a, engine.connect() as b:
        await a.begin()
        await insert_draft(a, "inv-a")  # A writes its event first and stays open
        await b.begin()
        await insert_draft(b, "inv-b")
        await b.commit()

        first = await feed_api.get(feed_api.start)
        assert [e["invoice_id"] for e in first["results"]] == ["inv-b"]
        assert first["next"] is None
        b_seq = first["results"][0]["sequence_id"]
        assert f"cursor={b_seq}" in first["poll_more"]

        await a.commit()

    second = await feed_api.get(first["poll_more"])
    assert [e["invoice_id"] for e in second["results"]] == ["inv-a"]
    assert second["results"][0]["sequence_id"] > b_seq
    third = await feed_api.get(second["poll_more"])
    assert third["results"] == []
    assert third["poll_more"] == second["poll_more"]  # nothing new: the cursor stays


async def test_next_walks_every_event_once_for_any_page_size(feed_api: Feed,
                                                             engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for i in range(90):
            await insert_draft(conn, f"a-{i}")
            if i % 3 == 0:
                await insert_draft(conn, f"g-{i}", "globex", "GLX")
    expected = comparable(await table(engine))
    assert len(expected) == 120
    rng = random.Random(6)
    limits = sorted({1, 2, 7, 30, 119, 120, 121, MAX_LIMIT, *rng.sample(range(1, 501), 4)})
    for limit in limits:
        events, poll_more, pages = await feed_api.walk(f"{feed_api.start}?limit={limit}")
        assert comparable(events) == expected, limit
        assert pages == len(expected) // limit + 1  # a full last page is followed by an empty
        assert f"cursor={expected[-1]['sequence_id']}" in poll_more
        assert (await feed_api.get(poll_more))["results"] == []
    # A tenant's feed pages the same way and holds only its events.
    events, _, _ = await feed_api.walk(f"{feed_api.start}?limit=7&tenant=globex")
    assert comparable(events) == [e for e in expected if e["tenant"] == "globex"]


async def test_feed_urls_are_absolute_and_keep_limit_and_tenant(feed_api: Feed,
                                                                engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for i in range(3):
            await insert_draft(conn, f"g-{i}", "globex", "GLX")
    page = await feed_api.get(feed_api.start, limit="2", tenant="globex")
    first_two = [e["sequence_id"] for e in page["results"]]
    assert page["next"] == (f"{feed_api.start}?cursor={first_two[-1]}&limit=2&tenant=globex")
    assert page["poll_more"] == page["next"]
    last = await feed_api.get(page["next"])
    assert last["next"] is None
    assert last["poll_more"].startswith("http://127.0.0.1:")
    assert last["results"][0]["created_at"].endswith("Z")
    default = await feed_api.get(feed_api.start)
    assert "limit=100" in default["poll_more"]


@pytest.mark.parametrize(("params", "problem"), [
    ({"cursor": "-1"}, "cursor must be an integer"),
    ({"cursor": "abc"}, "cursor must be an integer"),
    ({"cursor": "1.5"}, "cursor must be an integer"),
    ({"cursor": "9" * 25}, "cursor must be an integer"),
    ({"limit": "0"}, "limit must be an integer between 1 and 500"),
    ({"limit": "501"}, "limit must be an integer between 1 and 500"),
    ({"limit": "-5"}, "limit must be an integer"),
    ({"limit": "ten"}, "limit must be an integer"),
    ({"tenant": "no such/tenant"}, "tenant must be"),
])
async def test_bad_cursor_limit_or_tenant_is_400_with_a_message(
        feed_api: Feed, params: dict[str, str], problem: str) -> None:
    response = await feed_api.http.get(feed_api.start, params=params, headers=feed_api.headers)
    assert response.status_code == 400
    assert problem in response.json()["detail"]


# ------------------------------------------------------------------------------ soak

SOAK_SECONDS = 20.0
WRITERS = 8


class Writer:
    """One writer on its own connection(s): random transactions of random length, mixing plain
    SQL transactions (held open across sleeps, some rolled back) with the domain operations."""

    def __init__(self, engine: AsyncEngine, index: int, deadline: float) -> None:
        self.engine = engine
        self.index = index
        self.deadline = deadline
        self.rng = random.Random(index)
        self.serial = 0
        self.rolled_back = 0

    def new_id(self) -> str:
        self.serial += 1
        return f"w{self.index}-{self.serial}"

    def tenant(self) -> tuple[str, str]:
        return ("acme", "ABC") if self.rng.random() < 0.6 else ("globex", "GLX")

    async def run(self) -> None:
        while time.monotonic() < self.deadline:
            choice = self.rng.random()
            if choice < 0.5:
                await self.long_sql_transaction()
            else:
                await self.domain_flow()

    async def long_sql_transaction(self) -> None:
        """Drafts and a reservation in one transaction that sleeps while open."""
        try:
            async with ledger(self.engine).transaction() as tx:
                for _ in range(self.rng.randint(1, 3)):
                    invoice_id = self.new_id()
                    tenant, series = self.tenant()
                    await tx.one(qi.UPSERT_DRAFT, {"invoice_id": invoice_id, "tenant": tenant,
                                                   "series": series, "priority": 1,
                                                   "payload": "{}"})
                    await asyncio.sleep(self.rng.uniform(0, 0.15))
                if self.rng.random() < 0.7:
                    await reserve_number(tx, invoice_id, tenant=tenant, lock_timeout_ms=10_000)
                    await tx.execute(
                        "UPDATE invoices SET status = 'SENDING', attempts = attempts + 1, "
                        "sending_since = now() WHERE invoice_id = %(i)s", {"i": invoice_id})
                await asyncio.sleep(self.rng.uniform(0, 0.3))
                if self.rng.random() < 0.15:
                    raise RolledBack
        except RolledBack:
            self.rolled_back += 1

    async def domain_flow(self) -> None:
        """The worker's steps through the domain operations, each its own short transaction."""
        invoice_id = self.new_id()
        tenant, series = self.tenant()
        await upsert_draft(ledger(self.engine), Draft(invoice_id, tenant, series, 4, {}))
        claim = await claim_for_sending(ledger(self.engine), invoice_id, tenant=tenant,
                                        lease_s=60, lock_timeout_ms=10_000)
        assert claim.sending is not None
        await asyncio.sleep(self.rng.uniform(0, 0.05))
        if self.rng.random() < 0.8:
            await mark_issued(ledger(self.engine), claim.sending.pk, Receipt(
                tenant, claim.sending.number, invoice_id, f"ref-{invoice_id}"))
        else:
            await mark_error(ledger(self.engine), claim.sending, "integrator down", None)


class SqlPoller:
    """A second kind of feed client: ``events_after`` on its own connection. Every poller also
    gives positions, so position-givers race each other as well as the writers."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.cursor = 0
        self.seen: list[dict[str, Any]] = []

    async def poll_once(self) -> bool:
        page = await events_after(ledger(self.engine), self.cursor, 50)
        self.seen.extend(e.as_json() for e in page)
        if page:
            self.cursor = page[-1].sequence_id
        return len(page) < 50


@pytest.mark.slow
async def test_soak_pollers_see_exactly_the_table_in_order(feed_api: Feed,
                                                            engine: AsyncEngine) -> None:
    deadline = time.monotonic() + SOAK_SECONDS
    writers = [Writer(engine, i, deadline) for i in range(WRITERS)]
    collected: list[dict[str, Any]] = []
    url = f"{feed_api.start}?limit=50"
    sql_pollers = [SqlPoller(engine) for _ in range(2)]

    async def poll_once() -> bool:
        """One request; True when the poller is caught up (no next page)."""
        nonlocal url
        page = await feed_api.get(url)
        collected.extend(page["results"])
        url = page["next"] or page["poll_more"]
        return page["next"] is None

    async def poller(stop: asyncio.Event, once: Callable[[], Awaitable[bool]]) -> None:
        while not stop.is_set():
            if await once():
                # Poll cadence of a downstream client, not a synchronisation.
                await asyncio.sleep(0.02)

    stop = asyncio.Event()
    polling = [asyncio.create_task(poller(stop, once))
               for once in (poll_once, *(p.poll_once for p in sql_pollers))]
    await asyncio.gather(*(writer.run() for writer in writers))
    stop.set()
    await asyncio.gather(*polling)
    for once in (poll_once, *(p.poll_once for p in sql_pollers)):
        while not await once():  # the writers are done: drain to the end
            pass

    final = await table(engine)
    for seen in (collected, *(p.seen for p in sql_pollers)):
        assert [e["sequence_id"] for e in seen] == sorted({e["sequence_id"] for e in seen})
        assert comparable(seen) == comparable(final)
    # Each invoice's history is in causal order along the feed: every event starts where the
    # invoice's previous one ended.
    last: dict[str, str] = {}
    for event in final:
        assert event["from_status"] == last.get(event["invoice_id"]), event
        last[event["invoice_id"]] = event["to_status"]
    # The run really exercised the hazard: plenty of events, rollbacks, and commits in another
    # order than the events were written (insertion id order disagrees with sequence_id order).
    assert len(final) > 300
    assert sum(w.rolled_back for w in writers) > 0
    async with engine.connect() as conn:
        inversions = (await conn.execute(text(
            "SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY sequence_id) AS prev "
            "FROM invoice_events) t WHERE id < prev"))).scalar_one()
    assert inversions > 0
