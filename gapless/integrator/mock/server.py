"""Serving the mock integrator: one uvicorn process, one event loop, until SIGINT/SIGTERM.

uvicorn's HTTP protocol is extended so that a request can drop its own connection without an
answer (:data:`~gapless.integrator.mock.app.ABORT_EXTENSION`): an ASGI application alone cannot,
and a dropped connection is one of the ways the mock loses the answer to an accepted document.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from gapless.integrator.mock.app import ABORT_EXTENSION, create_app
from gapless.integrator.mock.state import Faults
from gapless.logging import get_logger

log = get_logger("gapless.integrator.mock")


def abortable_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, extended so a request can drop its connection without answering.

    An ASGI app cannot close its connection: raising before the response makes uvicorn answer
    500. This subclass puts ``scope["extensions"][ABORT_EXTENSION]`` (the transport's ``abort``)
    into every request's scope; it is the "dropped connection" kind of lost response.
    """
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class AbortableHTTPProtocol(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._gapless_abort = transport.abort

        def handle_events(self) -> None:  # h11
            super().handle_events()
            self._tag_scope()

        def on_headers_complete(self) -> None:  # httptools
            self._tag_scope()
            super().on_headers_complete()

        def _tag_scope(self) -> None:
            scope = getattr(self, "scope", None)
            if isinstance(scope, dict):
                scope.setdefault("extensions", {})[ABORT_EXTENSION] = self._gapless_abort

    return AbortableHTTPProtocol


def run_mock_integrator(host: str, port: int, faults: Faults, seed: int | None) -> None:
    """Serve the mock integrator until SIGINT/SIGTERM (one process, one event loop)."""
    import uvicorn

    app = create_app(faults, seed)
    log.info("mock_integrator_started", host=host, port=port, seed=seed,
             faults=faults.model_dump(mode="json"))
    config = uvicorn.Config(app, host=host, port=port, access_log=False, log_config=None,
                            log_level="warning", http=abortable_protocol(), lifespan="off",
                            timeout_keep_alive=30, backlog=2048,
                            # A withheld ("timeout") answer must not hold up SIGTERM for a minute.
                            timeout_graceful_shutdown=2)
    # uvicorn re-raises the stop signal once it has shut down gracefully; with a no-op handler in
    # place the process then ends normally (exit 0) instead of dying by the signal.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: None)
    uvicorn.Server(config).run()
    log.info("mock_integrator_stopped", ledger_size=len(app.state.mock.ledger))
