"""``gapless api``: the HTTP API (issue, invoice status, event feed) under uvicorn."""

from __future__ import annotations

import signal
from types import FrameType

import typer

from gapless.cli.options import (
    AmqpUrlOption,
    ClusterIdOption,
    DatabaseUrlOption,
    QueueOption,
    run,
    settings_from,
)
from gapless.settings import Settings


def api(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="TCP port."),
    insecure_no_auth: bool = typer.Option(
        False, "--insecure-no-auth",
        help="Serve without authentication when GAPLESS_API_TOKEN is empty (trusted networks "
             "and demos only)."),
    proxy_headers: bool = typer.Option(
        False, "--proxy-headers",
        help="Trust X-Forwarded-Proto/For from 127.0.0.1, so URLs in answers use the "
             "client-facing scheme."),
    public_url: str | None = typer.Option(
        None, "--public-url",
        help="Overrides GAPLESS_API_PUBLIC_URL: the base of every link in answers, e.g. "
             "https://gapless.example (default: a trusted Host, else the address connected to)."),
    trusted_host: list[str] | None = typer.Option(
        None, "--trusted-host",
        help="Overrides GAPLESS_API_TRUSTED_HOSTS (repeatable): a Host header name links may "
             "be built from, besides localhost, 127.0.0.1 and ::1."),
    max_header_bytes: int | None = typer.Option(
        None, "--max-header-bytes",
        help="Overrides GAPLESS_API_MAX_HEADER_BYTES (16384): a request line and headers over "
             "this many bytes are answered 431 and the connection closed."),
    max_headers: int | None = typer.Option(
        None, "--max-headers",
        help="Overrides GAPLESS_API_MAX_HEADERS (100): more header fields are answered 431."),
    request_timeout: float | None = typer.Option(
        None, "--request-timeout",
        help="Overrides GAPLESS_API_REQUEST_TIMEOUT_S (10): seconds a client has to send a "
             "whole request, head and body; then the connection is closed."),
    limit_concurrency: int | None = typer.Option(
        None, "--limit-concurrency",
        help="Overrides GAPLESS_API_LIMIT_CONCURRENCY (512): with this many connections open or "
             "requests running, a request is answered 503."),
    max_connections: int | None = typer.Option(
        None, "--max-connections",
        help="Overrides GAPLESS_API_MAX_CONNECTIONS (1024): a connection beyond this many open "
             "ones is closed at once."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
    cluster_id: int | None = ClusterIdOption,
) -> None:
    """HTTP API: issue, invoice status, event feed (OpenAPI docs at /docs).

    GAPLESS_API_TOKEN holds the bearer tokens: a comma-separated list of TOKEN (every tenant)
    or TENANT:TOKEN (that tenant only), each at least 16 characters.
    """
    settings = settings_from(
        database_url=database_url, amqp_url=amqp_url, queue=queue, cluster_id=cluster_id,
        api_insecure_no_auth=True if insecure_no_auth else None,
        api_public_url=public_url,
        api_trusted_hosts=",".join(trusted_host) if trusted_host else None,
        api_max_header_bytes=max_header_bytes, api_max_headers=max_headers,
        api_request_timeout_s=request_timeout, api_limit_concurrency=limit_concurrency,
        api_max_connections=max_connections)
    if settings.api_max_connections < settings.api_limit_concurrency:
        raise typer.BadParameter("--max-connections must be at least --limit-concurrency")
    from gapless.api import create_app

    app = create_app(settings)  # a bad token setting stops here, before anything listens
    run(_preflight(settings))
    run(_serve(app, host, port, proxy_headers, settings))


async def _preflight(settings: Settings) -> None:
    """Reach the database and the broker once, so an outage is one line and exit 1 rather
    than a traceback from inside the server's start-up."""
    from gapless.amqp.connection import connect
    from gapless.ledger.database import check_cluster, short_lived

    async with short_lived(settings.database_url, actor="api") as db:
        await check_cluster(db, settings.cluster_id)
    connection = await connect(settings)
    await connection.close()


async def _serve(app: object, host: str, port: int, proxy_headers: bool,
                 settings: Settings) -> None:
    from gapless.api.server import HttpLimits, make_server

    server = make_server(app, host=host, port=port, proxy_headers=proxy_headers,
                         limits=HttpLimits.from_settings(settings))
    # uvicorn drains on SIGTERM/SIGINT and then re-raises the signal to the handler that was in
    # place before it started. A drained stop is a normal stop for gapless processes (exit 0), so
    # that handler is a no-op while the server runs.
    previous = {sig: signal.signal(sig, _already_handled) for sig in (signal.SIGTERM,
                                                                      signal.SIGINT)}
    try:
        await server.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        raise SystemExit(1)


def _already_handled(signum: int, frame: FrameType | None) -> None:
    """The signal was handled by the server's graceful shutdown."""


def register(app: typer.Typer) -> None:
    app.command("api")(api)
