"""Counters from Python: the operator's raise of a counter, and ``reserve_number`` for callers
outside the issuing path.

Where is the number sealed? Not here: in SQL, by ``gapless_seal`` in
``schema/current/numbering.sql``. The worker's path is ``intake_invoice``
(``schema/current/intake.sql``, through :func:`gapless.ledger.invoices.intake`), which locks the
invoice row and calls the seal in one statement; the counter row stays locked only until that
statement commits. :func:`reserve_number` wraps the SQL function ``reserve_tenant_number``
(another caller of ``gapless_seal``, same file) for tests and other stacks, in their own
transaction; the worker never calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from gapless.errors import ReservationLockTimeout, SeriesError, UnknownSeriesError
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as q
from gapless.ledger.series import series_spec
from gapless.ledger.sqlstates import is_lock_timeout
from gapless.numbers import parse_number


@dataclass(frozen=True)
class Bump:
    """A counter raised by :func:`bump_counter` (``before`` None: the period had no row)."""

    period_key: str
    before: int | None
    after: int


async def bump_counter(db: Database, tenant: str, code: str, past: str) -> Bump:
    """Raise the counter of the period that printed number ``past`` belongs to, so that no seal
    hands out ``past`` or any number below it again; never lowers a counter. One statement: the
    counter row is locked until it commits (in a caller's transaction: until that ends).

    What for: a database that lost seals the integrator holds (a failover to a standby that
    lacked them, a restore) would hand those numbers out again; the audit names the highest
    (``integrator_ahead_of_counter``). The numbers skipped are on no invoice here — the audit
    keeps naming them, and the integrator's documents are their record (docs/operations.md).
    Raises UnknownSeriesError, or SeriesError when the series cannot have printed ``past``.
    """
    row = await db.one(q.GET_SERIES, {"tenant": tenant, "code": code})
    if row is None:
        raise UnknownSeriesError(tenant, code)
    spec = series_spec(row)
    located = parse_number(spec, past)
    if located is None:
        raise SeriesError(f"{past!r} is not a number of series {code!r} of tenant {tenant!r} "
                          f"(it prints {spec.format} with prefix {spec.prefix} and "
                          f"{spec.width} digits)")
    period_key, value = located
    bumped = await db.one(q.BUMP_COUNTER, {
        "tenant": tenant, "series": code, "period_key": period_key, "last_no": value})
    return Bump(period_key, None if bumped.before is None else int(bumped.before),
                int(bumped.after))


@dataclass(frozen=True)
class Reservation:
    """The number pinned on an invoice. ``fresh`` is False when it already had one."""

    invoice_pk: int
    reserved_no: int
    number: str
    period_key: str
    fresh: bool


async def reserve_number(db: Database, invoice_id: str, *, tenant: str,
                         at: datetime | None = None,
                         lock_timeout_ms: int | None = None) -> Reservation:
    """Pin a gap-free number on the tenant's invoice: in the caller's transaction when ``db`` is
    bound to one (:meth:`Database.transaction`), else in a transaction of its own (one
    statement).

    Locks the invoice row, and — only if it has no number yet — advances its counter and pins
    ``reserved_no``, ``number`` and ``period_key``, dated ``at`` (default: the transaction's start)
    in the series' time zone. Both locks are held until the transaction commits or rolls back:
    commit at once, and never hold the transaction across I/O. Raises ReservationLockTimeout when
    a lock is not granted within ``lock_timeout_ms`` (the transaction is then unusable; roll it
    back).
    """
    try:
        row = await db.one(q.RESERVE_NUMBER, {
            "tenant": tenant, "invoice_id": invoice_id, "at": at,
            "lock_timeout_ms": lock_timeout_ms})
    except psycopg.Error as exc:
        if is_lock_timeout(exc):
            raise ReservationLockTimeout(
                f"invoice {invoice_id!r}: lock not granted within {lock_timeout_ms} ms"
            ) from exc
        raise
    return Reservation(row.invoice_pk, row.reserved_no, row.number, row.period_key, row.fresh)
