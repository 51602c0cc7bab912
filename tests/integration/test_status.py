"""``gapless status`` against a database built with the domain operations and a real broker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.documents import build_issuer
from gapless.integrator.base import DuplicateOfAnother, Receipt
from gapless.ledger.invoices import (
    ClaimKind,
    Draft,
    Sending,
    claim_for_sending,
    mark_alarm,
    mark_error,
    mark_issued,
    mark_rejected,
    upsert_draft,
)
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.helpers import free_port, ledger, run_gapless, today

MESSAGE = {"tenant": "acme", "series": "ABC", "issue_date": today(), "currency": "TRY",
           "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
           "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                      "vat_rate": "20"}]}


async def claim(engine: AsyncEngine, tenant: str, series: str, invoice_id: str) -> Sending:
    await upsert_draft(ledger(engine), Draft(invoice_id, tenant, series, 1, {"lines": []}))
    got = await claim_for_sending(ledger(engine), invoice_id, tenant=tenant, lease_s=300,
                                  lock_timeout_ms=10_000)
    assert got.kind is ClaimKind.SEND
    assert got.sending is not None
    return got.sending


async def build(engine: AsyncEngine) -> dict[str, Any]:
    """acme/ABC: 3 issued, 2 sending, 1 error + 1 alarm, 1 rejected, 1 draft (no number);
    globex/GLX: 1 issued; acme/EMPTY: nothing."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "EMPTY", prefix="EMP"))
        await add_series(tx, build_series_spec("globex", "GLX"))
    sent = [await claim(engine, "acme", "ABC", f"a-{n}") for n in range(1, 9)]
    for sending in sent[:3]:
        await mark_issued(ledger(engine), sending.pk, Receipt("acme", sending.number,
                                                      sending.invoice_id, f"ref-{sending.pk}"))
    await mark_error(ledger(engine), sent[3], "integrator timed out", None)
    await mark_alarm(ledger(engine), sent[4], DuplicateOfAnother(sent[4].number, "someone-else"))
    await mark_rejected(ledger(engine), sent[5], "tax id refused")
    # sent[6], sent[7] stay SENDING
    await upsert_draft(ledger(engine), Draft("a-draft", "acme", "ABC", 1, {"lines": []}))
    glx = await claim(engine, "globex", "GLX", "g-1")
    await mark_issued(ledger(engine), glx.pk, Receipt("globex", glx.number, "g-1", "ref-g"))
    return {"last_acme": sent[7].number, "last_globex": glx.number}


@pytest.fixture
def breaker_endpoint() -> Iterator[str]:
    """A real Prometheus endpoint reporting one open breaker, as a worker would."""
    registry = CollectorRegistry()
    gauge = Gauge("gapless_breaker_state", "breaker", ["name"], registry=registry)
    gauge.labels(name="worker").set(2)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


async def test_status_json_matches_the_database(engine: AsyncEngine, settings: Settings,
                                                gapless_env: dict[str, str]) -> None:
    expected = await build(engine)
    claimed_by = time.monotonic()
    result = run_gapless(["status", "--json"], gapless_env)
    elapsed = time.monotonic() - claimed_by
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)

    rows = {(row["tenant"], row["series"]): row for row in status["series"]}
    assert list(rows) == [("acme", "ABC"), ("acme", "EMPTY"), ("globex", "GLX")]
    acme = rows["acme", "ABC"]
    assert (acme["issued"], acme["sending"], acme["error"], acme["alarms"], acme["rejected"],
            acme["received"]) == (3, 2, 2, 1, 1, 1)
    assert acme["last_no"] == 8
    assert acme["last_number"] == expected["last_acme"]
    assert 0 <= acme["oldest_sending_age_s"] <= elapsed + 60
    glx = rows["globex", "GLX"]
    assert (glx["issued"], glx["sending"], glx["last_number"]) == (1, 0, expected["last_globex"])
    assert glx["oldest_sending_age_s"] is None
    empty = rows["acme", "EMPTY"]
    assert (empty["last_no"], empty["last_number"], empty["issued"]) == (None, None, 0)

    assert status["queue"]["name"] == settings.queue
    assert status["breakers"] == [{"source": "-", "name": None, "state": "unknown"}]


async def test_status_shows_issuer_profiles_and_what_the_feed_waits_for(
        engine: AsyncEngine, gapless_env: dict[str, str]) -> None:
    await build(engine)
    await set_profile(ledger(engine), "acme", build_issuer(
        tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
        street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul"))
    async with engine.connect() as holder:
        await holder.begin()  # a session that took the position lock and stays open
        await holder.execute(text("LOCK TABLE invoice_events_feed IN EXCLUSIVE MODE"))
        pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        result = run_gapless(["status", "--json"], gapless_env)
        text_result = run_gapless(["status"], gapless_env)
        await holder.rollback()
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["profiles"] == [{"tenant": "acme", "version": 1, "name": "Acme Bilişim A.Ş.",
                                   "tax_office": "Kadıköy", "city": "İstanbul"}]
    async with engine.connect() as conn:
        waiting = (await conn.execute(text(
            "SELECT count(*) FROM invoice_events WHERE sequence_id IS NULL"))).scalar_one()
    assert waiting > 0  # nobody has polled the feed: every event waits for its position
    feed = status["feed"]
    assert (feed["waiting"], feed["top"], feed["holder_pid"]) == (waiting, None, pid)
    assert feed["holder_s"] >= 0
    assert "1234567803" not in result.stdout + text_result.stdout
    assert "acme v1: Acme Bilişim A.Ş., Kadıköy tax office, İstanbul" in text_result.stdout
    assert f"position lock held by pid {pid}" in text_result.stdout


async def test_status_filters_by_tenant_and_series(engine: AsyncEngine,
                                                   gapless_env: dict[str, str]) -> None:
    await build(engine)
    result = run_gapless(["status", "--json", "--tenant", "acme", "--series", "ABC"],
                         gapless_env)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["series"]
    assert [(row["tenant"], row["series"], row["issued"]) for row in rows] == [
        ("acme", "ABC", 3)]


async def test_status_counts_the_queue_and_the_dead_letters(
        engine: AsyncEngine, settings: Settings, gapless_env: dict[str, str]) -> None:
    await build(engine)
    async with Publisher(settings) as publisher:
        for n in range(2):
            await publisher.publish({**MESSAGE, "invoice_id": f"u-{n}"}, priority="user")
        for n in range(3):
            await publisher.publish({**MESSAGE, "invoice_id": f"b-{n}"}, priority="batch")
        for n in range(2):
            await publisher.dead_letter(b"not json", reason=f"broken {n}")
    result = run_gapless(["status", "--json"], gapless_env)
    assert result.returncode == 0, result.stderr
    queue = json.loads(result.stdout)["queue"]
    assert queue["ready"] == 5
    assert queue["dead_letters"] == 2
    assert queue["dead_queue"] == f"{settings.queue}.dead"
    # Per priority only when the management API answers with statistics of this queue (they
    # are published every few seconds; test_status_management.py waits for them).
    if queue["by_priority"] is None:
        assert queue["note"].startswith(("per-priority depth", "the management API")), queue
    elif queue["note"] is None:
        assert queue["by_priority"] == {"user": 2, "batch": 3}
    else:
        assert "last statistics" in queue["note"]


async def test_status_reads_breakers_from_metrics_endpoints(
        engine: AsyncEngine, gapless_env: dict[str, str], breaker_endpoint: str) -> None:
    await build(engine)
    dead_port = free_port()
    result = run_gapless(["status", "--json", "--metrics-url", breaker_endpoint,
                          "--metrics-url", f"127.0.0.1:{dead_port}"], gapless_env)
    assert result.returncode == 0, result.stderr
    breakers = json.loads(result.stdout)["breakers"]
    assert breakers == [
        {"source": breaker_endpoint, "name": "worker", "state": "open"},
        {"source": f"http://127.0.0.1:{dead_port}/metrics", "name": None,
         "state": "unreachable"},
    ]


async def test_status_table_shows_the_numbers_within_80_columns(
        engine: AsyncEngine, gapless_env: dict[str, str], breaker_endpoint: str) -> None:
    expected = await build(engine)
    result = run_gapless(["status", "--metrics-url", breaker_endpoint],
                         {**gapless_env, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    acme = next(line for line in lines if line.lstrip().startswith("acme/ABC"))
    assert acme.split()[1:] == [expected["last_acme"], "3", "2", "2!", "1", acme.split()[-1]]
    assert "alarms (error!): acme/ABC: 1" in result.stdout
    assert any(line.split()[:3] == ["globex/GLX", expected["last_globex"], "1"]
               for line in lines)
    assert "dead letters" in result.stdout
    assert "breaker worker: open" in result.stdout


def test_status_watch_refreshes_until_interrupted(settings: Settings, gapless_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    """--watch with --json is a JSON Lines stream; the process keeps running until stopped.

    Its output goes to files, not pipes: a pipe the test stopped reading could fill and hold the
    process in a write, which is not what is tested; and its log is there to show if it hangs.
    """
    import signal
    import subprocess

    from tests.helpers import GAPLESS, ROOT, wait_until

    out_path, err_path = tmp_path / "status.jsonl", tmp_path / "status.log"

    def documents() -> list[dict[str, Any]]:
        text = out_path.read_text()
        return [json.loads(line) for line in text.splitlines()[:text.count("\n")]]

    def log_tail() -> str:
        return err_path.read_text()[-2000:]

    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([*GAPLESS, "status", "--watch", "--json", "--interval", "0.2"],
                                env=gapless_env, cwd=ROOT, stdout=out, stderr=err, text=True)
    try:
        wait_until(lambda: len(documents()) >= 3, 60, message="three status documents")
        assert all(doc["queue"]["name"] == settings.queue for doc in documents()[:3])
        proc.send_signal(signal.SIGINT)
        try:
            wait_until(lambda: proc.poll() is not None, 20, message="status --watch to stop")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log: {log_tail()!r}") from None
        assert proc.returncode == 0, log_tail()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
