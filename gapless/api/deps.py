"""What the routes take from the running application (FastAPI dependencies and helpers)."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote

from fastapi import Request

from gapless.amqp.publisher import Publisher
from gapless.api.observe import ApiMetrics
from gapless.ledger import feed
from gapless.ledger.database import Database


def database(request: Request) -> Database:
    """The API's database (actor ``api``: the events it causes say so); several reads of one
    request that must agree run in ``Database.snapshot()``."""
    return cast("Database", request.app.state.db)


def publisher(request: Request) -> Publisher:
    """The confirmed publisher opened by the lifespan."""
    return cast("Publisher", request.app.state.publisher)


def metrics(request: Request) -> ApiMetrics:
    """The API's Prometheus metrics."""
    return cast("ApiMetrics", request.app.state.metrics)


def iso(moment: Any) -> str | None:
    return None if moment is None else feed.iso_utc(moment)


def status_url(request: Request, invoice_id: str) -> str:
    base = str(request.base_url).rstrip("/")
    return f"{base}/v1/invoices/{quote(invoice_id, safe='')}"
