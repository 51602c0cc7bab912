"""The FastAPI application: lifespan (database, publisher), middleware, error handlers, routers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from gapless.amqp.publisher import Publisher
from gapless.api import deps, events, health, invoices, openapi
from gapless.api.auth import Authenticator
from gapless.api.lookups import KnownLookups
from gapless.api.observe import ApiMetrics, RequestObserver
from gapless.ledger import feed
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database, check_cluster
from gapless.ledger.sqlstates import is_read_only
from gapless.logging import get_logger
from gapless.settings import Settings

log = get_logger("gapless.api")


#: A pooled connection idle this long is tested before a request gets it (under load none is:
#: a round trip per request saved; after an outage a dead one is replaced, not lent).
CHECK_IDLE_S = 1.0

#: How long the API reuses a tenant's issuer profile in force for its checks before reading it
#: again (the worker checks every message against the one in force when it seals).
PROFILE_TTL_S = 10.0


def lifespan(settings: Settings, auth: Authenticator
             ) -> Callable[[FastAPI], Any]:
    """Open the database (one per app: a :class:`Database` with a psycopg pool of
    ``GAPLESS_DB_POOL_SIZE`` connections; checking the cluster id, so an unmigrated or foreign
    database stops the API at start-up) and a Publisher (which declares the queue topology);
    position the feed's waiting events in the background
    (:func:`gapless.ledger.feed.keep_positioning`); close all after."""

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        db = await Database.open(settings.database_url, actor="api",
                                 size=settings.db_pool_size, check_idle_s=CHECK_IDLE_S,
                                 fail_fast=True)
        try:
            await check_cluster(db, settings.cluster_id)
            async with Publisher(settings) as publisher:
                app.state.db = db
                app.state.publisher = publisher
                app.state.catalog = Catalog(db, profile_ttl_s=PROFILE_TTL_S)
                known = KnownLookups(db)
                app.state.services = deps.Services(db, publisher, app.state.catalog, settings,
                                                   app.state.metrics, known)
                log.info("api_started", queue=settings.queue, auth=(
                    "none (insecure)" if auth.insecure_no_auth else "bearer"),
                    tokens=len(auth.tokens),
                    scoped_tenants=sorted({t.tenant for t in auth.tokens if t.tenant}))
                positioning = asyncio.create_task(feed.keep_positioning(db))
                try:
                    yield
                finally:
                    positioning.cancel()
                    with suppress(asyncio.CancelledError):
                        await positioning
                    await known.aclose()
        finally:
            await db.close()
            log.info("api_stopped")

    return run


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The database went away mid-request: a retryable 503, not a 500 with a traceback."""
    log.warning("api_database_unavailable", route=request.url.path, error=type(exc).__name__)
    return JSONResponse({"detail": "database unavailable; retry later"}, status_code=503,
                        headers={"Retry-After": "5"})


async def client_disconnected(request: Request, exc: Exception) -> JSONResponse:
    """The connection closed before the request's body was whole (the client went away, or was
    cut off by the request timeout): nobody reads an answer, and it is not a server error."""
    log.info("api_client_disconnected", route=request.url.path)
    return JSONResponse({"detail": "the request's body did not arrive"}, status_code=400)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A read-only server (SQLSTATE 25006: a standby, met during a failover before the promoted
    primary is found) is the database unavailable; any other internal error is a 500."""
    if is_read_only(exc):
        return await database_unavailable(request, exc)
    log.error("api_internal_error", route=request.url.path, error=type(exc).__name__,
              exc_info=exc)
    return JSONResponse({"detail": "Internal Server Error"}, status_code=500)


def create_app(settings: Settings) -> FastAPI:
    """The API for ``settings``. Raises ConfigurationError for an unusable token setting."""
    auth = Authenticator.from_settings(settings)
    metrics = ApiMetrics()
    app = FastAPI(
        title="gapless",
        summary="Issue invoices with gap-free numbers; follow their commit-ordered events.",
        version="1",
        lifespan=lifespan(settings, auth),
    )
    app.state.settings = settings
    app.state.auth = auth
    app.state.metrics = metrics
    app.state.links = deps.Links.from_settings(settings)
    app.add_middleware(RequestObserver, metrics=metrics)
    # psycopg_pool's PoolTimeout (no connection within the pool's timeout) is an
    # OperationalError too.
    for unavailable in (psycopg.OperationalError, psycopg.InterfaceError):
        app.add_exception_handler(unavailable, database_unavailable)
    app.add_exception_handler(ClientDisconnect, client_disconnected)
    app.add_exception_handler(psycopg.InternalError, internal_error)
    for module in (invoices, events, health):
        app.include_router(module.router)

    openapi.install(app)
    return app
