"""``POST /v1/invoices`` (the "issue" button) and ``GET /v1/invoices/{invoice_id}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Security
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
from gapless.ledger.invoices import get_invoice, invoice_events
from gapless.logging import get_logger
from gapless.message import (
    MAX_BODY_BYTES,
    InvalidMessage,
    InvoiceMessage,
    check_content_type,
    decode_json,
    parse_message,
)

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
    """What the database knows of the message's invoice (None: nothing); 409 when the
    invoice_id already names another tenant's or series' invoice (a message that names no
    series takes the one routing chose for it)."""
    try:
        known = await get_invoice(db, message.invoice_id)
    except InvoiceNotFound:
        return None
    if (known.tenant, known.series) != (message.tenant, message.series or known.series):
        raise HTTPException(409, "invoice_id already names a different invoice; "
                                 "invoice ids are unique across tenants and series")
    return Status(known.status)


@router.post("/v1/invoices", status_code=202, response_model=Accepted,
             responses={400: {"description": "Not a JSON object (or wrong content type)"},
                        401: {"description": "No or invalid token"},
                        403: {"description": "The token may not act for this tenant"},
                        409: {"description": "invoice_id names another tenant's or series' "
                                             "invoice"},
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
    url = deps.status_url(request, message.invoice_id)
    answer = Accepted(invoice_id=message.invoice_id, status_url=url, published=publish,
                      status=None if status is None else status.value)
    return JSONResponse(answer.model_dump(), status_code=202, headers={"Location": url})


@router.get("/v1/invoices/{invoice_id:path}", response_model=InvoiceOut, name="get_invoice",
            responses={401: {"description": "No or invalid token"},
                       404: {"description": "No such invoice (or not this token's tenant)"}})
async def invoice_status(invoice_id: str, who: Principal = Security(principal),
                         db: Database = Depends(deps.database)) -> InvoiceOut:
    """The invoice's state, its document's UUID and its history. 404 until the worker has
    stored it."""
    # One snapshot for the row and its events, so the history matches the state shown.
    async with db.snapshot() as snap:
        try:
            row = await get_invoice(snap, invoice_id)
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
