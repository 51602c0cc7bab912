"""Series in the database: define one, read one back, preview its next number.

The number itself is sealed by SQL: ``gapless_seal`` in ``schema/current/numbering.sql``, called
by ``intake_invoice`` (``schema/current/intake.sql``) on the worker's path; see
:mod:`gapless.ledger.counters` for the functions other stacks call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from gapless.constants import Channel, ResetPeriod
from gapless.errors import SeriesError, UnknownSeriesError
from gapless.ledger.queries import numbering as q
from gapless.numbers import SeriesSpec


async def add_series(conn: AsyncConnection, spec: SeriesSpec) -> bool:
    """Define a series. True when created, False when an identical one exists already.

    With ``spec.default`` the series becomes the tenant's default for its channel (the previous
    default of that channel stops being one), also when it existed already. Raises SeriesError
    when the code or the prefix is taken by a different definition.
    """
    tz_known = (await conn.execute(q.CHECK_TIME_ZONE, {"tz": spec.tz})).scalar_one()
    if not tz_known:
        raise SeriesError(f"PostgreSQL does not know time zone {spec.tz!r}")
    params = {"tenant": spec.tenant, "code": spec.code, "prefix": spec.prefix,
              "reset": spec.reset.value, "tz": spec.tz, "width": spec.width, "format": spec.format,
              "channel": spec.channel.value}
    if spec.default:
        await conn.execute(q.UNSET_DEFAULT_SERIES, params)
    if (await conn.execute(q.INSERT_SERIES, {**params, "is_default": spec.default})
            ).first() is not None:
        return True
    existing = (await conn.exec_driver_sql(q.GET_SERIES, params)).first()
    if existing is not None:
        same = (existing.prefix, existing.reset, existing.tz, existing.width, existing.format,
                existing.channel) == (spec.prefix, spec.reset.value, spec.tz, spec.width,
                                      spec.format, spec.channel.value)
        if same:
            if spec.default:
                await conn.execute(q.SET_DEFAULT_SERIES, params)
            return False
        raise SeriesError(f"series {spec.code!r} of tenant {spec.tenant!r} exists with another "
                          "definition; a series is never redefined (add a new one)")
    other = (await conn.execute(q.GET_SERIES_BY_PREFIX, params)).scalar_one_or_none()
    raise SeriesError(f"prefix {spec.prefix!r} is already used by series {other!r} of tenant "
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


async def preview_next(conn: AsyncConnection, tenant: str, code: str,
                       at: datetime | None = None) -> Preview:
    """The number the next reservation would take now (or at ``at``); consumes nothing."""
    params = {"tenant": tenant, "code": code, "at": at or datetime.now().astimezone()}
    row = (await conn.execute(q.PREVIEW_NUMBER, params)).first()
    if row is None:
        raise UnknownSeriesError(tenant, code)
    return Preview(row.period_key, row.next_no, row.number)
