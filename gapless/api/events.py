"""``GET /v1/events``: the commit-ordered event feed (:mod:`gapless.ledger.feed`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.responses import JSONResponse

from gapless.api import deps
from gapless.api.auth import Principal, principal
from gapless.api.models import FeedPage
from gapless.api.observe import ApiMetrics
from gapless.errors import InvalidFeedRequest
from gapless.ledger import feed
from gapless.ledger.database import Database
from gapless.numbers import TENANT_RE

router = APIRouter()


def feed_url(request: Request, cursor: int, limit: int, tenant: str | None) -> str:
    params: dict[str, Any] = {"cursor": cursor, "limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    return deps.url(request, request.app.url_path_for("events"), params)


def feed_scope(who: Principal, tenant: str | None) -> str | None:
    """Whose events a request reads: the asked tenant (400 malformed, 403 not this token's),
    else the token's own tenant (None: every tenant)."""
    if tenant is not None and not TENANT_RE.match(tenant):
        raise HTTPException(400, "tenant must be a tenant name (letters, digits, '.', '_', "
                                 "'-')")
    if tenant is not None and not who.may_see(tenant):
        raise HTTPException(403, "this token may not read that tenant's feed")
    return tenant if tenant is not None else who.tenant


@router.get("/v1/events", response_model=FeedPage, name="events",
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
    db: Database = Depends(deps.database),
    metrics: ApiMetrics = Depends(deps.metrics),
) -> JSONResponse:
    """The commit-ordered event feed.

    Follow ``next`` while it is not null (the page was full), then keep polling ``poll_more``:
    every committed event is returned exactly once, in commit order, however the writers'
    transactions interleaved. A scoped token's feed is always its tenant's.
    """
    try:
        after = feed.parse_cursor(cursor)
        size = feed.parse_limit(limit)
    except InvalidFeedRequest as exc:
        raise HTTPException(400, str(exc)) from None
    scope = feed_scope(who, tenant)
    page = await feed.events_after(db, after, size, scope)
    metrics.feed_events.inc(len(page))
    last = page[-1].sequence_id if page else after
    # Rendered directly (FeedPage documents the shape): validating 500 events through pydantic
    # again would double the cost of a page.
    return JSONResponse({
        "results": [event.as_json() for event in page],
        "next": feed_url(request, last, size, tenant) if len(page) == size else None,
        "poll_more": feed_url(request, last, size, tenant),
    })
