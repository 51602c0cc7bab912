"""What the routes take from the running application (FastAPI dependencies and helpers)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless import feed
from gapless.api.observe import ApiMetrics
from gapless.publisher import Publisher


def engine(request: Request) -> AsyncEngine:
    """The API's engine (actor ``api``: the events it causes say so)."""
    found: AsyncEngine = request.app.state.engine
    return found


def snapshot_engine(request: Request) -> AsyncEngine:
    """The same pool, REPEATABLE READ: several reads of one request see one snapshot."""
    found: AsyncEngine = request.app.state.snapshot_engine
    return found


def publisher(request: Request) -> Publisher:
    """The confirmed publisher opened by the lifespan."""
    found: Publisher = request.app.state.publisher
    return found


def metrics(request: Request) -> ApiMetrics:
    found: ApiMetrics = request.app.state.metrics
    return found


def iso(moment: Any) -> str | None:
    return None if moment is None else feed.iso_utc(moment)


def status_url(request: Request, invoice_id: str) -> str:
    base = str(request.base_url).rstrip("/")
    return f"{base}/v1/invoices/{quote(invoice_id, safe='')}"
