"""``/healthz`` and ``/readyz`` of ``gapless worker`` and ``gapless recovery`` (gapless.observe),
on real processes: ready once working, not ready while the integrator's breaker holds the worker
paused or the database is cut off from recovery, and alive throughout; and the server's own
answers to a failing or hanging check."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.observe import CHECK_TIMEOUT_S, HealthServer
from gapless.settings import Settings
from tests.helpers import GaplessProcess, TcpProxy, free_port, ledger, today, wait_until

MESSAGE = {"tenant": "acme", "series": "ABC", "issue_date": today(), "currency": "TRY",
           "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
           "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                      "vat_rate": "20"}]}


def answer(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """(status, JSON body) of GET ``path``; None while nothing answers."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    except httpx.HTTPError:
        return None
    return response.status_code, response.json()


def wait_for(proc: GaplessProcess, port: int, path: str, status: int) -> dict[str, Any]:
    """Wait until ``path`` answers ``status``; its JSON body."""
    def check() -> dict[str, Any] | None:
        assert proc.alive(), proc.output()[-3000:]
        got = answer(port, path)
        return got[1] if got is not None and got[0] == status else None

    body = wait_until(check, 90, message=f"{path} to answer {status}")
    assert isinstance(body, dict)
    return body


async def test_worker_is_ready_while_consuming_and_alive_while_paused(
        engine: AsyncEngine, settings: Settings, gapless_env: dict[str, str],
        log_dir: Path) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    port, dead_port = free_port(), free_port()
    env = {**gapless_env, "GAPLESS_INTEGRATOR_URL": f"http://127.0.0.1:{dead_port}",
           "GAPLESS_BREAKER_FAIL_MAX": "1", "GAPLESS_BREAKER_RESET_TIMEOUT_S": "600"}
    worker = GaplessProcess(["worker", "--concurrency", "1", "--metrics-port", str(port)],
                            env, log_dir, "worker")
    try:
        ready = wait_for(worker, port, "/readyz", 200)
        assert ready == {"status": "ok", "checks": {
            "database": {"ok": True, "detail": "reachable"},
            "consuming": {"ok": True, "detail": "consuming"}}}
        assert answer(port, "/healthz") == (200, {"status": "ok", "checks": {
            "worker": {"ok": True, "detail": "running"}}})
        async with httpx.AsyncClient(timeout=10) as http:
            metrics = await http.get(f"http://127.0.0.1:{port}/metrics")
        assert metrics.status_code == 200
        assert "gapless_worker_consuming 1.0" in metrics.text
        # The integrator is a dead port: the first send opens the breaker, the worker pauses.
        async with Publisher(settings) as publisher:
            await publisher.publish({**MESSAGE, "invoice_id": "health-1"}, priority="user")
        paused = wait_for(worker, port, "/readyz", 503)
        assert paused["status"] == "failing"
        assert paused["checks"]["consuming"] == {"ok": False, "detail": "paused or not started"}
        assert paused["checks"]["database"]["ok"] is True
        assert answer(port, "/healthz") == (200, {"status": "ok", "checks": {
            "worker": {"ok": True, "detail": "running"}}})
    finally:
        worker.terminate(timeout=40)
        worker.close()


def test_recovery_is_ready_after_a_round_and_not_while_the_database_is_away(
        settings: Settings, gapless_env: dict[str, str], log_dir: Path) -> None:
    proxy = TcpProxy(make_url(settings.database_url).port or 5432)
    proxy.start()
    database_url = make_url(settings.database_url).set(port=proxy.port).render_as_string(
        hide_password=False)
    port = free_port()
    recovery = GaplessProcess(["recovery", "--interval", "1", "--metrics-port", str(port)],
                              {**gapless_env, "GAPLESS_DATABASE_URL": database_url},
                              log_dir, "recovery")
    try:
        ready = wait_for(recovery, port, "/readyz", 200)
        assert ready["checks"]["database"] == {"ok": True, "detail": "reachable"}
        assert ready["checks"]["rounds"]["ok"] is True
        assert answer(port, "/healthz") == (200, {"status": "ok", "checks": {
            "loop": {"ok": True, "detail": "running"}}})
        proxy.cut()
        away = wait_for(recovery, port, "/readyz", 503)
        assert away["checks"]["database"]["ok"] is False
        # Not a reason to restart: the loop keeps trying rounds.
        assert answer(port, "/healthz") == (200, {"status": "ok", "checks": {
            "loop": {"ok": True, "detail": "running"}}})
    finally:
        proxy.cut()
        recovery.terminate(timeout=40)
        recovery.close()


async def test_a_failing_or_hanging_check_answers_503_in_bounded_time() -> None:
    never = asyncio.Event()

    async def hangs() -> tuple[bool, str]:
        await never.wait()
        return True, "unreachable"

    def raises() -> tuple[bool, str]:
        raise ConnectionRefusedError("refused")

    port = free_port()
    server = HealthServer("127.0.0.1", port, liveness=[("loop", lambda: (True, "running"))],
                          readiness=[("database", hangs), ("broker", raises)])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            started = time.monotonic()
            ready = await http.get("/readyz")
            assert time.monotonic() - started < CHECK_TIMEOUT_S + 5
            assert ready.status_code == 503
            assert ready.json() == {"status": "failing", "checks": {
                "database": {"ok": False, "detail": f"no answer within {CHECK_TIMEOUT_S:g} s"},
                "broker": {"ok": False, "detail": "ConnectionRefusedError"}}}
            alive = await http.get("/healthz")
            assert alive.status_code == 200
            assert alive.json()["status"] == "ok"
            scrape = await http.get("/metrics")
            assert scrape.status_code == 200
            assert scrape.headers["content-type"].startswith("text/plain")
            assert (await http.get("/nothing")).status_code == 404
    finally:
        await server.stop()


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_the_routes_are_the_ones_compose_and_docs_name(path: str) -> None:
    routes = {resource.canonical for resource in
              HealthServer("127.0.0.1", 0, liveness=[], readiness=[]).app().router.resources()}
    assert path in routes
    assert path in (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text(
        encoding="utf-8")
