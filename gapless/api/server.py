"""Serving the API: uvicorn (httptools) with bounds a hostile client cannot get round.

uvicorn's httptools protocol bounds neither a request's head nor the time a client takes to
send it: a header of any size is buffered, and a client sending a byte a second holds its
connection for ever. :class:`BoundedHttpProtocol` adds, per connection:

* **Head size**: the request line and header fields together over ``max_header_bytes``, or more
  than ``max_headers`` fields, are answered ``431`` and the connection is closed. A head still
  arriving is counted chunk by chunk as it is read, so it is cut off before it is buffered whole.
* **Request time**: a request's head and body must arrive within ``request_timeout_s`` (from
  the connection's start for its first request, from the first byte for later ones); otherwise
  the connection is closed (``408`` if the head was not complete). Waiting while the server
  itself holds reading back (a pipelined request behind a running one) does not count.
* **Connections**: a connection beyond ``max_connections`` open ones is closed at once, without
  an answer. Below that, uvicorn's ``limit_concurrency`` answers ``503`` to a request arriving
  while that many connections are open or requests are running.

Body size is the application's concern (``POST /v1/invoices`` refuses a body over the
message's maximum with 413 without reading it all).
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gapless.logging import get_logger
from gapless.settings import Settings

log = get_logger("gapless.api")

@dataclass(frozen=True)
class HttpLimits:
    """What one ``gapless api`` process accepts from its clients (see the module's docstring;
    the defaults are the settings' ``GAPLESS_API_*``)."""

    max_header_bytes: int
    max_headers: int
    request_timeout_s: float
    limit_concurrency: int
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(max_header_bytes=settings.api_max_header_bytes,
                   max_headers=settings.api_max_headers,
                   request_timeout_s=settings.api_request_timeout_s,
                   limit_concurrency=settings.api_limit_concurrency,
                   max_connections=settings.api_max_connections)


async def _header_fields_too_large(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI answer to a complete head over the limits (uvicorn's own 503 works the same)."""
    body = b"Request Header Fields Too Large"
    await send({"type": "http.response.start", "status": 431,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of :class:`HttpLimits`; the class used by a
    server is made by :func:`bounded_protocol`, which sets :attr:`limits`."""

    limits: ClassVar[HttpLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: TimerHandle | None = None
        #: Between requests or inside a request's head (not yet at its body).
        self._in_head = True
        #: Inside a request's head: its first byte has come, its end not yet.
        self._reading_head = False
        #: Heads completed on this connection: a chunk read entirely inside one head leaves it
        #: unchanged.
        self._heads = 0
        #: Bytes of chunks read entirely inside the current head (it may not be parsed yet).
        self._raw_head_bytes = 0
        #: The current head as parsed: request target, field names and values; field count.
        self._head_bytes = 0
        self._fields = 0

    # ------------------------------------------------------------------ connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            log.warning("api_connection_refused", reason="too_many_connections",
                        limit=self.limits.max_connections)
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        in_head, heads = self._in_head, self._heads
        if in_head:
            self._arm()  # any byte starts the clock, even empty lines the parser skips
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        if in_head and heads == self._heads:
            self._raw_head_bytes += len(data)
        if self._raw_head_bytes > self.limits.max_header_bytes:
            self._cut(431, "header_too_large")

    # ------------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        self._head_bytes = 0
        self._fields = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        # Kept whole even when too long: a head parsed in one chunk is at most one chunk, and the
        # 431 answer below still needs a URL to parse.
        self._head_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        self._fields += 1
        if (self._head_bytes <= self.limits.max_header_bytes
                and self._fields <= self.limits.max_headers):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = self._reading_head = False
        self._heads += 1
        self._raw_head_bytes = 0
        if (self._head_bytes <= self.limits.max_header_bytes
                and self._fields <= self.limits.max_headers):
            super().on_headers_complete()
            return
        log.warning("api_request_refused", reason="header_too_large",
                    header_bytes=self._head_bytes, fields=self._fields)
        # The request runs as uvicorn runs any other, with the application swapped for the 431
        # answer (as uvicorn swaps in its 503); `connection: close` ends the connection after.
        app, self.app = self.app, _header_fields_too_large
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self._in_head = True

    # ------------------------------------------------------------------ the request deadline

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.limits.request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            # The server holds reading back (a pipelined request waits for the one before it,
            # or the application has not taken the body yet): the client is not the one late.
            self._arm()
            return
        self._cut(408, "request_timeout")

    def _cut(self, status: int, reason: str) -> None:
        """Close the connection; answer ``status`` first to a request whose head is still
        arriving (unless the response to one before it is under way)."""
        log.warning("api_request_refused", reason=reason)
        if self._reading_head and (self.cycle is None or self.cycle.response_complete):
            body = HTTPStatus(status).phrase.encode()
            self.transport.write(b"".join([
                STATUS_LINE[status],
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: ", str(len(body)).encode(), b"\r\n",
                b"connection: close\r\n\r\n",
                body]))
        self.transport.close()


def bounded_protocol(limits: HttpLimits) -> type[BoundedHttpProtocol]:
    """The protocol class of a server with ``limits``."""
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})


def make_server(app: Any, *, host: str, port: int, proxy_headers: bool,
                limits: HttpLimits) -> uvicorn.Server:
    """The uvicorn server of ``gapless api``: httptools with :class:`HttpLimits`, no WebSocket
    upgrade (the API has no WebSocket route), no logging configuration of its own."""
    config = uvicorn.Config(
        app,
        host=host, port=port,
        http=bounded_protocol(limits), ws="none",
        limit_concurrency=limits.limit_concurrency,
        log_config=None,     # structlog is configured already; uvicorn must not reconfigure
        access_log=False,    # the app logs one `api_request` line per request (no headers)
        proxy_headers=proxy_headers, forwarded_allow_ips="127.0.0.1",
        lifespan="on", server_header=False,
    )
    return uvicorn.Server(config)
