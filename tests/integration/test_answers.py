"""The receiver's answer, learnt by recovery's questions (real PostgreSQL, RabbitMQ and the mock
integrator over HTTP): documents are issued by a real worker; the receivers answer at the mock
(``PUT /admin/answers``); recovery rounds (in-process, small policy) record each answer once, with
its history and feed event, keep asking after GİB's verdict only documents that may be answered,
record ``unanswered`` once the window closes, and never change a status or a number."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.base import load_integrator
from gapless.integrator.guard import GuardedIntegrator
from gapless.ledger.feed import events_after
from gapless.ledger.verdicts import GibPolicy
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until, ledger, run_gapless
from tests.integration.test_api import new_token
from tests.integration.test_despatch_flow import note, tenant  # noqa: F401 (a fixture)
from tests.integration.test_routing import message
from tests.mock_client import MockIntegratorClient
from tests.worker_support import all_in, publish, running_worker

USER = "4840847211"
#: First question 0.2 s after acceptance; windows long enough for the test unless shortened.
POLICY = GibPolicy(first_s=0.2, max_efatura_s=0.5, max_earsiv_s=0.5, give_up_s=86400.0,
                   batch=50, lease_s=30.0, answer_window_despatch_s=3600.0,
                   answer_window_invoice_s=3600.0, answer_poll_max_s=0.3)
LINES = [{"line": 1, "received": "10", "short": "2", "rejected": "0", "reason": None}]


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=2.0, breaker_reset_timeout_s=0.5)


@pytest.fixture
async def guard(worker_settings: Settings) -> AsyncIterator[GuardedIntegrator]:
    at_mock = worker_settings.with_overrides(retry_attempts=1)
    integrator = GuardedIntegrator(load_integrator(at_mock), at_mock, name="test-answers")
    yield integrator
    await integrator.aclose()


def loop_for(engine: AsyncEngine, guard: GuardedIntegrator,
             policy: GibPolicy = POLICY) -> RecoveryLoop:
    return RecoveryLoop(ledger(engine), guard, RecoveryOptions(
        interval_s=0.05, stuck_after_s=3600, concurrency=4, gib=policy))


async def rows(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = (await conn.execute(text(
            "SELECT invoice_id, status, number, reserved_no, uuid, gib_status, "
            "gib_next_check_at, answer, answer_status FROM invoices"))).all()
    return {row.invoice_id: row for row in found}


async def kinds(engine: AsyncEngine, invoice_id: str) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(
            "SELECT kind FROM invoice_events WHERE invoice_id = :id ORDER BY id"),
            {"id": invoice_id})).scalars())


async def rounds_until(loop: RecoveryLoop, engine: AsyncEngine,
                       done: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        await loop.run_round()
        found = await rows(engine)
        return found if done(found) else None

    result: dict[str, Any] = await await_until(reached, 30, interval=0.05, message=what)
    return result


@pytest.mark.usefixtures("tenant")
async def test_answers_are_recorded_once_shown_and_never_change_a_number(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        guard: GuardedIntegrator, integrated_env: dict[str, str],
        api_servers: ApiServers) -> None:
    mock_integrator.set_recipients({USER: {"invoice": ["urn:mail:defaultpk@u.example"],
                                           "despatch": ["urn:mail:irsaliyepk@u.example"]}})
    sent = [note("a-note", USER), note("a-silent", USER),
            message("a-ticari", USER, profile="TICARIFATURA"),
            message("a-temel", USER, profile="TEMELFATURA")]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *sent)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in sent}, "ISSUED"),
                          60, message="every document ISSUED")
    before = await rows(engine)
    mock_integrator.set_answers({
        str(before["a-note"].uuid): {"code": "KISMIKABUL", "lines": LINES},
        str(before["a-ticari"].uuid): {"code": "RED"}})
    loop = loop_for(engine, guard)

    after = await rounds_until(loop, engine, lambda found: (
        found["a-note"].answer_status == found["a-ticari"].answer_status == "answered"
        and found["a-temel"].gib_status == "accepted"), "the answers recorded")

    answered = after["a-note"].answer
    assert (answered["code"], answered["lines"]) == ("KISMIKABUL", LINES)
    assert after["a-ticari"].answer["code"] == "RED"
    assert "lines" not in after["a-ticari"].answer  # an invoice's answer has no lines
    # nobody answers a TEMELFATURA: no question after its final verdict
    assert (after["a-temel"].answer_status, after["a-temel"].gib_next_check_at) == (None, None)
    # the silent note is still asked about, its verdict final
    assert after["a-silent"].gib_status == "accepted"
    assert after["a-silent"].gib_next_check_at is not None
    assert after["a-silent"].answer_status is None

    # more rounds change nothing recorded: one verdict event, one answer event each
    for _ in range(5):
        await loop.run_round()
    # the window of a note closes: unanswered, once, and the questions end
    closed = loop_for(engine, guard, GibPolicy(**{**POLICY.__dict__,
                                                  "answer_window_despatch_s": 0.1}))
    final = await rounds_until(closed, engine, lambda found: (
        found["a-silent"].answer_status == "unanswered"), "the silent note unanswered")
    for _ in range(3):
        await closed.run_round()
    final = await rows(engine)
    assert final["a-silent"].gib_next_check_at is None
    history = await kinds(engine, "a-note")
    assert history[-2:] == ["gib_accepted", "answered"]
    assert (history.count("gib_accepted"), history.count("answered")) == (1, 1)
    assert (await kinds(engine, "a-silent"))[-2:] == ["gib_accepted", "unanswered"]
    assert (await kinds(engine, "a-temel"))[-1] == "gib_accepted"
    assert (await kinds(engine, "a-temel")).count("gib_accepted") == 1
    for invoice_id, row in final.items():  # an answer never changes a status or a number
        assert (row.status, row.number, row.reserved_no) == (
            "ISSUED", before[invoice_id].number, before[invoice_id].reserved_no)

    # the feed carries the answer's event
    feed = await events_after(ledger(engine), 0, limit=500)
    assert sorted((e.invoice_id, e.detail) for e in feed if e.kind == "answered") == [
        ("a-note", "KISMIKABUL"), ("a-ticari", "RED")]

    # shown: invoice show --json, the API, gapless status
    shown = json.loads(run_gapless(["invoice", "show", "a-note", "--json"],
                                   integrated_env).stdout)
    assert shown["answer"]["code"] == "KISMIKABUL"
    assert shown["answer"]["lines"] == LINES
    listed = run_gapless(["invoice", "list", "--answer", "RED", "--json"], integrated_env)
    assert [item["invoice_id"] for item in json.loads(listed.stdout)] == ["a-ticari"]
    token = new_token()
    url, _ = api_servers.start(token)
    async with httpx.AsyncClient(timeout=15) as http:
        got = (await http.get(f"{url}/v1/invoices/a-note",
                              headers={"Authorization": f"Bearer {token}"})).json()
        assert (got["document"], got["answer"]["code"], got["answer"]["lines"]) == (
            "despatch", "KISMIKABUL", LINES)
        plain = (await http.get(f"{url}/v1/invoices/a-temel",
                                headers={"Authorization": f"Bearer {token}"})).json()
        assert (plain["document"], plain["answer"]) == ("invoice", None)
    status = run_gapless(["status"], integrated_env)
    assert "a-ticari" in status.stdout
    assert "RED" in status.stdout
