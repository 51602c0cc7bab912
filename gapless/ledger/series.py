"""Series in the database: define one, read one back, preview its next number.

The number itself is sealed by SQL: ``gapless_seal`` in ``schema/current/numbering.sql``, called
by ``intake_invoice`` (``schema/current/intake.sql``) on the worker's path; see
:mod:`gapless.ledger.counters` for the functions other stacks call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gapless.constants import Channel, ResetPeriod
from gapless.errors import SeriesError, UnknownSeriesError
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as q
from gapless.numbers import SeriesSpec


async def add_series(db: Database, spec: SeriesSpec) -> bool:
    """Define a series. True when created, False when an identical one exists already.

    With ``spec.default`` the series becomes the tenant's default for its channel (the previous
    default of that channel stops being one), also when it existed already. Raises SeriesError
    when the code or the prefix is taken by a different definition. One transaction: the rows of
    the tenant's series whose default flag changes stay locked until it commits.
    """
    async with db.transaction() as tx:
        return await _add_series(tx, spec)


async def _add_series(tx: Database, spec: SeriesSpec) -> bool:
    known = await tx.one(q.CHECK_TIME_ZONE, {"tz": spec.tz})
    if not known[0]:
        raise SeriesError(f"PostgreSQL does not know time zone {spec.tz!r}")
    params = {"tenant": spec.tenant, "code": spec.code, "prefix": spec.prefix,
              "reset": spec.reset.value, "tz": spec.tz, "width": spec.width, "format": spec.format,
              "channel": spec.channel.value}
    if spec.default:
        await tx.execute(q.UNSET_DEFAULT_SERIES, params)
    if await tx.one(q.INSERT_SERIES, {**params, "is_default": spec.default}) is not None:
        return True
    existing = await tx.one(q.GET_SERIES, params)
    if existing is not None:
        same = (existing.prefix, existing.reset, existing.tz, existing.width, existing.format,
                existing.channel) == (spec.prefix, spec.reset.value, spec.tz, spec.width,
                                      spec.format, spec.channel.value)
        if same:
            if spec.default:
                await tx.execute(q.SET_DEFAULT_SERIES, params)
            return False
        raise SeriesError(f"series {spec.code!r} of tenant {spec.tenant!r} exists with another "
                          "definition; a series is never redefined (add a new one)")
    other = await tx.one(q.GET_SERIES_BY_PREFIX, params)
    raise SeriesError(f"prefix {spec.prefix!r} is already used by series "
                      f"{None if other is None else other.code!r} of tenant "
                      f"{spec.tenant!r}; numbers of one tenant must never print alike")


def series_spec(row: Any) -> SeriesSpec:
    """A SeriesSpec from a ``series`` row."""
    return SeriesSpec(row.tenant, row.code, row.prefix, ResetPeriod(row.reset), row.tz,
                      row.width, row.format, Channel(row.channel), row.is_default)


@dataclass(frozen=True)
class Preview:
    period_key: str
    next_no: int
    number: str


async def preview_next(db: Database, tenant: str, code: str,
                       at: datetime | None = None) -> Preview:
    """The number the next reservation would take now (or at ``at``); consumes nothing, locks
    nothing."""
    params = {"tenant": tenant, "code": code, "at": at or datetime.now().astimezone()}
    row = await db.one(q.PREVIEW_NUMBER, params)
    if row is None:
        raise UnknownSeriesError(tenant, code)
    return Preview(row.period_key, row.next_no, row.number)


async def list_series(db: Database, *, tenant: str | None = None,
                      code: str | None = None) -> list[Any]:
    """Every series (of ``tenant``, or one ``code``) with every counter period and the printed
    number of its last value (no lock); a series without counters has one row, period NULL."""
    return await db.all(q.LIST_SERIES, {"tenant": tenant, "code": code})
