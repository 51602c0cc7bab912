"""``POST /v1/invoices`` (the "issue" button) and ``GET /v1/invoices/{invoice_id}``.

``invoice_id`` is unique per tenant: a POST is about the message's tenant only (an id another
tenant holds is accepted as the caller's own, and nothing tells that the other exists); a GET
under a tenant-scoped token reads that tenant's invoice only, and an all-tenant token names the
tenant (``?tenant=``) when several hold the id.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.responses import JSONResponse

from gapless.amqp.publisher import Publisher, PublishRefused, PublishUnconfirmed
from gapless.api import deps
from gapless.api.auth import Principal, principal
from gapless.api.models import Accepted, EventOut, InvoiceOut
from gapless.api.observe import ApiMetrics
from gapless.constants import Status
from gapless.errors import InvoiceNotFound
from gapless.ledger import feed
from gapless.ledger.database import Database
from gapless.ledger.invoices import get_invoice, invoice_events, invoice_tenants
from gapless.logging import get_logger
from gapless.message import (
    MAX_BODY_BYTES,
    InvalidMessage,
    InvoiceMessage,
    check_content_type,
    decode_json,
    parse_message,
)
from gapless.numbers import TENANT_RE

log = get_logger("gapless.api")
router = APIRouter()


def message_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """InvoiceMessage's JSON schema for the OpenAPI request body, and its sub-schemas."""
    schema = InvoiceMessage.model_json_schema(ref_template="#/components/schemas/{model}")
    definitions = schema.pop("$defs", {})
    return schema, definitions


MESSAGE_SCHEMA, MESSAGE_DEFINITIONS = message_schema()


async def read_body(request: Request) -> bytes:
    """The raw body, refusing (413) more than the contract's maximum without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HTTPException(413, f"body is larger than {MAX_BODY_BYTES} bytes")
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


async def known_status(db: Database, message: InvoiceMessage) -> Status | None:
    """What the database knows of the message's invoice, the tenant's (None: nothing); 409 when
    the invoice_id already names an invoice of another series of the tenant (a message that names
    no series takes the one routing chose for it). Other tenants' invoices are not looked at."""
    try:
        known = await get_invoice(db, message.invoice_id, tenant=message.tenant)
    except InvoiceNotFound:
        return None
    if known.series != (message.series or known.series):
        raise HTTPException(409, "invoice_id already names an invoice of another series of "
                                 "this tenant")
    return Status(known.status)


def status_url(request: Request, invoice_id: str, tenant: str) -> str:
    """Where the invoice's state is read: its URL, naming the tenant (the id is unique per
    tenant only)."""
    return f"{deps.status_url(request, invoice_id)}?tenant={quote(tenant, safe='')}"


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
    tenants = await invoice_tenants(db, invoice_id)
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
                        422: {"description": "The message breaks the contract"},
                        503: {"description": "The broker did not take the message"}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": MESSAGE_SCHEMA}}}})
async def issue_invoice(request: Request, who: Principal = Security(principal),
                        db: Database = Depends(deps.database),
                        publisher: Publisher = Depends(deps.publisher),
                        metrics: ApiMetrics = Depends(deps.metrics)) -> JSONResponse:
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
    if not who.may_see(message.tenant):
        raise HTTPException(403, "this token may not issue invoices for that tenant")
    status = await known_status(db, message)
    publish = status in (None, Status.RECEIVED)
    if publish:
        try:
            await publisher.publish(message, priority="user")
        except (PublishRefused, PublishUnconfirmed) as exc:
            log.warning("api_publish_failed", invoice_id=message.invoice_id,
                        error=type(exc).__name__)
            raise HTTPException(503, str(exc)) from None
    metrics.accepted.labels(str(publish).lower()).inc()
    log.info("invoice_accepted", invoice_id=message.invoice_id, tenant=message.tenant,
             series=message.series, published=publish,
             status=None if status is None else status.value)
    url = status_url(request, message.invoice_id, message.tenant)
    answer = Accepted(invoice_id=message.invoice_id, status_url=url, published=publish,
                      status=None if status is None else status.value)
    return JSONResponse(answer.model_dump(), status_code=202, headers={"Location": url})


@router.get("/v1/invoices/{invoice_id:path}", response_model=InvoiceOut, name="get_invoice",
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
                         ) -> InvoiceOut:
    """The invoice's state, its document's UUID and its history. 404 until the worker has
    stored it."""
    # One snapshot for the row and its events, so the history matches the state shown.
    async with db.snapshot() as snap:
        row = None
        owner = await invoice_tenant(snap, who, invoice_id, tenant)
        if owner is not None:
            try:
                row = await get_invoice(snap, invoice_id, tenant=owner)
            except InvoiceNotFound:
                row = None
        if row is None or not who.may_see(row.tenant):
            # Same answer whether it is missing or someone else's: existence is not leaked.
            raise HTTPException(404, "no such invoice")
        events = await invoice_events(snap, row.id)
    return InvoiceOut(
        invoice_id=row.invoice_id, tenant=row.tenant, series=row.series, status=row.status,
        number=row.number, reserved_no=row.reserved_no, uuid=str(row.uuid),
        document_sha256=row.document_sha256, attempts=row.attempts,
        last_error=row.last_error, integrator_ref=row.integrator_ref,
        created_at=feed.iso_utc(row.created_at), updated_at=feed.iso_utc(row.updated_at),
        reserved_at=deps.iso(row.reserved_at), issued_at=deps.iso(row.issued_at),
        next_attempt_at=deps.iso(row.next_attempt_at),
        events=[EventOut(**{**e._asdict(), "created_at": feed.iso_utc(e.created_at)})
                for e in events])
