"""The commit-ordered event feed: "everything after cursor N", for pollers that must miss nothing.

Every invoice state change writes an ``invoice_events`` row (the history trigger), and the row's
``sequence_id`` is assigned when its transaction commits, under the commit lock, so ids grow in
commit order and the lock is only released once the commit is visible (schema/sql/0001). A reader
that has seen id N can therefore never later find a committed row below N: a client that keeps
asking for ``sequence_id > last id seen`` sees every event exactly once (I6), however writers
interleave. Ids may have holes (a transaction that rolled back after taking its id); a cursor only
ever moves forward over them.

Reading takes no lock and never waits for writers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from gapless.errors import InvalidFeedRequest
from gapless.queries import feed as q

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
#: sequence_id is a bigint; a larger cursor can only be a client bug.
MAX_CURSOR = 2**63 - 1


@dataclass(frozen=True)
class FeedEvent:
    """One committed state change, as the feed serves it."""

    sequence_id: int
    invoice_id: str
    tenant: str
    series: str
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


async def events_after(conn: AsyncConnection, cursor: int, limit: int,
                       tenant: str | None = None) -> list[FeedEvent]:
    """Committed events with ``sequence_id > cursor``, oldest first, at most ``limit``.

    With ``tenant`` only that tenant's events. Rows of transactions still in flight are not
    returned (they have no ``sequence_id`` yet, and are invisible anyway); they will appear above
    any id this call returns. One statement, one snapshot; no lock.
    """
    check_cursor(cursor)
    check_limit(limit)
    params: dict[str, Any] = {"cursor": cursor, "limit": limit}
    if tenant is None:
        result = await conn.execute(q.EVENTS_AFTER, params)
    else:
        result = await conn.execute(q.TENANT_EVENTS_AFTER, {**params, "tenant": tenant})
    return [FeedEvent(row.sequence_id, row.invoice_id, row.tenant, row.series, row.kind,
                      row.from_status, row.to_status, row.number, row.attempts, row.detail,
                      row.actor, row.created_at) for row in result]


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
