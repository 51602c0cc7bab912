"""The commit-ordered event feed: "everything after cursor N", for pollers that must miss nothing.

Every invoice state change writes an ``invoice_events`` row (the history trigger), and so does
every message the worker refuses before a number (a ``refused`` event,
:mod:`gapless.ledger.refusals`). Writers commit it without a position and without any lock, so
they never wait for each other. Its ``sequence_id``
is given afterwards by :func:`position_events` (``gapless_feed_assign()``,
schema/current/feed.sql): the committed events still waiting, numbered on from the largest
position given, in insertion order, in one short transaction under a lock that only
position-givers take and that is released only once the batch is visible. A reader that has seen
position N can therefore never later find a position below N: a client that keeps asking for
``sequence_id > last id seen`` sees every event exactly once (I6), however writers interleave and
whatever order they commit in. An invoice's own events keep their causal order (a transaction
that changed it after another committed inserted its events later). Positions are dense.

:func:`events_after` positions what is waiting, then reads; the read takes no lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from gapless.errors import InvalidFeedRequest
from gapless.ledger.database import Database, to_completion
from gapless.ledger.queries import feed as q
from gapless.ledger.sqlstates import is_lock_timeout

log = structlog.get_logger("gapless.ledger.feed")

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
#: sequence_id is a bigint; a larger cursor can only be a client bug.
MAX_CURSOR = 2**63 - 1
#: Events positioned per call of :func:`position_events` (one transaction).
ASSIGN_BATCH = 10_000
#: How long a reader waits for another position-giver before reading what is already positioned.
ASSIGN_WAIT_MS = 250
#: How often the API positions waiting events when nobody polls (sequence_id filled in for SQL
#: readers of invoice_events within about this long of a commit).
POSITION_INTERVAL_S = 0.5


@dataclass(frozen=True)
class FeedEvent:
    """One committed state change, as the feed serves it."""

    sequence_id: int
    invoice_id: str
    tenant: str
    #: None only for a ``refused`` event whose message got no series (nothing was numbered).
    series: str | None
    kind: str
    from_status: str | None
    to_status: str
    number: str | None
    attempts: int
    detail: str | None
    actor: str
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: ``created_at`` in ISO 8601, UTC (``…Z``)."""
        return {
            "sequence_id": self.sequence_id,
            "invoice_id": self.invoice_id,
            "tenant": self.tenant,
            "series": self.series,
            "kind": self.kind,
            "from_status": self.from_status,
            "to_status": self.to_status,
            "number": self.number,
            "attempts": self.attempts,
            "detail": self.detail,
            "actor": self.actor,
            "created_at": iso_utc(self.created_at),
        }


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, e.g. ``2026-11-22T10:15:00.123456Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def position_events(db: Database, *, wait_ms: int = ASSIGN_WAIT_MS,
                          batch: int = ASSIGN_BATCH) -> int:
    """Give the committed events still waiting their feed positions; how many got one.

    One statement in a transaction of its own (``db`` must not be bound to a transaction),
    committed, so the positions are visible when this returns. Nothing waiting: one index probe,
    no lock, no write. If another session holds the position lock for longer than ``wait_ms``
    this gives up and returns 0: what that session positions appears as soon as it commits.
    """
    try:
        row = await db.one(q.ASSIGN, {"wait_ms": wait_ms, "batch": batch})
    except Exception as exc:
        if not is_lock_timeout(exc):
            raise
        log.debug("feed_position_lock_busy", wait_ms=wait_ms)
        return 0
    return int(row.done)


async def keep_positioning(db: Database, interval: float = POSITION_INTERVAL_S) -> None:
    """Position waiting events every ``interval`` seconds until cancelled (``gapless api`` runs
    it). A failed round (database away) is logged once and retried on the next. A cancellation
    waits for the round under way (:func:`gapless.ledger.database.to_completion`): its commit is
    never cancelled, so a synchronous standby never misses positions the primary kept."""
    failing = False

    while True:
        try:
            await to_completion(position_events(db))
        except Exception as exc:  # any failure: the next round retries
            if not failing:
                log.warning("feed_positioning_failed", error=type(exc).__name__)
            failing = True
        else:
            if failing:
                log.info("feed_positioning_resumed")
            failing = False
        await asyncio.sleep(interval)


async def events_after(db: Database, cursor: int, limit: int,
                       tenant: str | None = None) -> list[FeedEvent]:
    """Committed events with ``sequence_id > cursor``, oldest first, at most ``limit``.

    With ``tenant`` only that tenant's events. Positions what is waiting first
    (:func:`position_events`), then reads in one statement, one snapshot, no lock. ``db`` must
    not be bound to a transaction. Events of transactions still in flight are not
    returned (they are invisible, and have no position yet); they will appear above any position
    this call returns.
    """
    check_cursor(cursor)
    check_limit(limit)
    await position_events(db)
    params: dict[str, Any] = {"cursor": cursor, "limit": limit}
    if tenant is None:
        rows = await db.all(q.EVENTS_AFTER, params)
    else:
        rows = await db.all(q.TENANT_EVENTS_AFTER, {**params, "tenant": tenant})
    return [FeedEvent(row.sequence_id, row.invoice_id, row.tenant, row.series, row.kind,
                      row.from_status, row.to_status, row.number, row.attempts, row.detail,
                      row.actor, row.created_at) for row in rows]


def check_cursor(cursor: int) -> int:
    if not 0 <= cursor <= MAX_CURSOR:
        raise InvalidFeedRequest(f"cursor must be an integer between 0 and {MAX_CURSOR}")
    return cursor


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidFeedRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    return limit


def parse_cursor(value: str | None) -> int:
    """A cursor from a query string: absent means 0 (the beginning)."""
    if value is None or value == "":
        return 0
    return check_cursor(_integer("cursor", value, MAX_CURSOR))


def parse_limit(value: str | None) -> int:
    """A page size from a query string: absent means DEFAULT_LIMIT; 1..MAX_LIMIT."""
    if value is None or value == "":
        return DEFAULT_LIMIT
    return check_limit(_integer("limit", value, MAX_LIMIT))


def _integer(name: str, value: str, maximum: int) -> int:
    # Plain decimal digits only: no sign, spaces, underscores or exponents, bounded length.
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        lowest = 0 if name == "cursor" else 1
        raise InvalidFeedRequest(f"{name} must be an integer between {lowest} and {maximum}")
    return int(value)
