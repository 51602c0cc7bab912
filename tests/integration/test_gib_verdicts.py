"""GİB's verdict after acceptance, followed by recovery against real PostgreSQL and the mock
integrator over HTTP: accepted and refused recorded with their history events, pending asked
again later with a backoff and given up in the end, an adapter without ``status`` never asked,
no transaction open during the question (I5), and status and audit listing a refused document.

Invoices are issued the way the worker does (pinned, sent to the mock, ISSUED); the GİB verdicts
are set with the mock's admin switch (``PUT /admin/gib-status``). The loop runs in-process with
small settings (the policy's first wait and give-up age), and waits are conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.base import (
    GibState,
    Receipt,
    TransientIntegratorError,
    load_integrator,
)
from gapless.integrator.guard import GuardedIntegrator
from gapless.integrator.http import HttpIntegrator
from gapless.ledger.feed import events_after
from gapless.ledger.invoices import Sending, mark_issued
from gapless.ledger.verdicts import REFUSED_TODO, GibPolicy
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.helpers import await_until, ledger, run_gapless
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import audit, define_series, events, make_sending, post

#: Small settings: first question 0.2 s after acceptance, a day before giving up.
POLICY = GibPolicy(first_s=0.2, max_efatura_s=0.5, max_earsiv_s=2.0, give_up_s=86400.0,
                   batch=50, lease_s=30.0)
REFUSAL = "GİB: Alıcı etiketi (urn:mail:defaultpk@example.com) sistemde kayıtlı değil"


@pytest.fixture
def recovery_engine(engines: Callable[..., AsyncEngine]) -> AsyncEngine:
    return engines("recovery")


def guarded(settings: Settings, mock: MockIntegratorClient, adapter: Any = None
            ) -> GuardedIntegrator:
    at_mock = settings.with_overrides(integrator_url=mock.url, retry_attempts=1)
    return GuardedIntegrator(adapter(at_mock) if adapter else load_integrator(at_mock), at_mock,
                             name="test-gib")


@pytest.fixture
async def guard(settings: Settings,
                mock_integrator: MockIntegratorClient) -> AsyncIterator[GuardedIntegrator]:
    integrator = guarded(settings, mock_integrator)
    yield integrator
    await integrator.aclose()


def loop_for(engine: AsyncEngine, guard: Any, policy: GibPolicy = POLICY) -> RecoveryLoop:
    return RecoveryLoop(ledger(engine), guard, RecoveryOptions(interval_s=0.05, stuck_after_s=3600,
                                                       concurrency=4, gib=policy))


async def issue(engine: AsyncEngine, mock: MockIntegratorClient, ids: list[str]
                ) -> list[Sending]:
    """Invoices issued the way the worker does: pinned, accepted by the mock, ISSUED."""
    sent = await make_sending(engine, ids)
    for sending in sent:
        ref = post(mock, sending)
        assert await mark_issued(ledger(engine), sending.pk, Receipt(sending.tenant, sending.number,
                                                             sending.invoice_id, ref))
    return sent


async def gib_rows(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT invoice_id, status, number, gib_status, gib_detail, gib_checked_at, "
            "gib_next_check_at, issued_at FROM invoices"))).all()
    return {row.invoice_id: row for row in rows}


async def rounds_until(loop: RecoveryLoop, engine: AsyncEngine,
                       done: Callable[[dict[str, Any]], bool], timeout: float = 20.0,
                       message: str = "verdicts") -> dict[str, Any]:
    """Run recovery rounds until ``done(rows)``; the rows then."""

    async def answered() -> dict[str, Any] | None:
        await loop.run_round()
        rows = await gib_rows(engine)
        return rows if done(rows) else None

    found: dict[str, Any] = await await_until(answered, timeout, interval=0.05, message=message)
    return found


async def test_accepted_and_refused_verdicts_are_recorded_with_their_events(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    _, bad = await issue(engine, mock_integrator, ["inv-ok", "inv-refused"])
    mock_integrator.set_gib_status({bad.uuid: {"state": "refused", "detail": REFUSAL}})
    loop = loop_for(recovery_engine, guard)

    rows = await rounds_until(loop, engine, lambda rows: all(
        row.gib_status in ("accepted", "refused") for row in rows.values()))

    ok, refused = rows["inv-ok"], rows["inv-refused"]
    assert (ok.status, ok.gib_status, ok.gib_detail, ok.gib_next_check_at) == (
        "ISSUED", "accepted", "accepted by GİB (mock)", None)
    # A refusal after acceptance leaves the invoice ISSUED: its number stays accounted for.
    assert (refused.status, refused.number, refused.gib_status, refused.gib_detail,
            refused.gib_next_check_at) == ("ISSUED", bad.number, "refused", REFUSAL, None)
    assert ok.gib_checked_at >= ok.issued_at
    for invoice_id, kind, detail in (("inv-ok", "gib_accepted", "accepted by GİB (mock)"),
                                     ("inv-refused", "gib_refused", REFUSAL)):
        history = await events(engine, invoice_id)
        assert [e.kind for e in history] == ["received", "reserved", "sending", "issued", kind]
        last = history[-1]
        assert (last.from_status, last.to_status, last.actor, last.detail) == (
            "ISSUED", "ISSUED", "recovery", detail)

    # Final: never asked again.
    asked = mock_integrator.stats()["gib_status_checks"]
    for _ in range(3):
        summary = await loop.run_round()
        assert summary.verdicts.claimed == 0
    assert mock_integrator.stats()["gib_status_checks"] == asked == 2

    # The verdicts are in the feed, in their place after the invoices' own events.
    feed = await events_after(ledger(engine), 0, 500)
    assert [(e.invoice_id, e.kind) for e in feed if e.kind.startswith("gib_")] in (
        [("inv-ok", "gib_accepted"), ("inv-refused", "gib_refused")],
        [("inv-refused", "gib_refused"), ("inv-ok", "gib_accepted")])
    assert [e.sequence_id for e in feed] == list(range(1, len(feed) + 1))


async def test_pending_is_asked_again_later_with_a_growing_wait_until_final(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    [sending] = await issue(engine, mock_integrator, ["inv-wait"])
    mock_integrator.set_gib_status({sending.uuid: {"state": "pending",
                                                   "detail": "GİB yanıtı bekleniyor"}})
    policy = replace(POLICY, first_s=0.3, max_efatura_s=1.2)
    loop = loop_for(recovery_engine, guard, policy)

    first = (await rounds_until(loop, engine,
                                lambda rows: rows["inv-wait"].gib_status == "pending"))["inv-wait"]
    assert first.gib_detail == "GİB yanıtı bekleniyor"
    waits = [(first.gib_next_check_at - first.gib_checked_at).total_seconds()]
    age = (first.gib_checked_at - first.issued_at).total_seconds()
    assert 0.8 * max(policy.first_s, age) - 0.05 <= waits[0] <= max(policy.first_s, age) + 0.05
    asked = mock_integrator.stats()["gib_status_checks"]
    assert asked == 1
    # Not due yet: a round now asks nothing (and writes no event: pending is not a verdict).
    assert (await loop.run_round()).verdicts.claimed == 0
    assert mock_integrator.stats()["gib_status_checks"] == asked

    # Asked again when due, each wait as long as the document's age (capped for e-Fatura).
    seen = first.gib_checked_at
    for _ in range(3):
        row = (await rounds_until(loop, engine, lambda rows, seen=seen: rows[
            "inv-wait"].gib_checked_at > seen, message="the next question"))["inv-wait"]
        assert row.gib_checked_at >= seen + timedelta(seconds=waits[-1] - 0.05)  # not before
        seen = row.gib_checked_at
        waits.append((row.gib_next_check_at - row.gib_checked_at).total_seconds())
    assert waits[1] > waits[0]
    assert all(wait <= policy.max_efatura_s + 0.01 for wait in waits)
    assert mock_integrator.stats()["gib_status_checks"] == 4
    assert [e.kind for e in await events(engine, "inv-wait")][-1] == "issued"

    mock_integrator.set_gib_status({sending.uuid: {"state": "accepted"}})
    done = await rounds_until(loop, engine, lambda rows: rows["inv-wait"].gib_status
                              == "accepted", message="the final verdict")
    assert done["inv-wait"].gib_next_check_at is None
    assert [e.kind for e in await events(engine, "inv-wait")][-1] == "gib_accepted"


async def test_e_arsiv_waits_are_capped_by_its_own_setting(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, ["inv-fatura", "inv-arsiv"])
    async with engine.begin() as conn:
        # The profile pinned in the payload says e-Arşiv (a series of channel earsiv says it too).
        await conn.execute(text(
            "UPDATE invoices SET payload = payload || '{\"profile\": \"EARSIVFATURA\"}', "
            "issued_at = issued_at - interval '1 hour' WHERE invoice_id = 'inv-arsiv'"))
        await conn.execute(text(
            "UPDATE invoices SET issued_at = issued_at - interval '1 hour' "
            "WHERE invoice_id = 'inv-fatura'"))
    mock_integrator.set_gib_status({"*": {"state": "pending"}})
    policy = replace(POLICY, max_efatura_s=100.0, max_earsiv_s=1000.0)

    rows = await rounds_until(loop_for(recovery_engine, guard, policy), engine, lambda rows: all(
        row.gib_status == "pending" for row in rows.values()))

    def wait(invoice_id: str) -> float:
        row = rows[invoice_id]
        return float((row.gib_next_check_at - row.gib_checked_at).total_seconds())

    assert 80 - 0.1 <= wait("inv-fatura") <= 100 + 0.1
    assert 800 - 0.1 <= wait("inv-arsiv") <= 1000 + 0.1
    assert mock_integrator.stats()["gib_status_checks"] == 2


async def test_still_pending_at_the_give_up_age_is_given_up_and_says_so(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient, gapless_env: dict[str, str]) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, ["inv-never"])
    mock_integrator.set_gib_status({"*": {"state": "pending", "detail": "unknown"}})
    policy = replace(POLICY, first_s=0.1, give_up_s=1.0)
    loop = loop_for(recovery_engine, guard, policy)

    rows = await rounds_until(loop, engine, lambda rows: rows["inv-never"].gib_status
                              == "pending" and rows["inv-never"].gib_next_check_at is None,
                              message="giving up")

    row = rows["inv-never"]
    assert row.status == "ISSUED"
    assert row.gib_detail == "no final verdict from GİB after 1s; last answer: unknown"
    history = await events(engine, "inv-never")
    assert [e.kind for e in history].count("gib_unresolved") == 1
    assert (history[-1].kind, history[-1].detail) == ("gib_unresolved", row.gib_detail)
    asked = mock_integrator.stats()["gib_status_checks"]
    assert (await loop.run_round()).verdicts.claimed == 0  # never asked again
    assert mock_integrator.stats()["gib_status_checks"] == asked

    code, report = audit(gapless_env)
    assert (code, report["violations"]) == (0, [])
    assert [(f["kind"], f["invoice_id"]) for f in report["findings"]] == [
        ("gib_unresolved", "inv-never")]


class WithoutStatus:
    """An adapter of the whole interface but ``status``: its documents are not followed."""

    def __init__(self, settings: Settings) -> None:
        self._http = HttpIntegrator(settings)
        self.send, self.lookup = self._http.send, self._http.lookup
        self.lookup_uuid, self.recipient = self._http.lookup_uuid, self._http.recipient

    async def aclose(self) -> None:
        await self._http.aclose()


class StatusSwitchedOff(HttpIntegrator):
    """An adapter that has ``status`` but says it is not to be followed."""

    follows_gib_status = False


@pytest.mark.parametrize("adapter", [WithoutStatus, StatusSwitchedOff])
async def test_an_adapter_without_status_is_not_polled(
        engine: AsyncEngine, recovery_engine: AsyncEngine, settings: Settings,
        mock_integrator: MockIntegratorClient, adapter: Any) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, ["inv-a", "inv-b"])
    unpolled = guarded(settings, mock_integrator, adapter)
    try:
        assert unpolled.follows_gib_status is False
        loop = loop_for(recovery_engine, unpolled)
        for _ in range(3):
            await asyncio.sleep(POLICY.first_s)  # the first question would be due by now
            summary = await loop.run_round()
            assert summary.verdicts.claimed == 0
            assert "GİB" not in summary.line()
        with pytest.raises(TypeError, match="does not answer GİB's status"):
            await unpolled.status("acme", "any")
    finally:
        await unpolled.aclose()
    rows = await gib_rows(engine)
    assert {(row.gib_status, row.gib_next_check_at) for row in rows.values()} == {(None, None)}
    assert mock_integrator.stats()["gib_status_checks"] == 0


async def test_no_transaction_is_open_while_the_integrator_answers(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, [f"inv-{n}" for n in range(4)])
    mock_integrator.set_faults(latency_ms=[700, 700])
    loop = loop_for(recovery_engine, guard, replace(POLICY, first_s=0.01))
    await asyncio.sleep(0.02)  # past the first wait of 0.01 s
    round_ = asyncio.create_task(loop.run_round())
    try:
        # In flight: the claim (gib_next_check_at set on all four) has committed and no answer
        # has been recorded yet (each takes 700 ms): a transaction open now would be one held
        # across the questions, not an answer's own short write.
        async def in_flight() -> bool:
            async with engine.connect() as conn:
                claimed = (await conn.execute(text(
                    "SELECT count(*) FROM invoices WHERE gib_next_check_at IS NOT NULL"))
                ).scalar_one()
            return int(claimed) == 4

        await await_until(in_flight, 10, message="questions in flight")
        async with engine.connect() as conn:
            open_transactions = (await conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'gapless-recovery' AND xact_start IS NOT NULL"))
            ).scalar_one()
        async with engine.connect() as conn:
            answered = (await conn.execute(text(
                "SELECT count(*) FROM invoices WHERE gib_checked_at IS NOT NULL"))).scalar_one()
        assert answered == 0  # still waiting for the answers
        assert open_transactions == 0  # I5: the claim committed before the questions
    finally:
        summary = await round_
    assert summary.verdicts.results["accepted"] == 4


async def test_status_and_audit_list_a_refused_document_with_what_to_do(
        engine: AsyncEngine, recovery_engine: AsyncEngine, guard: GuardedIntegrator,
        mock_integrator: MockIntegratorClient, integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    _, bad = await issue(engine, mock_integrator, ["inv-ok", "inv-refused"])
    mock_integrator.set_gib_status({bad.uuid: {"state": "refused", "detail": REFUSAL}})
    await rounds_until(loop_for(recovery_engine, guard), engine, lambda rows: all(
        row.gib_status in ("accepted", "refused") for row in rows.values()))

    result = run_gapless(["status", "--json"], integrated_env)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    [series] = shown["series"]
    assert (series["issued"], series["gib_refused"], series["gib_pending"],
            series["gib_unresolved"]) == (2, 1, 0, 0)
    [refusal] = shown["gib_refused"]
    assert {key: refusal[key] for key in ("tenant", "series", "number", "invoice_id", "detail",
                                          "todo")} == {
        "tenant": "acme", "series": "ABC", "number": bad.number, "invoice_id": "inv-refused",
        "detail": REFUSAL, "todo": REFUSED_TODO}
    assert refusal["checked_at"]

    table = run_gapless(["status"], {**integrated_env, "COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert "GİB after acceptance: 1 refused, 0 pending" in table.stdout
    assert f"{bad.number}  inv-refused:" in table.stdout
    assert "issue a new invoice" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80

    # Not a violation of I1–I7: the exit code stays 0, the finding says what to do.
    code, report = audit(integrated_env, "--integrator")
    assert (code, report["ok"], report["violations"]) == (0, True, [])
    [finding] = report["findings"]
    assert {key: finding[key] for key in ("kind", "number", "invoice_id", "detail",
                                          "todo")} == {
        "kind": "gib_refused", "number": bad.number, "invoice_id": "inv-refused",
        "detail": REFUSAL, "todo": REFUSED_TODO}
    printed = run_gapless(["audit"], integrated_env)
    assert printed.returncode == 0, printed.stderr
    assert "findings, not violations (1)" in printed.stdout
    assert "what to do (gib_refused): issue a new invoice" in printed.stdout
    assert "audit: clean" in printed.stdout


async def test_gapless_recovery_once_follows_the_verdicts_with_its_settings(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    await define_series(engine)
    _, bad = await issue(engine, mock_integrator, ["inv-ok", "inv-refused"])
    mock_integrator.set_gib_status({bad.uuid: {"state": "refused", "detail": REFUSAL}})
    env = {**integrated_env, "GAPLESS_GIB_POLL_FIRST_S": "0.01"}

    result = run_gapless(["recovery", "--once"], env)

    assert result.returncode == 0, result.stderr
    assert "claimed 0 orphan(s)" in result.stdout, result.stdout
    assert "GİB verdicts: accepted 1, refused 1, pending 0" in result.stdout, result.stdout
    rows = await gib_rows(engine)
    assert {k: r.gib_status for k, r in rows.items()} == {"inv-ok": "accepted",
                                                          "inv-refused": "refused"}
    # The default first wait is a minute: a document accepted just now is not asked yet.
    await issue(engine, mock_integrator, ["inv-new"])
    again = run_gapless(["recovery", "--once"], integrated_env)
    assert again.returncode == 0, again.stderr
    assert "GİB" not in again.stdout
    assert (await gib_rows(engine))["inv-new"].gib_status is None


async def test_the_http_adapter_answers_gib_status_in_gaplesss_words(
        engine: AsyncEngine, settings: Settings, mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    ok, bad = await issue(engine, mock_integrator, ["inv-ok", "inv-refused"])
    mock_integrator.set_gib_status({bad.uuid: {"state": "refused", "detail": REFUSAL}})
    adapter = HttpIntegrator(settings.with_overrides(integrator_url=mock_integrator.url))
    try:
        accepted = await adapter.status("acme", ok.uuid)
        refused = await adapter.status("acme", bad.uuid)
        assert accepted is not None
        assert refused is not None
        assert (accepted.state, accepted.final, accepted.accepted) == (
            GibState.ACCEPTED, True, True)
        assert (refused.state, refused.detail, refused.accepted) == (
            GibState.REFUSED, REFUSAL, False)
        assert await adapter.status("acme", "7f8a9b1c-0000-4000-8000-000000000000") is None
        mock_integrator.set_faults(down=True)
        with pytest.raises(TransientIntegratorError, match="GİB status of UUID"):
            await adapter.status("acme", ok.uuid)
    finally:
        await adapter.aclose()


async def test_an_open_breaker_puts_questions_back_and_a_failed_one_waits_for_its_lease(
        engine: AsyncEngine, recovery_engine: AsyncEngine, settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    await define_series(engine)
    await issue(engine, mock_integrator, [f"inv-{n}" for n in range(4)])
    mock_integrator.set_faults(down=True)
    at_mock = settings.with_overrides(integrator_url=mock_integrator.url, retry_attempts=1,
                                      breaker_fail_max=2, breaker_reset_timeout_s=60)
    breaker = GuardedIntegrator(load_integrator(at_mock), at_mock, name="test-gib-breaker")
    try:
        loop = RecoveryLoop(ledger(recovery_engine), breaker, RecoveryOptions(
            stuck_after_s=3600, concurrency=1, gib=replace(POLICY, first_s=0.01)))
        await asyncio.sleep(0.02)  # past the first wait of 0.01 s
        summary = await loop.run_round()
        assert breaker.state == "open"
    finally:
        await breaker.aclose()

    assert (summary.verdicts.results["failed"], summary.verdicts.results["released"]) == (2, 2)
    rows = (await gib_rows(engine)).values()
    # Two were asked and failed: held until their lease runs out (asked again then). Two were
    # never asked (the breaker opened): put back exactly as they were, never asked yet.
    leased = [row for row in rows if row.gib_next_check_at is not None]
    assert len(leased) == 2
    assert all(row.gib_next_check_at > row.issued_at + timedelta(seconds=25) for row in leased)
    assert {row.gib_status for row in rows} == {None}
    for row in rows:
        assert [e.kind for e in await events(engine, row.invoice_id)][-1] == "issued"
