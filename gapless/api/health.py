"""``GET /healthz`` and ``GET /metrics``: unauthenticated, for probes and scrapes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gapless.amqp.publisher import Publisher
from gapless.api import deps
from gapless.api.models import Health
from gapless.api.observe import ApiMetrics
from gapless.ledger.database import Database
from gapless.ledger.queries import api as q
from gapless.logging import get_logger
from gapless.settings import Settings

log = get_logger("gapless.api")
router = APIRouter()


async def check(what: Callable[[], Awaitable[None]], limit_s: float) -> str:
    """"ok", or what went wrong within ``limit_s``."""
    try:
        async with asyncio.timeout(limit_s):
            await what()
    except TimeoutError:
        return f"error: no answer within {limit_s:g} s"
    except Exception as exc:  # any failure is the answer
        return f"error: {type(exc).__name__}"
    return "ok"


@router.get("/healthz", response_model=Health,
            responses={503: {"description": "The database or the broker is unreachable",
                             "model": Health}})
async def healthz(request: Request, db: Database = Depends(deps.database),
                  publisher: Publisher = Depends(deps.publisher)) -> JSONResponse:
    """200 when the database and the broker both answer; 503 says which did not."""
    settings: Settings = request.app.state.settings

    async def database() -> None:
        await db.one(q.PING)

    async def broker() -> None:
        # A real round trip (passive declare of the main queue) on the publisher's channel,
        # or on a fresh connection (the next node) when that one is gone.
        await publisher.ping()

    timeout = settings.api_health_timeout_s
    checks = await asyncio.gather(check(database, timeout), check(broker, timeout))
    answer = Health(database=checks[0], broker=checks[1])
    healthy = all(result == "ok" for result in checks)
    if not healthy:
        log.warning("api_unhealthy", database=answer.database, broker=answer.broker)
    return JSONResponse(answer.model_dump(), status_code=200 if healthy else 503)


@router.get("/metrics", response_class=PlainTextResponse)
async def prometheus_metrics(metrics: ApiMetrics = Depends(deps.metrics)) -> PlainTextResponse:
    """Prometheus text format."""
    return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
