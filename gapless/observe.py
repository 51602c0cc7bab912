"""The metrics and health endpoints of a long-running process (worker, recovery).

One small aiohttp server inside the process's own event loop serves:

- ``GET /metrics``: the default Prometheus registry (text exposition);
- ``GET /healthz``: liveness. 200 when the event loop answers (this handler runs on it) and the
  process's main task says it is alive; 503 otherwise. An orchestrator restarts on a failure.
- ``GET /readyz``: readiness. 200 when the process does its work (database reachable and, for a
  worker, consuming; for recovery, a round finished recently); 503 otherwise. Not a reason to
  restart: the database or the broker may be away, and the process waits for them.

Each answer is a small JSON object: ``{"status": "ok" | "failing", "checks": {name: detail}}``.
A check is a function returning ``(passed, detail)``; readiness checks may be coroutines and are
bounded by :data:`CHECK_TIMEOUT_S` each, so a hung database makes ``/readyz`` answer 503, not hang.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

#: The routes served (docker-compose health checks and the tests name them).
METRICS_PATH = "/metrics"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
#: How long one readiness check (a database round trip) may take before it counts as failed.
CHECK_TIMEOUT_S = 2.0

#: A check: its name and a function answering (passed, detail), plain or awaitable.
Check = tuple[str, Callable[[], tuple[bool, Any] | Awaitable[tuple[bool, Any]]]]


async def run_checks(checks: Sequence[Check]) -> tuple[bool, dict[str, Any]]:
    """Run every check (each bounded by CHECK_TIMEOUT_S); all must pass."""
    results: dict[str, Any] = {}
    passed = True
    for name, check in checks:
        try:
            outcome = check()
            if inspect.isawaitable(outcome):
                outcome = await asyncio.wait_for(outcome, CHECK_TIMEOUT_S)
            ok, detail = outcome
        except TimeoutError:
            ok, detail = False, f"no answer within {CHECK_TIMEOUT_S:g} s"
        except Exception as exc:
            ok, detail = False, type(exc).__name__
        results[name] = {"ok": bool(ok), "detail": detail}
        passed = passed and bool(ok)
    return passed, results


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port``; start and stop in the
    process's event loop."""

    def __init__(self, host: str, port: int, *, liveness: Sequence[Check],
                 readiness: Sequence[Check]) -> None:
        self.host = host
        self.port = port
        self.liveness = list(liveness)
        self.readiness = list(readiness)
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(METRICS_PATH, self._metrics)
        app.router.add_get(LIVENESS_PATH, self._healthz)
        app.router.add_get(READINESS_PATH, self._readyz)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return await self._answer(self.liveness)

    async def _readyz(self, _request: web.Request) -> web.Response:
        return await self._answer(self.readiness)

    @staticmethod
    async def _answer(checks: Sequence[Check]) -> web.Response:
        passed, results = await run_checks(checks)
        return web.json_response({"status": "ok" if passed else "failing", "checks": results},
                                 status=200 if passed else 503)


def task_alive(task: Callable[[], asyncio.Task[Any] | None]) -> Callable[[], tuple[bool, str]]:
    """A liveness check: the task ``task()`` returns exists and has not ended."""
    def check() -> tuple[bool, str]:
        current = task()
        if current is None:
            return False, "not started"
        if current.done():
            return False, "ended"
        return True, "running"
    return check
