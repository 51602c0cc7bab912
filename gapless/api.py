"""The HTTP API: issue an invoice, read its status, follow the commit-ordered event feed.

``create_app(settings)`` builds the FastAPI application; its lifespan opens the database engine
(actor ``api``: events it causes say so) and a confirmed :class:`~gapless.publisher.Publisher`.

Endpoints (OpenAPI at ``/docs``):

* ``POST /v1/invoices`` — the body is checked by :func:`gapless.message.parse_message`, the very
  parser the worker uses, then published at **user** priority (AMQP 4) with publisher confirms;
  202 with the status URL. Idempotent per ``invoice_id``: the worker maps a repeated id onto the
  same invoice, and an invoice the database already knows is not published again unless it is
  still RECEIVED.
* ``GET /v1/invoices/{invoice_id}`` — status, number, attempts, last error, events.
* ``GET /v1/events?cursor=N&limit=L[&tenant=T]`` — the feed (:mod:`gapless.feed`): follow
  ``next`` while it is not null, then poll ``poll_more``; nothing is missed or repeated (I6).
* ``GET /healthz``, ``GET /metrics`` — unauthenticated.

Authentication: ``Authorization: Bearer <token>``; the tokens come from ``GAPLESS_API_TOKEN`` (see
:func:`parse_tokens`). A tenant-scoped token sees only its tenant: another tenant's invoice is a
404 exactly like a missing one, another tenant's feed a 403. Tokens are never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Query, Request, Security
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, Field
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gapless import feed
from gapless.constants import Status
from gapless.db import check_cluster, make_engine
from gapless.errors import ConfigurationError, InvalidFeedRequest, InvoiceNotFound
from gapless.invoices import get_invoice, invoice_events
from gapless.logging import get_logger
from gapless.message import (
    MAX_BODY_BYTES,
    InvalidMessage,
    InvoiceMessage,
    check_content_type,
    decode_json,
    parse_message,
)
from gapless.numbering import TENANT_RE
from gapless.publisher import Publisher, PublishRefused, PublishUnconfirmed
from gapless.queries import api as q
from gapless.settings import Settings

log = get_logger(__name__)

#: Routes whose successful requests are logged at debug level (health probes, scrapes).
QUIET_ROUTES = frozenset({"/healthz", "/metrics"})
#: A token shorter than this is refused at start-up: it would be guessable.
MIN_TOKEN_LENGTH = 16
ALL_TENANTS = "*"


# ------------------------------------------------------------------------------ authentication

@dataclass(frozen=True)
class ApiToken:
    """One accepted bearer token. ``tenant`` None: every tenant."""

    secret: bytes
    tenant: str | None
    #: Position in GAPLESS_API_TOKEN (1-based): how logs refer to a token, never by its value.
    index: int


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's tenant scope (None: every tenant)."""

    tenant: str | None
    token_index: int | None

    def may_see(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant


def parse_tokens(spec: str) -> tuple[ApiToken, ...]:
    """Parse ``GAPLESS_API_TOKEN``: a comma-separated list of ``token`` or ``tenant:token``.

    ``token`` (or ``*:token``) may act for every tenant; ``tenant:token`` only for that tenant.
    The first ``:`` separates the tenant, so an all-tenant token containing ``:`` must be
    written ``*:token``. Tokens are at least 16 printable ASCII characters without spaces or
    commas; blank entries are ignored. Raises ConfigurationError naming the entry by position,
    never by its value.
    """
    tokens: list[ApiToken] = []
    seen: set[bytes] = set()
    for index, raw in enumerate(spec.split(","), start=1):
        entry = raw.strip()
        if not entry:
            continue
        tenant: str | None = None
        secret = entry
        if ":" in entry:
            tenant, secret = entry.split(":", 1)
            if tenant == ALL_TENANTS:
                tenant = None
            elif not TENANT_RE.match(tenant):
                raise ConfigurationError(
                    f"GAPLESS_API_TOKEN entry {index}: the part before ':' must be a tenant "
                    "name or '*'")
        if (len(secret) < MIN_TOKEN_LENGTH or not secret.isascii() or not secret.isprintable()
                or any(char.isspace() for char in secret)):
            raise ConfigurationError(
                f"GAPLESS_API_TOKEN entry {index}: a token must be at least {MIN_TOKEN_LENGTH} "
                "printable ASCII characters without spaces")
        encoded = secret.encode()
        if encoded in seen:
            raise ConfigurationError(f"GAPLESS_API_TOKEN entry {index}: the same token is "
                                     "listed twice")
        seen.add(encoded)
        tokens.append(ApiToken(encoded, tenant, index))
    return tuple(tokens)


class Authenticator:
    """Checks bearer tokens in constant time against every configured token."""

    def __init__(self, tokens: tuple[ApiToken, ...], *, insecure_no_auth: bool) -> None:
        if tokens and insecure_no_auth:
            raise ConfigurationError("GAPLESS_API_TOKEN is set and --insecure-no-auth was given; "
                                     "choose one")
        if not tokens and not insecure_no_auth:
            raise ConfigurationError(
                "GAPLESS_API_TOKEN is empty: set it (comma-separated 'token' or 'tenant:token' "
                "entries) or start with --insecure-no-auth on a trusted network only")
        self.tokens = tokens
        self.insecure_no_auth = insecure_no_auth

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(parse_tokens(settings.api_token),
                   insecure_no_auth=settings.api_insecure_no_auth)

    def authenticate(self, presented: str | None) -> Principal:
        """The caller for a presented token; 401 (with WWW-Authenticate) when it is not valid."""
        if self.insecure_no_auth:
            return Principal(None, None)
        if not presented:
            raise _unauthorized("missing bearer token", error=None)
        candidate = presented.encode()
        match: ApiToken | None = None
        for token in self.tokens:  # no early exit: the time taken says nothing about which
            if hmac.compare_digest(candidate, token.secret):
                match = token
        if match is None:
            raise _unauthorized("invalid bearer token", error="invalid_token")
        return Principal(match.tenant, match.index)


def _unauthorized(detail: str, *, error: str | None) -> HTTPException:
    challenge = 'Bearer realm="gapless"'
    if error:
        challenge += f', error="{error}"'
    return HTTPException(401, detail, headers={"WWW-Authenticate": challenge})


# ------------------------------------------------------------------------------ response models

class Accepted(BaseModel):
    invoice_id: str
    status_url: str = Field(description="Poll this for the invoice's state.")
    published: bool = Field(description="False when the database already had the invoice "
                                        "past RECEIVED (nothing to publish again).")
    status: str | None = Field(description="The state the database knows, or null if none yet.")


class EventOut(BaseModel):
    sequence_id: int | None
    kind: str
    from_status: str | None
    to_status: str
    number: str | None
    attempts: int
    detail: str | None
    actor: str
    created_at: str


class InvoiceOut(BaseModel):
    invoice_id: str
    tenant: str
    series: str
    status: str
    number: str | None
    reserved_no: int | None
    attempts: int
    last_error: str | None
    integrator_ref: str | None
    created_at: str
    updated_at: str
    reserved_at: str | None
    issued_at: str | None
    next_attempt_at: str | None
    events: list[EventOut]


class FeedEventOut(BaseModel):
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
    created_at: str


class FeedPage(BaseModel):
    results: list[FeedEventOut]
    next: str | None = Field(description="The next page while this one was full; else null.")
    poll_more: str = Field(description="Ask this later for whatever commits after this page.")


class Health(BaseModel):
    database: str
    broker: str


# ------------------------------------------------------------------------------ metrics

class ApiMetrics:
    """The API's Prometheus metrics, in a registry of their own (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("gapless_api_requests", "HTTP requests, by route and status",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("gapless_api_request_seconds", "HTTP request duration",
                                 ["method", "route"], registry=self.registry)
        self.accepted = Counter("gapless_api_invoices_accepted",
                                "POST /v1/invoices answered 202, by whether it was published",
                                ["published"], registry=self.registry)
        self.feed_events = Counter("gapless_api_feed_events", "Events served by /v1/events",
                                   registry=self.registry)


class RequestObserver:
    """ASGI middleware: count and time every request by its route template, log one line."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None)
            if route is None:
                # FastAPI's own pages (/docs, /openapi.json) carry no route object; a 404 path is
                # the client's invention and must not become a label (unbounded cardinality).
                route = "unmatched" if status == 404 else scope["path"]
            method = scope["method"]
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(elapsed)
            # No headers and no body: tokens and payloads never reach the log. Probes and
            # scrapes come every few seconds; they are logged at debug only.
            emit = log.debug if route in QUIET_ROUTES and status < 400 else log.info
            emit("api_request", method=method, route=route, path=scope["path"],
                 status=status, duration_ms=round(elapsed * 1000, 2))


# ------------------------------------------------------------------------------ helpers

def _iso(moment: Any) -> str | None:
    return None if moment is None else feed.iso_utc(moment)


def _engine(request: Request) -> AsyncEngine:
    engine: AsyncEngine = request.app.state.engine
    return engine


def _snapshot_engine(request: Request) -> AsyncEngine:
    """The same pool, REPEATABLE READ: several reads of one request see one snapshot."""
    engine: AsyncEngine = request.app.state.snapshot_engine
    return engine


def _publisher(request: Request) -> Publisher:
    publisher: Publisher = request.app.state.publisher
    return publisher


def status_url(request: Request, invoice_id: str) -> str:
    base = str(request.base_url).rstrip("/")
    return f"{base}/v1/invoices/{quote(invoice_id, safe='')}"


def _feed_url(request: Request, cursor: int, limit: int, tenant: str | None) -> str:
    params: dict[str, Any] = {"cursor": cursor, "limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    return str(request.url_for("events").include_query_params(**params))


async def _read_body(request: Request) -> bytes:
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


def _invalid_status(body: bytes, content_type: str | None) -> int:
    """400 when the body is not a JSON object at all, 422 when it breaks the contract."""
    try:
        check_content_type(content_type)
        decoded = decode_json(body)
    except InvalidMessage:
        return 400
    return 422 if isinstance(decoded, dict) else 400


def _message_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """InvoiceMessage's JSON schema for the OpenAPI request body, and its sub-schemas."""
    schema = InvoiceMessage.model_json_schema(ref_template="#/components/schemas/{model}")
    definitions = schema.pop("$defs", {})
    return schema, definitions


async def _check(what: Callable[[], Awaitable[None]], limit_s: float) -> str:
    try:
        async with asyncio.timeout(limit_s):
            await what()
    except TimeoutError:
        return f"error: no answer within {limit_s:g} s"
    except Exception as exc:  # any failure is the answer
        return f"error: {type(exc).__name__}"
    return "ok"


# ------------------------------------------------------------------------------ the app

def create_app(settings: Settings) -> FastAPI:
    """The API for ``settings``. Raises ConfigurationError for an unusable token setting.

    The lifespan opens the engine (checking the cluster id, so an unmigrated or foreign database
    stops it at start-up) and a Publisher (which declares the queue topology), and closes both on
    shutdown.
    """
    auth = Authenticator.from_settings(settings)
    metrics = ApiMetrics()
    bearer = HTTPBearer(auto_error=False, scheme_name="token",
                        description="A token of GAPLESS_API_TOKEN")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url, actor="api",
                             pool_size=settings.db_pool_size)
        try:
            await check_cluster(engine, settings.cluster_id)
            async with Publisher(settings) as publisher:
                app.state.engine = engine
                app.state.snapshot_engine = engine.execution_options(
                    isolation_level="REPEATABLE READ")
                app.state.publisher = publisher
                log.info("api_started", queue=settings.queue, auth=(
                    "none (insecure)" if auth.insecure_no_auth else "bearer"),
                    tokens=len(auth.tokens),
                    scoped_tenants=sorted({t.tenant for t in auth.tokens if t.tenant}))
                yield
        finally:
            await engine.dispose()
            log.info("api_stopped")

    app = FastAPI(
        title="gapless",
        summary="Issue invoices with gap-free numbers; follow their commit-ordered events.",
        version="1",
        lifespan=lifespan,
    )
    app.add_middleware(RequestObserver, metrics=metrics)
    app.state.metrics = metrics

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # The database went away mid-request: a retryable 503, not a 500 with a traceback.
        log.warning("api_database_unavailable", route=request.url.path,
                    error=type(exc).__name__)
        return JSONResponse({"detail": "database unavailable; retry later"}, status_code=503,
                            headers={"Retry-After": "5"})

    async def principal(
            credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
        presented = credentials.credentials if credentials is not None else None
        try:
            return auth.authenticate(presented)
        except HTTPException:
            log.warning("api_auth_failed", reason="missing" if not presented else "invalid")
            raise

    message_schema, message_definitions = _message_schema()

    @app.post("/v1/invoices", status_code=202, response_model=Accepted,
              responses={400: {"description": "Not a JSON object (or wrong content type)"},
                         401: {"description": "No or invalid token"},
                         403: {"description": "The token may not act for this tenant"},
                         409: {"description": "invoice_id names another tenant's or series' "
                                              "invoice"},
                         413: {"description": "Body too large"},
                         422: {"description": "The message breaks the contract"},
                         503: {"description": "The broker did not take the message"}},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": message_schema}}}})
    async def issue_invoice(request: Request,
                            who: Principal = Security(principal)) -> JSONResponse:
        """Validate the contract message and publish it at user priority.

        A repeated invoice_id is harmless: the worker maps it onto the same invoice; when the
        database already holds the invoice beyond RECEIVED it is not published again.
        """
        body = await _read_body(request)
        content_type = request.headers.get("content-type")
        try:
            message = parse_message(body, content_type)
        except InvalidMessage as exc:
            raise HTTPException(_invalid_status(body, content_type), exc.reason) from None
        if not who.may_see(message.tenant):
            raise HTTPException(403, "this token may not issue invoices for that tenant")
        async with _engine(request).connect() as conn:
            try:
                known = await get_invoice(conn, message.invoice_id)
            except InvoiceNotFound:
                known = None
        if known is not None and (known.tenant, known.series) != (message.tenant,
                                                                  message.series):
            raise HTTPException(409, "invoice_id already names a different invoice; "
                                     "invoice ids are unique across tenants and series")
        status = None if known is None else Status(known.status)
        publish = status in (None, Status.RECEIVED)
        if publish:
            try:
                await _publisher(request).publish(message, priority="user")
            except (PublishRefused, PublishUnconfirmed) as exc:
                log.warning("api_publish_failed", invoice_id=message.invoice_id,
                            error=type(exc).__name__)
                raise HTTPException(503, str(exc)) from None
        metrics.accepted.labels(str(publish).lower()).inc()
        log.info("invoice_accepted", invoice_id=message.invoice_id, tenant=message.tenant,
                 series=message.series, published=publish,
                 status=None if status is None else status.value)
        url = status_url(request, message.invoice_id)
        answer = Accepted(invoice_id=message.invoice_id, status_url=url, published=publish,
                          status=None if status is None else status.value)
        return JSONResponse(answer.model_dump(), status_code=202, headers={"Location": url})

    @app.get("/v1/invoices/{invoice_id:path}", response_model=InvoiceOut,
             name="get_invoice",
             responses={401: {"description": "No or invalid token"},
                        404: {"description": "No such invoice (or not this token's tenant)"}})
    async def invoice_status(request: Request, invoice_id: str,
                             who: Principal = Security(principal)) -> InvoiceOut:
        """The invoice's state and its history. 404 until the worker has stored it."""
        # One snapshot for the row and its events, so the history matches the state shown.
        async with _snapshot_engine(request).connect() as conn:
            try:
                row = await get_invoice(conn, invoice_id)
            except InvoiceNotFound:
                row = None
            if row is None or not who.may_see(row.tenant):
                # Same answer whether it is missing or someone else's: existence is not leaked.
                raise HTTPException(404, "no such invoice")
            events = await invoice_events(conn, row.id)
        return InvoiceOut(
            invoice_id=row.invoice_id, tenant=row.tenant, series=row.series, status=row.status,
            number=row.number, reserved_no=row.reserved_no, attempts=row.attempts,
            last_error=row.last_error, integrator_ref=row.integrator_ref,
            created_at=feed.iso_utc(row.created_at), updated_at=feed.iso_utc(row.updated_at),
            reserved_at=_iso(row.reserved_at), issued_at=_iso(row.issued_at),
            next_attempt_at=_iso(row.next_attempt_at),
            events=[EventOut(sequence_id=e.sequence_id, kind=e.kind, from_status=e.from_status,
                             to_status=e.to_status, number=e.number, attempts=e.attempts,
                             detail=e.detail, actor=e.actor, created_at=feed.iso_utc(e.created_at))
                    for e in events])

    @app.get("/v1/events", response_model=FeedPage, name="events",
             responses={400: {"description": "Bad cursor, limit or tenant"},
                        401: {"description": "No or invalid token"},
                        403: {"description": "The token may not read that tenant's feed"}})
    async def events(
        request: Request,
        cursor: str | None = Query(None, description="Return events after this sequence_id "
                                                     "(default 0: from the beginning)."),
        limit: str | None = Query(None, description=f"Page size, 1..{feed.MAX_LIMIT} "
                                                    f"(default {feed.DEFAULT_LIMIT})."),
        tenant: str | None = Query(None, description="Only this tenant's events."),
        who: Principal = Security(principal),
    ) -> JSONResponse:
        """The commit-ordered event feed.

        Follow ``next`` while it is not null (the page was full), then keep polling
        ``poll_more``: every committed event is returned exactly once, in commit order, however
        the writers' transactions interleaved. A scoped token's feed is always its tenant's.
        """
        try:
            after = feed.parse_cursor(cursor)
            size = feed.parse_limit(limit)
        except InvalidFeedRequest as exc:
            raise HTTPException(400, str(exc)) from None
        if tenant is not None and not TENANT_RE.match(tenant):
            raise HTTPException(400, "tenant must be a tenant name (letters, digits, '.', '_', "
                                     "'-')")
        if tenant is not None and not who.may_see(tenant):
            raise HTTPException(403, "this token may not read that tenant's feed")
        scope = tenant if tenant is not None else who.tenant
        async with _engine(request).connect() as conn:
            page = await feed.events_after(conn, after, size, scope)
        metrics.feed_events.inc(len(page))
        last = page[-1].sequence_id if page else after
        # Rendered directly (FeedPage documents the shape): validating 500 events through
        # pydantic again would double the cost of a page.
        return JSONResponse({
            "results": [event.as_json() for event in page],
            "next": _feed_url(request, last, size, tenant) if len(page) == size else None,
            "poll_more": _feed_url(request, last, size, tenant),
        })

    @app.get("/healthz", response_model=Health,
             responses={503: {"description": "The database or the broker is unreachable",
                              "model": Health}})
    async def healthz(request: Request) -> JSONResponse:
        """200 when the database and the broker both answer; 503 says which did not."""

        async def database() -> None:
            async with _engine(request).connect() as conn:
                await conn.execute(q.PING)

        async def broker() -> None:
            # A real round trip (passive declare of the main queue) on the publisher's channel;
            # while the connection is re-established this waits, and times out.
            channel = await _publisher(request).channel.get_underlay_channel()
            await channel.queue_declare(settings.queue, passive=True)

        timeout = settings.api_health_timeout_s
        checks = await asyncio.gather(_check(database, timeout), _check(broker, timeout))
        answer = Health(database=checks[0], broker=checks[1])
        healthy = all(check == "ok" for check in checks)
        if not healthy:
            log.warning("api_unhealthy", database=answer.database, broker=answer.broker)
        return JSONResponse(answer.model_dump(), status_code=200 if healthy else 503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus_metrics() -> PlainTextResponse:
        """Prometheus text format."""
        return PlainTextResponse(generate_latest(metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 routes=app.routes)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                message_definitions)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
