"""Domain operations on invoices: the steps of the issuing flow, each one short transaction.

The worker, recovery and the operator commands call only these. None of them holds a
transaction across a call to the integrator (I5): each is one statement that decides, writes and
commits (:class:`gapless.ledger.database.Database`, autocommit), except the test-only
``before_commit`` hook of a claim. Each takes the one database handle,
:class:`~gapless.ledger.database.Database`.

An invoice is named by its producer key, ``(tenant, invoice_id)``: ``invoice_id`` is unique per
tenant, so every function that finds an invoice by its id takes the tenant too (keyword
``tenant``). A command that names the id alone asks :func:`resolve_tenant` first.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import psycopg

from gapless.constants import Status
from gapless.errors import (
    AmbiguousInvoice,
    InvalidTransition,
    InvoiceNotFound,
    ReservationLockTimeout,
    UnknownSeriesError,
)
from gapless.integrator.base import Document, DuplicateOfAnother, Receipt
from gapless.ledger.arrays import BigintArray, BytesArray, IntegerArray, SmallintArray, TextArray
from gapless.ledger.database import Database
from gapless.ledger.queries import invoices as q
from gapless.ledger.sqlstates import is_lock_timeout, sqlstate
from gapless.message import jsontext

FOREIGN_KEY_VIOLATION = "23503"
ALARM_PREFIX = "ALARM: "
#: last_error of a sealed invoice whose stored message cannot make its document.
UNRENDERABLE_PREFIX = "DOCUMENT: "
#: last_error is bounded (a reason is a line, not a dump).
MAX_ERROR = 2000
#: A stored payload is a message (nested at most 16 deep); read back with room to spare.
MAX_PAYLOAD_DEPTH = 64


#: A payload, or what makes it when first read.
Payload = dict[str, Any] | Callable[[], dict[str, Any]]


def _made(payload: Payload) -> dict[str, Any]:
    return payload if isinstance(payload, dict) else payload()


@dataclass(frozen=True)
class Draft:
    """What a producer asked for: the validated message, keyed by ``invoice_id``."""

    invoice_id: str
    tenant: str
    series: str
    priority: int
    #: The payload, or what makes it when first read (a message's ``payload`` method: the
    #: worker's UBL-TR documents are made from the message, and never need the dict).
    payload: Payload
    #: The payload as JSON text (:func:`gapless.message.jsontext.dumps`), when the caller has
    #: it already (a message's body); None: it is written from ``payload``.
    text: str | None = None

    @property
    def payload_text(self) -> str:
        return jsontext.dumps(_made(self.payload)) if self.text is None else self.text


@dataclass(frozen=True)
class DraftState:
    pk: int
    status: Status
    created: bool


async def upsert_draft(db: Database, draft: Draft) -> DraftState:
    """Store the draft for ``(tenant, invoice_id)`` without claiming it (created once; a
    duplicate maps to the same row and changes nothing). Raises UnknownSeriesError when the
    series is not defined. The worker does this and the claim in one statement
    (:func:`intake`)."""
    try:
        row = await db.one(q.UPSERT_DRAFT, {
            "invoice_id": draft.invoice_id, "tenant": draft.tenant, "series": draft.series,
            "priority": draft.priority, "payload": draft.payload_text})
    except psycopg.Error as exc:
        if sqlstate(exc) == FOREIGN_KEY_VIOLATION:
            raise UnknownSeriesError(draft.tenant, draft.series) from exc
        raise
    return DraftState(row.id, Status(row.status), row.created)


class ClaimKind(StrEnum):
    SEND = "send"          # the caller holds the lease: send now
    FINAL = "final"        # ISSUED / CANCELLED / VOIDED: nothing to do
    BUSY = "busy"          # SENDING under a fresh lease: another process owns it
    PARKED = "parked"      # ERROR / REJECTED: recovery or an operator owns it
    STALE = "stale"        # the issuer profile changed: re-check the message, then come back
    CONFLICT = "conflict"  # the producer key names an invoice of another series


@dataclass(frozen=True)
class StoredDocument:
    """Document bytes an invoice already sent (``invoice_documents``)."""

    body: bytes
    media_type: str
    format: str
    sha256: str


@dataclass(frozen=True)
class Sending:
    """An invoice under the caller's sending lease: everything its document is made of.

    ``uuid`` is the document's UUID (ETTN), fixed since the draft was stored; ``sealed_at`` the
    seal moment (the number's date, and the document's IssueDate in the series' time zone);
    ``profile_version`` the issuer profile pinned at the seal (None: a JSON document);
    ``document`` the bytes already sent, if any (a resend sends exactly those).
    """

    pk: int
    invoice_id: str
    tenant: str
    series: str
    number: str
    reserved_no: int
    #: The stored payload (:attr:`payload`), or what makes it when first read.
    contents: Payload
    attempt: int
    uuid: str
    sealed_at: datetime
    profile_version: int | None
    document: StoredDocument | None = None

    @functools.cached_property
    def payload(self) -> dict[str, Any]:
        """The stored payload (the message as it was sealed)."""
        return _made(self.contents)


@dataclass(frozen=True)
class Claim:
    """What an intake decided for a draft. ``series`` and ``number``: the invoice's as stored
    (for CONFLICT, those of the invoice the producer key already names)."""

    kind: ClaimKind
    status: Status | None
    sending: Sending | None = None
    fresh_number: bool = False
    created: bool = False
    series: str | None = None
    number: str | None = None


def _stored(row: Any) -> StoredDocument | None:
    if row.document is None:
        return None
    return StoredDocument(bytes(row.document), row.document_media_type, row.document_format,
                          row.document_sha256)


def stored_payload(text: str) -> dict[str, Any]:
    """A payload read as its jsonb text (``payload::text``): numbers exact, as they were stored
    (:mod:`gapless.message.jsontext`), so a document rendered again from it is the same bytes."""
    payload: dict[str, Any] = jsontext.loads(text, max_depth=MAX_PAYLOAD_DEPTH)
    return payload


def _sending(row: Any, payload: Payload | None = None) -> Sending:
    if payload is None:
        payload = row.payload if isinstance(row.payload, dict) else stored_payload(row.payload)
    return Sending(row.id, row.invoice_id, row.tenant, row.series, row.number, row.reserved_no,
                   payload, row.attempts, str(row.uuid), row.reserved_at, row.profile_version,
                   _stored(row))


def _claim(row: Any, payload: Payload | None = None) -> Claim:
    if row.kind in ("sealed", "send"):
        return Claim(ClaimKind.SEND, Status.SENDING, _sending(row, payload),
                     fresh_number=row.kind == "sealed", created=row.created, series=row.series,
                     number=row.number)
    status = Status(row.status) if row.status is not None else None
    return Claim(ClaimKind(row.kind), status, created=row.created, series=row.series,
                 number=row.number)


async def _claim_rows(db: Database, query: str, params: dict[str, Any],
                      before_commit: Callable[[], Awaitable[None]] | None) -> list[Any]:
    """Run a claim statement; with ``before_commit`` (tests, fault injection) inside an explicit
    transaction, the hook awaited with the locks held, just before the commit."""
    if before_commit is None:
        return await db.all(query, params)
    async with db.transaction() as tx:
        rows = await tx.all(query, params)
        if any(row.kind in ("sealed", "send") for row in rows):
            await before_commit()
        return rows


@contextmanager
def _claim_errors(what: str, lock_timeout_ms: int,
                  series: tuple[str, str] | None = None) -> Iterator[None]:
    """A claim's driver errors as the domain's: ReservationLockTimeout (``what`` names the
    invoices that waited), and for an intake, which stores drafts of ``series`` (tenant, code),
    UnknownSeriesError."""
    try:
        yield
    except psycopg.Error as exc:
        if series is not None and sqlstate(exc) == FOREIGN_KEY_VIOLATION:
            raise UnknownSeriesError(*series) from exc
        if is_lock_timeout(exc):
            raise ReservationLockTimeout(
                f"{what}: lock not granted within {lock_timeout_ms} ms") from exc
        raise


async def intake(db: Database, draft: Draft, *, lease_s: float, lock_timeout_ms: int,
                 profile_version: int | None, at: datetime | None = None,
                 before_commit: Callable[[], Awaitable[None]] | None = None) -> Claim:
    """Steps 1 and 2 in one statement: store the draft (a duplicate maps to the same row; the
    first payload stays), lock it, seal a number if it has none, take the sending lease, commit.

    ``profile_version`` is the issuer profile the caller checked the message against (None: the
    tenant has none); if another is in force, nothing is sealed and the claim is STALE. ``at`` is
    the seal moment asked for (default: the database's clock); the seal never goes back before
    the counter's last one. Locks: the invoice row and, for a seal, its counter row, for this one
    statement. Raises ReservationLockTimeout when a lock is not granted within
    ``lock_timeout_ms`` (nothing consumed), UnknownSeriesError for an unknown series.
    """
    params = {"invoice_id": draft.invoice_id, "tenant": draft.tenant, "series": draft.series,
              "priority": draft.priority, "payload": draft.payload_text,
              "lease_s": lease_s, "lock_timeout_ms": lock_timeout_ms,
              "profile_version": profile_version, "at": at}
    with _claim_errors(f"invoice {draft.invoice_id!r}", lock_timeout_ms,
                       (draft.tenant, draft.series)):
        [row] = await _claim_rows(db, q.INTAKE, params, before_commit)
    return _claim(row, draft.payload if row.created else None)


async def intake_many(db: Database, drafts: Sequence[Draft], *, lease_s: float,
                      lock_timeout_ms: int, profile_versions: Sequence[int | None],
                      at: datetime | None = None,
                      before_commit: Callable[[], Awaitable[None]] | None = None) -> list[Claim]:
    """:func:`intake` for many drafts of one tenant, of any of its series, in one statement and
    one commit (the group seal, ``intake_drafts``): the drafts of a series are taken in order, so
    its fresh seals number in that order, and the n-th claim is the n-th draft's.
    ``profile_versions[n]`` is the issuer profile the n-th message was checked against.

    All or nothing: a lock not granted within ``lock_timeout_ms`` (ReservationLockTimeout), an
    unknown series, a deadlock or any other error fails every draft, and nothing is stored or
    consumed. An unknown series raises UnknownSeriesError when every draft is of that series,
    and the driver's foreign-key error when the drafts are of several (retry them one by one to
    know which). Locks: each draft's invoice row and, from each series' first seal, its counter
    row (series in key order), until the commit.
    """
    if not drafts:
        return []
    first = drafts[0]
    if any(d.tenant != first.tenant for d in drafts):
        raise ValueError("intake_many: the drafts of one call share a tenant")
    if len(profile_versions) != len(drafts):
        raise ValueError("intake_many: one profile version per draft")
    if len(drafts) == 1:
        # The one-draft statement: the same decisions, without arrays to build and unpack.
        return [await intake(db, first, lease_s=lease_s, lock_timeout_ms=lock_timeout_ms,
                             profile_version=profile_versions[0], at=at,
                             before_commit=before_commit)]
    series = [d.series for d in drafts]
    codes = sorted(set(series))
    params = {"invoice_ids": TextArray([d.invoice_id for d in drafts]), "tenant": first.tenant,
              "series": TextArray(series),
              "priorities": SmallintArray([d.priority for d in drafts]),
              "payloads": TextArray([d.payload_text for d in drafts]), "lease_s": lease_s,
              "lock_timeout_ms": lock_timeout_ms,
              "profile_versions": IntegerArray(profile_versions), "at": at}
    with _claim_errors(f"{len(drafts)} invoices of series {', '.join(map(repr, codes))}",
                       lock_timeout_ms, (first.tenant, first.series) if len(codes) == 1 else None):
        rows = await _claim_rows(db, q.INTAKE_MANY, params, before_commit)
    return [_claim(row, draft.payload if row.created else None)
            for row, draft in zip(rows, drafts, strict=True)]


async def claim_for_sending(db: Database, invoice_id: str, *, tenant: str, lease_s: float,
                            lock_timeout_ms: int, at: datetime | None = None,
                            before_commit: Callable[[], Awaitable[None]] | None = None) -> Claim:
    """Step 2 for the tenant's stored draft: lock it, seal a number if it has none (pinning the
    issuer profile in force), take the sending lease, commit — one statement.

    A SENDING invoice under a fresh lease is left to its owner (BUSY); a stale lease is taken
    over with the same number. Raises InvoiceNotFound, or ReservationLockTimeout when a lock is
    not granted in time (nothing consumed).
    """
    params = {"tenant": tenant, "invoice_id": invoice_id, "lease_s": lease_s,
              "lock_timeout_ms": lock_timeout_ms, "at": at}
    with _claim_errors(f"invoice {invoice_id!r}", lock_timeout_ms):
        rows = await _claim_rows(db, q.CLAIM, params, before_commit)
    if not rows:
        raise InvoiceNotFound(invoice_id)
    return _claim(rows[0])


def _document_params(pk: int, document: Document | None) -> dict[str, Any]:
    """The parameters of ``_DOCUMENT``: the bytes to store, or NULLs when already stored."""
    if document is None or document.stored:
        return {"pk": pk, "sha256": None, "media_type": None, "format": None, "body": None}
    return {"pk": pk, "sha256": document.sha256, "media_type": document.media_type,
            "format": document.format, "body": document.body}


async def mark_issued(db: Database, pk: int, receipt: Receipt,
                      document: Document | None = None) -> bool:
    """Step 4 (success): ISSUED with the integrator's reference, storing ``document`` (the bytes
    that were sent) if it is not stored yet. False if the invoice was settled already."""
    return await _mark_issued(db, pk, receipt.ref, document)


async def _mark_issued(db: Database, pk: int, ref: str, document: Document | None) -> bool:
    row = await db.one(q.MARK_ISSUED, {**_document_params(pk, document), "ref": ref})
    return row is not None


async def mark_issued_many(db: Database,
                           outcomes: dict[int, tuple[str, Document | None]]) -> set[int]:
    """Step 4 (success) for many invoices (pk -> (integrator ref, document)) in one statement.

    :data:`~gapless.ledger.queries.invoices.MARK_ISSUED_MANY` locks the rows in id order, then
    the counters their chain records extend in key order (writers settling invoices of several
    series never deadlock on the chains' heads), then settles them: one round trip, one commit.
    A batch of one is MARK_ISSUED (one row, one counter: no order to keep). Returns the pks
    that became ISSUED (the others were settled).
    """
    if not outcomes:
        return set()
    if len(outcomes) == 1:
        [(pk, (ref, document))] = outcomes.items()
        return {pk} if await _mark_issued(db, pk, ref, document) else set()
    pks = sorted(outcomes)
    docs = [_document_params(pk, outcomes[pk][1]) for pk in pks]
    rows = await db.all(q.MARK_ISSUED_MANY, {
        "pks": BigintArray(pks), "refs": TextArray([outcomes[pk][0] for pk in pks]),
        "shas": TextArray([d["sha256"] for d in docs]),
        "media_types": TextArray([d["media_type"] for d in docs]),
        "formats": TextArray([d["format"] for d in docs]),
        "bodies": BytesArray([d["body"] for d in docs])})
    return {row.id for row in rows}


def error_text(text: str) -> str:
    """A reason as ``last_error`` keeps it: one line of printable characters (an integrator's
    text may hold a NUL, which PostgreSQL cannot store, or a lone surrogate), MAX_ERROR at most."""
    if not text.isprintable():
        text = "".join(char if char.isprintable() else " " for char in text)
    return " ".join(text.split())[:MAX_ERROR]


async def mark_error(db: Database, sending: Sending, error: str,
                     retry_at: datetime | None, document: Document | None = None) -> bool:
    """Step 4 (transient failure): ERROR, due again at ``retry_at`` (None: parked for a person).

    Fenced by the attempt: False when a newer attempt has taken the invoice over. ``document``:
    the bytes that were sent (their outcome is unknown, so they are what every resend sends).
    """
    row = await db.one(q.MARK_ERROR, {
        **_document_params(sending.pk, document), "error": error_text(error),
        "retry_at": retry_at, "attempt": sending.attempt})
    return row is not None


async def mark_alarm(db: Database, sending: Sending, duplicate: DuplicateOfAnother,
                     document: Document | None = None) -> bool:
    """The number (or the document's UUID) is another invoice's at the integrator: ERROR, never
    retried by itself."""
    return await mark_error(db, sending, ALARM_PREFIX + duplicate.describe, None, document)


async def mark_unrenderable(db: Database, sending: Sending, reason: str) -> bool:
    """A sealed invoice whose stored message cannot make its document: nothing was sent; ERROR,
    never retried by itself — an operator fixes the payload (``gapless invoice retry
    --payload``) or voids it. Fenced like mark_error."""
    return await mark_error(db, sending, UNRENDERABLE_PREFIX + reason, None)


async def mark_rejected(db: Database, sending: Sending, reason: str,
                        document: Document | None = None) -> bool:
    """Step 4 (permanent rejection): REJECTED, the number stays pinned. Fenced like mark_error."""
    row = await db.one(q.MARK_REJECTED, {
        **_document_params(sending.pk, document), "reason": error_text(reason),
        "attempt": sending.attempt})
    return row is not None


@dataclass(frozen=True)
class Orphan:
    """A claimed orphan: under the caller's lease, with what it was before the claim."""

    sending: Sending
    was: Status
    prev_sending_since: datetime | None
    prev_next_attempt_at: datetime | None


async def claim_orphans(db: Database, *, stuck_after_s: float, batch: int,
                        max_attempts: int | None = None, only: Sequence[str] | None = None,
                        excluded: Sequence[str] = ()) -> list[Orphan]:
    """Recovery: claim stuck SENDING and due ERROR invoices (SKIP LOCKED), taking their lease.

    ERROR invoices that already had ``max_attempts`` attempts are left alone (None: no limit).
    Only invoices of the tenants ``only`` (None: any) and of none of ``excluded`` are claimed
    (tenants whose integrator account is not answering wait without crowding out the others).
    Returns each claimed invoice with the status, lease and due time it had before.
    """
    rows = await db.all(q.CLAIM_ORPHANS, {
        "stuck_after_s": stuck_after_s, "batch": batch, "max_attempts": max_attempts,
        "only": None if only is None else list(only), "excluded": list(excluded)})
    return [Orphan(_sending(row), Status(row.was), row.prev_since, row.prev_due) for row in rows]


async def release_orphan(db: Database, orphan: Orphan) -> bool:
    """Put a claimed orphan back as it was (status, attempts, lease, due time).

    Only for a claim no integrator call was made for (e.g. the circuit breaker is open), so the
    claim burns no attempt; the history records it as 'released'. Fenced by the claim's attempt:
    False when it has moved on since.
    """
    row = await db.one(q.RELEASE_ORPHAN, {
        "pk": orphan.sending.pk, "attempt": orphan.sending.attempt, "was": orphan.was.value,
        "prev_since": orphan.prev_sending_since, "prev_due": orphan.prev_next_attempt_at})
    return row is not None


async def invoice_tenants(db: Database, invoice_id: str) -> list[str]:
    """The tenants holding an invoice of this ``invoice_id``, sorted (no lock)."""
    return [row.tenant for row in await db.all(q.INVOICE_TENANTS, {"invoice_id": invoice_id})]


async def resolve_tenant(db: Database, invoice_id: str, tenant: str | None) -> str:
    """The tenant of the invoice a command names by ``invoice_id`` (and ``tenant``, if given):
    ``tenant`` itself when given, else the one tenant that holds the id. Raises InvoiceNotFound
    when none does, AmbiguousInvoice when several do."""
    if tenant is not None:
        return tenant
    tenants = await invoice_tenants(db, invoice_id)
    if not tenants:
        raise InvoiceNotFound(invoice_id)
    if len(tenants) > 1:
        raise AmbiguousInvoice(invoice_id, tenants)
    return tenants[0]


async def get_invoice(db: Database, invoice_id: str, *, tenant: str) -> Any:
    """The tenant's invoice row (no lock); raises InvoiceNotFound."""
    row = await db.one(q.GET_INVOICE, {"invoice_id": invoice_id, "tenant": tenant})
    if row is None:
        raise InvoiceNotFound(invoice_id)
    return row


@dataclass(frozen=True)
class KnownInvoice:
    """What the database holds of one producer key: the invoice's series and status."""

    series: str
    status: Status


async def known_invoices(db: Database, keys: Collection[tuple[str, str]]
                         ) -> dict[tuple[str, str], KnownInvoice]:
    """The invoices the database holds among the producer keys ``(tenant, invoice_id)``, by key,
    in one statement (no lock); a key nobody holds is absent."""
    if not keys:
        return {}
    pairs = list(keys)
    rows = await db.all(q.KNOWN_INVOICES, {"tenants": [tenant for tenant, _ in pairs],
                                           "invoice_ids": [invoice_id for _, invoice_id in pairs]})
    return {(row.tenant, row.invoice_id): KnownInvoice(row.series, Status(row.status))
            for row in rows}


@dataclass(frozen=True)
class InvoiceList:
    """A page of ``gapless invoice list``: the rows, newest first, and whether more match."""

    rows: list[Any]
    more: bool


async def list_invoices(db: Database, *, tenant: str | None = None,
                        statuses: Collection[Status] = (), since: datetime | None = None,
                        limit: int = 100, answer: str | None = None) -> InvoiceList:
    """The invoices of ``tenant`` (every tenant: None) in one of ``statuses`` (any: empty),
    created at or after ``since`` (None: ever), newest first (created_at, then id), at most
    ``limit`` of them; ``more`` says whether others match. One statement, no lock; each row has
    id, invoice_id, tenant, series, number, status, issue_date (the producer's), attempts,
    last_error, created_at, updated_at, document, answer (the receiver's code) and
    answer_status. ``answer``: only those answered with this code (``KABUL``, ``RED``,
    ``KISMIKABUL``), not answered (``none``) or recorded ``unanswered``."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    rows = await db.all(q.LIST_INVOICES, {
        "tenant": tenant, "statuses": [status.value for status in statuses] or None,
        "since": since, "limit": limit + 1, "answer": answer})
    return InvoiceList(rows[:limit], len(rows) > limit)


async def invoice_events(db: Database, pk: int) -> list[Any]:
    """The history of one invoice, oldest first (no lock)."""
    return await db.all(q.INVOICE_EVENTS, {"pk": pk})


async def stored_document(db: Database, pk: int, sha256: str) -> Any:
    """The stored bytes of one document an invoice sent (``media_type``, ``format``, ``body``),
    or None (no lock)."""
    return await db.one(q.STORED_DOCUMENT, {"pk": pk, "sha256": sha256})


async def invoice_as_sent(db: Database, invoice_id: str, *, tenant: str) -> Sending | None:
    """The tenant's invoice as its next send would see it, with the document in force if it sent
    one; None when it has no number yet. Raises InvoiceNotFound."""
    row = await db.one(q.INVOICE_AS_SENT, {"invoice_id": invoice_id, "tenant": tenant})
    if row is None:
        raise InvoiceNotFound(invoice_id)
    return None if row.number is None else _sending(row)


async def _operator_update(db: Database, statement: str, params: dict[str, Any],
                           action: str) -> Any:
    row = await db.one(statement, params)
    if row is None:
        current = await _current(db, params["invoice_id"], tenant=params["tenant"])
        raise InvalidTransition(
            f"cannot {action} invoice {params['invoice_id']!r}: it is {current.status}"
            + (f" and holds number {current.number}" if current.number else ""))
    return row


async def invoice_state(db: Database, invoice_id: str, *, tenant: str) -> Any:
    """The status and number of the tenant's invoice (no lock), or None when there is none."""
    return await db.one(q.INVOICE_STATE, {"invoice_id": invoice_id, "tenant": tenant})


async def _current(db: Database, invoice_id: str, *, tenant: str) -> Any:
    row = await invoice_state(db, invoice_id, tenant=tenant)
    if row is None:
        raise InvoiceNotFound(invoice_id)
    return row


async def cancel(db: Database, invoice_id: str, reason: str, *, tenant: str) -> None:
    """The tenant's invoice RECEIVED → CANCELLED; only before a number is reserved (no number
    consumed)."""
    await _operator_update(db, q.CANCEL, {"invoice_id": invoice_id, "tenant": tenant,
                                          "reason": reason}, "cancel")


async def void(db: Database, invoice_id: str, reason: str, *, tenant: str) -> None:
    """The tenant's invoice ERROR/REJECTED → VOIDED with a reason; the number stays pinned and
    accounted for."""
    if not reason.strip():
        raise InvalidTransition("a void needs a reason")
    await _operator_update(db, q.VOID, {"invoice_id": invoice_id, "tenant": tenant,
                                        "reason": reason}, "void")


async def start_retry(db: Database, invoice_id: str,
                      payload: dict[str, Any] | None = None, *, tenant: str) -> Sending:
    """The tenant's invoice ERROR/REJECTED → SENDING under the caller's lease, same number and
    UUID, with an optional corrected payload (then the next send renders a new document from
    it)."""
    row = await _operator_update(
        db, q.RETRY,
        {"invoice_id": invoice_id, "tenant": tenant,
         "payload": None if payload is None else jsontext.dumps(payload)},
        "retry")
    return _sending(row)
