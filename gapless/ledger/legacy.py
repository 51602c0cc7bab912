"""Transitional: the ledger for call sites that still hold a SQLAlchemy connection or engine.

Every domain function of the ledger takes a :class:`~gapless.ledger.database.Database`. These
call sites have not been converted yet because their modules are being moved by their owners:

* ``gapless/cli/core.py`` (``gapless series add | list | bump | next``, moving to
  ``gapless/cli/series.py``) imports :func:`add_series`, :func:`bump_counter`,
  :func:`preview_next` and ``LIST_SERIES`` from here, and runs them on a SQLAlchemy connection;
* ``gapless/cli/status.py`` (moving to ``gapless/ops/status.py``) passes its engine to
  :func:`gapless.ledger.tenants.profiles_in_force` (see :func:`database_of`).

Each wrapper runs the domain function on the connection's own driver connection; what the
function does in a transaction of its own (:func:`add_series`) commits when it returns, as the
``engine.begin()`` block of the caller would. Delete this module once those callers make a
Database at their edge (``gapless.ledger.database.short_lived``).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gapless.ledger import counters, series
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering
from gapless.numbers import SeriesSpec

#: ``numbering.LIST_SERIES`` as ``sqlalchemy.text`` (derived from it, never a copy).
LIST_SERIES: TextClause = text(re.sub(r"%\((\w+)\)s", r":\1", numbering.LIST_SERIES))


async def _on(conn: AsyncConnection) -> Database:
    """A Database on ``conn``'s driver connection (in the transaction open on it, if any)."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return Database._bound(driver)


async def add_series(conn: AsyncConnection, spec: SeriesSpec) -> bool:
    """:func:`gapless.ledger.series.add_series` on a SQLAlchemy connection."""
    return await series.add_series(await _on(conn), spec)


async def bump_counter(conn: AsyncConnection, tenant: str, code: str,
                       past: str) -> counters.Bump:
    """:func:`gapless.ledger.counters.bump_counter` on a SQLAlchemy connection."""
    return await counters.bump_counter(await _on(conn), tenant, code, past)


async def preview_next(conn: AsyncConnection, tenant: str, code: str,
                       at: datetime | None = None) -> series.Preview:
    """:func:`gapless.ledger.series.preview_next` on a SQLAlchemy connection."""
    return await series.preview_next(await _on(conn), tenant, code, at)


def database_of(handle: Database | AsyncEngine | Any) -> Database:
    """``handle`` itself, or a Database borrowing an engine's connections."""
    if isinstance(handle, Database):
        return handle
    assert isinstance(handle, AsyncEngine)
    return Database.borrowing(handle)
