"""The API's metrics (a registry of their own) and its request log."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gapless.logging import get_logger

log = get_logger("gapless.api")

#: Routes whose successful requests are logged at debug level (health probes, scrapes).
QUIET_ROUTES = frozenset({"/healthz", "/metrics"})


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
