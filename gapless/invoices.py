"""Domain operations on invoices: the steps of the issuing flow, each its own short transaction.

The worker, recovery and the operator commands call only these. None of them holds a
transaction across a call to the integrator (I5): each opens, decides, writes and commits.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gapless.constants import Status
from gapless.db import is_lock_timeout, sqlstate
from gapless.errors import (
    InvalidTransition,
    InvoiceNotFound,
    ReservationLockTimeout,
    UnknownSeriesError,
)
from gapless.integrator.base import Document, Receipt
from gapless.queries import invoices as q

FOREIGN_KEY_VIOLATION = "23503"
ALARM_PREFIX = "ALARM: "


@dataclass(frozen=True)
class Draft:
    """What a producer asked for: the validated message, keyed by ``invoice_id``."""

    invoice_id: str
    tenant: str
    series: str
    priority: int
    payload: dict[str, Any]


@dataclass(frozen=True)
class DraftState:
    pk: int
    status: Status
    created: bool


async def upsert_draft(engine: AsyncEngine, draft: Draft) -> DraftState:
    """Step 1: the draft row for ``invoice_id`` (created once; duplicates map to the same row).

    Raises UnknownSeriesError when the series is not defined.
    """
    params = {"invoice_id": draft.invoice_id, "tenant": draft.tenant, "series": draft.series,
              "priority": draft.priority, "payload": json.dumps(draft.payload)}
    try:
        async with engine.begin() as conn:
            row = (await conn.execute(q.INSERT_DRAFT, params)).first()
            if row is not None:
                return DraftState(row.id, Status(row.status), created=True)
            existing = (await conn.execute(q.GET_INVOICE, params)).one()
            return DraftState(existing.id, Status(existing.status), created=False)
    except IntegrityError as exc:
        if sqlstate(exc) == FOREIGN_KEY_VIOLATION:
            raise UnknownSeriesError(draft.tenant, draft.series) from exc
        raise


class ClaimKind(StrEnum):
    SEND = "send"          # the caller holds the lease: send now
    FINAL = "final"        # ISSUED / CANCELLED / VOIDED: nothing to do
    BUSY = "busy"          # SENDING under a fresh lease: another process owns it
    PARKED = "parked"      # ERROR / REJECTED: recovery or an operator owns it


@dataclass(frozen=True)
class Sending:
    """An invoice under the caller's sending lease."""

    pk: int
    invoice_id: str
    tenant: str
    series: str
    number: str
    reserved_no: int
    payload: dict[str, Any]
    attempt: int

    def document(self) -> Document:
        return Document(tenant=self.tenant, number=self.number, invoice_id=self.invoice_id,
                        document=self.payload)


@dataclass(frozen=True)
class Claim:
    kind: ClaimKind
    status: Status
    sending: Sending | None = None
    fresh_number: bool = False


def _sending(row: Any) -> Sending:
    payload = row.payload if isinstance(row.payload, dict) else json.loads(row.payload)
    return Sending(row.id, row.invoice_id, row.tenant, row.series, row.number, row.reserved_no,
                   payload, row.attempts)


async def claim_for_sending(engine: AsyncEngine, invoice_id: str, *, lease_s: float,
                            lock_timeout_ms: int, at: datetime | None = None,
                            before_commit: Callable[[], Awaitable[None]] | None = None) -> Claim:
    """Step 2: lock the invoice, reserve its number if it has none, take the sending lease, commit.

    Locks: the invoice row and (for a fresh reservation) its counter row, for this transaction
    only — a few milliseconds, never across I/O. A SENDING invoice under a fresh lease is left to
    its owner (BUSY); a stale lease is taken over with the same number.
    Raises ReservationLockTimeout when a lock is not granted in time (nothing consumed).
    ``before_commit`` (tests and fault injection only) is awaited on the SEND path just before
    the transaction commits, with both locks held.
    """
    try:
        async with engine.begin() as conn:
            row = (await conn.execute(q.CLAIM_INVOICE, {
                "invoice_id": invoice_id, "lease_s": lease_s,
                "lock_timeout_ms": lock_timeout_ms, "at": at})).first()
            if row is None:
                raise InvoiceNotFound(invoice_id)
            kind = ClaimKind(row.kind)
            if kind is not ClaimKind.SEND:
                return Claim(kind, Status(row.status))
            if before_commit is not None:
                await before_commit()
            return Claim(ClaimKind.SEND, Status.SENDING, _sending(row), fresh_number=row.fresh)
    except DBAPIError as exc:
        # The invoice row lock, or the event commit lock taken at COMMIT, was not granted in time;
        # the transaction rolled back, so nothing was consumed.
        if is_lock_timeout(exc):
            raise ReservationLockTimeout(
                f"invoice {invoice_id!r}: lock not granted within {lock_timeout_ms} ms") from exc
        raise


async def mark_issued(engine: AsyncEngine, pk: int, receipt: Receipt) -> bool:
    """Step 4 (success): ISSUED with the integrator's reference. False if already settled."""
    async with engine.begin() as conn:
        row = (await conn.execute(q.MARK_ISSUED, {"pk": pk, "ref": receipt.ref})).first()
    return row is not None


async def mark_issued_many(engine: AsyncEngine, refs: dict[int, str]) -> set[int]:
    """Step 4 (success) for many invoices (pk -> integrator ref) in one transaction.

    Locks the rows in id order. Returns the pks that became ISSUED (the others were settled).
    """
    if not refs:
        return set()
    pks = sorted(refs)
    async with engine.begin() as conn:
        rows = (await conn.execute(q.MARK_ISSUED_MANY, {
            "pks": pks, "refs": [refs[pk] for pk in pks]})).all()
    return {row.id for row in rows}


async def mark_error(engine: AsyncEngine, sending: Sending, error: str,
                     retry_at: datetime | None) -> bool:
    """Step 4 (transient failure): ERROR, due again at ``retry_at`` (None: parked for a person).

    Fenced by the attempt: False when a newer attempt has taken the invoice over.
    """
    async with engine.begin() as conn:
        row = (await conn.execute(q.MARK_ERROR, {"pk": sending.pk, "error": error[:2000],
                                                 "retry_at": retry_at,
                                                 "attempt": sending.attempt})).first()
    return row is not None


async def mark_alarm(engine: AsyncEngine, sending: Sending, holder_invoice_id: str) -> bool:
    """The number is held by another invoice at the integrator: ERROR, never retried by itself."""
    reason = (f"{ALARM_PREFIX}number {sending.number} is held by invoice {holder_invoice_id!r} "
              "at the integrator")
    return await mark_error(engine, sending, reason, None)


async def mark_rejected(engine: AsyncEngine, sending: Sending, reason: str) -> bool:
    """Step 4 (permanent rejection): REJECTED, the number stays pinned. Fenced like mark_error."""
    async with engine.begin() as conn:
        row = (await conn.execute(q.MARK_REJECTED, {"pk": sending.pk, "reason": reason[:2000],
                                                    "attempt": sending.attempt})).first()
    return row is not None


@dataclass(frozen=True)
class Orphan:
    """A claimed orphan: under the caller's lease, with what it was before the claim."""

    sending: Sending
    was: Status
    prev_sending_since: datetime | None
    prev_next_attempt_at: datetime | None


async def claim_orphans(engine: AsyncEngine, *, stuck_after_s: float, batch: int,
                        max_attempts: int | None = None) -> list[Orphan]:
    """Recovery: claim stuck SENDING and due ERROR invoices (SKIP LOCKED), taking their lease.

    ERROR invoices that already had ``max_attempts`` attempts are left alone (None: no limit).
    Returns each claimed invoice with the status, lease and due time it had before.
    """
    async with engine.begin() as conn:
        rows = (await conn.execute(q.CLAIM_ORPHANS,
                                   {"stuck_after_s": stuck_after_s, "batch": batch,
                                    "max_attempts": max_attempts})).all()
    return [Orphan(_sending(row), Status(row.was), row.prev_since, row.prev_due) for row in rows]


async def release_orphan(engine: AsyncEngine, orphan: Orphan) -> bool:
    """Put a claimed orphan back as it was (status, attempts, lease, due time).

    Only for a claim no integrator call was made for (e.g. the circuit breaker is open), so the
    claim burns no attempt. Fenced by the claim's attempt: False when it has moved on since.
    """
    async with engine.begin() as conn:
        row = (await conn.execute(q.RELEASE_ORPHAN, {
            "pk": orphan.sending.pk, "attempt": orphan.sending.attempt, "was": orphan.was.value,
            "prev_since": orphan.prev_sending_since,
            "prev_due": orphan.prev_next_attempt_at})).first()
    return row is not None


async def get_invoice(conn: AsyncConnection, invoice_id: str) -> Any:
    """The invoice row (no lock); raises InvoiceNotFound."""
    row = (await conn.execute(q.GET_INVOICE, {"invoice_id": invoice_id})).first()
    if row is None:
        raise InvoiceNotFound(invoice_id)
    return row


async def invoice_events(conn: AsyncConnection, pk: int) -> list[Any]:
    return list((await conn.execute(q.INVOICE_EVENTS, {"pk": pk})).all())


async def _operator_update(engine: AsyncEngine, statement: Any, params: dict[str, Any],
                           action: str) -> Any:
    async with engine.begin() as conn:
        row = (await conn.execute(statement, params)).first()
        if row is None:
            current = await get_invoice(conn, params["invoice_id"])
            raise InvalidTransition(
                f"cannot {action} invoice {params['invoice_id']!r}: it is {current.status}"
                + (f" and holds number {current.number}" if current.number else ""))
        return row


async def cancel(engine: AsyncEngine, invoice_id: str, reason: str) -> None:
    """RECEIVED → CANCELLED; only before a number is reserved (no number consumed)."""
    await _operator_update(engine, q.CANCEL, {"invoice_id": invoice_id, "reason": reason},
                           "cancel")


async def void(engine: AsyncEngine, invoice_id: str, reason: str) -> None:
    """ERROR/REJECTED → VOIDED with a reason; the number stays pinned and accounted for."""
    if not reason.strip():
        raise InvalidTransition("a void needs a reason")
    await _operator_update(engine, q.VOID, {"invoice_id": invoice_id, "reason": reason}, "void")


async def start_retry(engine: AsyncEngine, invoice_id: str,
                      payload: dict[str, Any] | None = None) -> Sending:
    """ERROR/REJECTED → SENDING under the caller's lease, with an optional corrected payload."""
    row = await _operator_update(
        engine, q.RETRY,
        {"invoice_id": invoice_id, "payload": None if payload is None else json.dumps(payload)},
        "retry")
    return _sending(row)
