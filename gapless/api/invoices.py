"""``POST /v1/invoices`` (the "issue" button) and ``GET /v1/invoices/{invoice_id}``.

``invoice_id`` is unique per tenant: a POST is about the message's tenant only (an id another
tenant holds is accepted as the caller's own, and nothing tells that the other exists); a GET
under a tenant-scoped token reads that tenant's invoice only, and an all-tenant token names the
tenant (``?tenant=``) when several hold the id.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.responses import JSONResponse

from gapless.amqp.publisher import PublishRefused, PublishUnconfirmed
from gapless.api import deps
from gapless.api.auth import Principal, principal
from gapless.api.lookups import KnownLookups
from gapless.api.models import (
    Accepted,
    AnswerOut,
    BatchAccepted,
    EventOut,
    InvoiceOut,
    RefusedOut,
)
from gapless.api.observe import ApiMetrics
from gapless.constants import Status
from gapless.errors import InvoiceNotFound
from gapless.issuing.admission import admission_problem
from gapless.ledger import feed
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.invoices import (
    KnownInvoice,
    get_invoice,
    invoice_events,
    invoice_tenants,
    known_invoices,
)
from gapless.ledger.refusals import get_refusal, refusal_tenants
from gapless.logging import get_logger
from gapless.message import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    AnyMessage,
    InvalidMessage,
    check_content_type,
    decode_body,
    decode_json,
    parse_message,
    validate_message,
)
from gapless.message.fields import json_type
from gapless.numbers import TENANT_RE
from gapless.settings import Settings

log = get_logger("gapless.api")
router = APIRouter()


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refusing (413) more than ``limit`` bytes (the contract's maximum by
    default) without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def invalid_status(body: bytes, content_type: str | None) -> int:
    """400 when the body is not a JSON object at all, 422 when it breaks the contract."""
    try:
        check_content_type(content_type)
        decoded = decode_json(body)
    except InvalidMessage:
        return 400
    return 422 if isinstance(decoded, dict) else 400


def authorize(who: Principal, message: AnyMessage) -> None:
    """403 when the token may not issue the message's tenant's invoices."""
    if not who.may_see(message.tenant):
        raise HTTPException(403, "this token may not issue invoices for that tenant")


def known_state(message: AnyMessage, known: KnownInvoice | None) -> Status | None:
    """The state of the message's invoice from what the database holds of its key (None:
    nothing); 409 when the invoice_id already names an invoice of another series of the tenant
    (a message that names no series takes the one routing chose for it)."""
    if known is None:
        return None
    if known.series != (message.series or known.series):
        raise HTTPException(409, "invoice_id already names an invoice of another series of "
                                 "this tenant")
    return known.status


def must_publish(status: Status | None) -> bool:
    """Whether a message is published: unless the database holds its invoice past RECEIVED."""
    return status in (None, Status.RECEIVED)


async def admit(catalog: Catalog, settings: Settings, message: AnyMessage,
                now: datetime | None = None) -> None:
    """422 naming the field when the worker would refuse the message before any number (the
    tenant, the series and its channel, the issue-date window, the UBL-TR document's checks:
    :func:`gapless.issuing.admission.admission_problem`); nothing is published then. Only a
    message that is published is checked: an invoice the database holds past RECEIVED is
    answered as it stands."""
    problem = await admission_problem(catalog, message, now or datetime.now(UTC),
                                      settings.issue_date_window_days)
    if problem is not None:
        raise HTTPException(422, problem)


async def known_status(known: KnownLookups, message: AnyMessage) -> Status | None:
    """What the database knows of the message's invoice, the tenant's (None: nothing); 409 as
    :func:`known_state`. Other tenants' invoices are not looked at. Concurrent POSTs ask in one
    statement (:mod:`gapless.api.lookups`)."""
    return known_state(message, await known.known(message.tenant, message.invoice_id))


def accepted(request: Request, metrics: ApiMetrics, message: AnyMessage,
             status: Status | None, published: bool) -> Accepted:
    """The answer to an accepted message, counted."""
    metrics.accepted.labels(str(published).lower()).inc()
    return Accepted(invoice_id=message.invoice_id,
                    status_url=status_url(request, message.invoice_id, message.tenant),
                    published=published, status=None if status is None else status.value)


def status_url(request: Request, invoice_id: str, tenant: str) -> str:
    """Where the invoice's state is read: its URL, naming the tenant (the id is unique per
    tenant only)."""
    return status_url_on(deps.links(request).base(request), invoice_id, tenant)


def status_url_on(base: str, invoice_id: str, tenant: str) -> str:
    """:func:`status_url` under ``base``, the API's base URL for the request (a batch makes it
    once for all its items)."""
    return f"{base}/v1/invoices/{quote(invoice_id, safe='')}?tenant={quote(tenant, safe='')}"


async def invoice_tenant(db: Database, who: Principal, invoice_id: str,
                         tenant: str | None) -> str | None:
    """The tenant whose invoice a GET reads (None: nothing to show — the same 404 as an absent
    invoice). A scoped token reads its own tenant's only; an all-tenant token names the tenant
    when several hold the id (409 otherwise, naming them)."""
    if tenant is not None and not TENANT_RE.match(tenant):
        raise HTTPException(400, "tenant must be a tenant name (letters, digits, '.', '_', "
                                 "'-')")
    if who.tenant is not None:
        return who.tenant if tenant in (None, who.tenant) else None
    if tenant is not None:
        return tenant
    tenants = await invoice_tenants(db, invoice_id) or await refusal_tenants(db, invoice_id)
    if len(tenants) > 1:
        raise HTTPException(409, f"invoice_id is held by tenants {', '.join(tenants)}; name "
                                 "one with ?tenant=")
    return tenants[0] if tenants else None


@router.post("/v1/invoices", status_code=202, response_model=Accepted,
             responses={400: {"description": "Not a JSON object (or wrong content type)"},
                        401: {"description": "No or invalid token"},
                        403: {"description": "The token may not act for this tenant"},
                        409: {"description": "invoice_id names an invoice of another series "
                                             "of the tenant"},
                        413: {"description": "Body too large"},
                        422: {"description": "The message breaks the contract, or the worker "
                                             "would refuse it before any number: unknown "
                                             "tenant or series, a series whose channel does "
                                             "not fit, issue_date outside the window, a "
                                             "UBL-TR document that cannot be made ("
                                             "\"<field>: <reason>\"); nothing is published"},
                        503: {"description": "The broker did not take the message"}})
async def issue_invoice(request: Request, who: Principal = Security(principal),
                        api: deps.Services = Depends(deps.services)) -> JSONResponse:
    """Validate the contract message and publish it at user priority.

    A repeated invoice_id is harmless: the worker maps it onto the same invoice; when the
    database already holds the invoice beyond RECEIVED it is not published again.
    """
    body = await read_body(request)
    content_type = request.headers.get("content-type")
    try:
        message = parse_message(body, content_type)
    except InvalidMessage as exc:
        raise HTTPException(invalid_status(body, content_type), exc.reason) from None
    authorize(who, message)
    status = await known_status(api.known, message)
    publish = must_publish(status)
    if publish:
        await admit(api.catalog, api.settings, message)
        try:
            await api.publisher.publish(message, priority="user")
        except (PublishRefused, PublishUnconfirmed) as exc:
            log.warning("api_publish_failed", invoice_id=message.invoice_id,
                        error=type(exc).__name__)
            raise HTTPException(503, str(exc)) from None
    answer = accepted(request, api.metrics, message, status, publish)
    log.info("invoice_accepted", invoice_id=message.invoice_id, tenant=message.tenant,
             series=message.series, published=publish, status=answer.status)
    return JSONResponse(answer.model_dump(), status_code=202,
                        headers={"Location": answer.status_url})


#: A batch holds at most this many messages (more: 413).
MAX_BATCH = 1000
#: A batch's body is refused (413) beyond this many bytes, without reading it all: 16 MiB, room
#: for 1,000 messages of 16 KiB each on average (one message alone may be up to 256 KiB).
MAX_BATCH_BODY_BYTES = 16 * 1024 * 1024
#: A batch's validation gives the event loop a turn every this many messages.
BATCH_TURN = 64


@dataclass(eq=False)
class _Item:
    """One message of a batch on its way to its result."""

    index: int
    message: AnyMessage | None = None
    code: int = 202
    error: str | None = None
    state: Status | None = None
    published: bool = False
    #: The earlier item of the batch carrying the same invoice (this one is not published).
    first: _Item | None = None

    def refuse(self, exc: HTTPException) -> None:
        self.code, self.error = exc.status_code, str(exc.detail)


def parse_item(data: Any, *, shaped: bool = False) -> AnyMessage:
    """One message of a batch, checked as the single POST checks its body: 400 when it is not a
    JSON object, 422 when it breaks the contract (the parser's one-line reason). ``shaped``: the
    batch's text showed every message JSON-shaped (:class:`~gapless.message.parse.Decoded`)."""
    if not isinstance(data, dict):
        raise HTTPException(400, f"message must be a JSON object, not {json_type(data)}")
    try:
        return validate_message(data, shaped=shaped)
    except InvalidMessage as exc:
        raise HTTPException(422, exc.reason) from None


async def batch_items(who: Principal, decoded: list[Any], *,
                      shaped: bool = False) -> list[_Item]:
    """Every message of a batch parsed and authorized (or refused, each on its own).

    The event loop gets a turn every :data:`BATCH_TURN` messages: validating a thousand takes
    tens of milliseconds of CPU, which the requests served beside the batch would otherwise
    wait out whole."""
    items = [_Item(index) for index in range(len(decoded))]
    for item, data in zip(items, decoded, strict=True):
        if item.index and not item.index % BATCH_TURN:
            await asyncio.sleep(0)
        try:
            item.message = parse_item(data, shaped=shaped)
            authorize(who, item.message)
        except HTTPException as exc:
            item.refuse(exc)
    return items


def batch_states(valid: list[_Item], known: dict[tuple[str, str], KnownInvoice]) -> None:
    """Each valid item's known state (409 as the single POST); an item repeating an earlier
    item's invoice follows that one (409 when the two name different series)."""
    firsts: dict[tuple[str, str], _Item] = {}
    for item in valid:
        message = item.message
        assert message is not None
        key = (message.tenant, message.invoice_id)
        try:
            item.state = known_state(message, known.get(key))
            first = firsts.get(key)
            if first is not None:
                assert first.message is not None
                if message.series and first.message.series not in (None, message.series):
                    raise HTTPException(409, "invoice_id already names an invoice of another "
                                             "series of this tenant (an earlier item of the "
                                             "batch)")
                item.first = first
            else:
                firsts[key] = item
        except HTTPException as exc:
            item.refuse(exc)


async def batch_admit(catalog: Catalog, settings: Settings, valid: list[_Item]) -> None:
    """Each item that would be published checked as the single POST checks it (422, that item
    only); an item repeating an earlier one follows it."""
    now = datetime.now(UTC)
    for item in valid:
        if item.code != 202 or item.first is not None or not must_publish(item.state):
            continue
        assert item.message is not None
        try:
            await admit(catalog, settings, item.message, now)
        except HTTPException as exc:
            item.refuse(exc)


@router.post("/v1/invoices/batch", status_code=200, response_model=BatchAccepted,
             responses={400: {"description": "Not a JSON array (or wrong content type)"},
                        401: {"description": "No or invalid token"},
                        413: {"description": f"Body larger than {MAX_BATCH_BODY_BYTES} bytes, "
                                             f"or more than {MAX_BATCH} messages"},
                        503: {"description": "The database is unreachable"}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"type": "array", "maxItems": MAX_BATCH}}}}})
async def issue_batch(request: Request, who: Principal = Security(principal),
                      api: deps.Services = Depends(deps.services)) -> JSONResponse:
    """Validate and publish up to 1,000 contract messages: one result per message, in order,
    each what ``POST /v1/invoices`` would have answered for it alone (a message the worker
    would refuse before any number is refused here, 422, and not published).

    Valid messages are accepted whatever the others are. The database is asked once for every
    invoice of the batch; a message whose invoice it holds past RECEIVED is accepted without
    publishing, and an invoice repeated in the batch is published once. The messages are
    published at their own priority (``"user"``, else batch), their confirms pipelined.
    """
    body = await read_body(request, MAX_BATCH_BODY_BYTES)
    try:
        check_content_type(request.headers.get("content-type"))
        # Each message one level down: the array's.
        decoded, shaped = decode_body(body, levels=MAX_DEPTH + 1)
    except InvalidMessage as exc:
        raise HTTPException(400, exc.reason) from None
    if not isinstance(decoded, list):
        raise HTTPException(400, "body must be a JSON array of messages, not "
                                 f"{json_type(decoded)}")
    if len(decoded) > MAX_BATCH:
        raise HTTPException(413, f"batch has {len(decoded)} messages; at most {MAX_BATCH} are "
                                 "accepted")
    items = await batch_items(who, decoded, shaped=shaped)
    valid = [item for item in items if item.code == 202]
    known = await known_invoices(api.db, {(item.message.tenant, item.message.invoice_id)
                                      for item in valid if item.message is not None})
    batch_states(valid, known)
    await batch_admit(api.catalog, api.settings, valid)
    sending = [item for item in valid
               if item.code == 202 and item.first is None and must_publish(item.state)]
    outcomes = await api.publisher.publish_many([item.message for item in sending
                                             if item.message is not None])
    for item, outcome in zip(sending, outcomes, strict=True):
        if outcome is None:
            item.published = True
        else:
            item.code, item.error = 503, str(outcome)
    base = deps.links(request).base(request)
    results: list[dict[str, Any]] = []
    for item in items:
        if item.first is not None and item.first.code != 202:
            item.code, item.error = item.first.code, item.first.error
        message = item.message
        ok = item.code == 202 and message is not None
        results.append({
            "index": item.index, "invoice_id": None if message is None else message.invoice_id,
            "status": item.code, "published": item.published,
            "status_url": status_url_on(base, message.invoice_id, message.tenant)
            if ok and message is not None else None,
            "invoice_status": item.state.value if ok and item.state is not None else None,
            "error": item.error})
    failed = sum(item.code == 503 for item in items)
    if failed:
        log.warning("api_publish_failed", messages=failed)
    count = sum(item.code == 202 for item in items)
    published = sum(item.published for item in items)
    # Counted as accepted() counts a single POST: each accepted message, by whether it went out.
    if published:
        api.metrics.accepted.labels("true").inc(published)
    if count - published:
        api.metrics.accepted.labels("false").inc(count - published)
    log.info("batch_accepted", messages=len(items), accepted=count, published=published,
             refused=len(items) - count)
    return JSONResponse({"results": results, "accepted": count, "published": published})


@router.get("/v1/invoices/{invoice_id:path}", response_model=InvoiceOut | RefusedOut,
            name="get_invoice",
            responses={400: {"description": "Malformed tenant"},
                       401: {"description": "No or invalid token"},
                       404: {"description": "No such invoice (or not this token's tenant)"},
                       409: {"description": "Several tenants hold the invoice_id: name one "
                                            "with ?tenant= (an all-tenant token only)"}})
async def invoice_status(invoice_id: str, who: Principal = Security(principal),
                         db: Database = Depends(deps.database),
                         tenant: str | None = Query(
                             None, description="The invoice's tenant (invoice_id is unique per "
                                               "tenant); a scoped token's own by default")
                         ) -> InvoiceOut | RefusedOut:
    """The invoice's state, its document's UUID and its history; ``REFUSED`` with the reason
    when the worker refused the message before any number and no invoice has that id. 404 until
    the worker has stored (or refused) it."""
    # One snapshot for the row and its events, so the history matches the state shown.
    async with db.snapshot() as snap:
        row = None
        refusal = None
        owner = await invoice_tenant(snap, who, invoice_id, tenant)
        if owner is not None and who.may_see(owner):
            try:
                row = await get_invoice(snap, invoice_id, tenant=owner)
            except InvoiceNotFound:
                refusal = await get_refusal(snap, owner, invoice_id)
        if row is None or not who.may_see(row.tenant):
            if refusal is not None:
                return RefusedOut(invoice_id=refusal.invoice_id, tenant=refusal.tenant,
                                  series=refusal.series, status="REFUSED",
                                  reason=refusal.reason,
                                  refused_at=feed.iso_utc(refusal.refused_at))
            # Same answer whether it is missing or someone else's: existence is not leaked.
            raise HTTPException(404, "no such invoice")
        events = await invoice_events(snap, row.id)
    return InvoiceOut(
        invoice_id=row.invoice_id, tenant=row.tenant, series=row.series,
        document=row.document, status=row.status,
        number=row.number, reserved_no=row.reserved_no, uuid=str(row.uuid),
        document_sha256=row.document_sha256, attempts=row.attempts,
        last_error=row.last_error, integrator_ref=row.integrator_ref,
        created_at=feed.iso_utc(row.created_at), updated_at=feed.iso_utc(row.updated_at),
        reserved_at=deps.iso(row.reserved_at), issued_at=deps.iso(row.issued_at),
        next_attempt_at=deps.iso(row.next_attempt_at),
        answer=None if row.answer is None else AnswerOut.model_validate(
            json.loads(row.answer) if isinstance(row.answer, str | bytes) else row.answer),
        events=[EventOut(**{**e._asdict(), "created_at": feed.iso_utc(e.created_at)})
                for e in events])
