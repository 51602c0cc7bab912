"""Routing before the seal, end to end (the worker in-process against real RabbitMQ, PostgreSQL
and the mock integrator over HTTP): the worker asks whether each customer is an e-Fatura user,
numbers each document in its channel's series with the right profile and alias, refuses a
message that contradicts the answer before any number, and waits — sealing nothing — while the
integrator cannot answer."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import HEADER_DEAD_REASON
from gapless.demo.samples import vkn
from gapless.issuing.routing import RecipientMemory
from gapless.settings import Settings
from gapless.worker import metrics
from gapless.worker.consumer import Worker
from tests.helpers import at_once, await_until, ledger, run_gapless
from tests.mock_client import MockIntegratorClient
from tests.ubl import assert_valid, field
from tests.worker_support import (
    all_in,
    counter,
    drain_dead,
    publish,
    routed_tenant,
    rows,
    running_worker,
    take_queue,
)
from tests.worker_support import (
    routed_message as message,
)


@pytest.fixture
async def routed(engine: AsyncEngine) -> None:
    """Tenant acme with an issuer profile, an e-Fatura series EFA and an e-Arşiv series EAR,
    both defaults, and a series ANY without routing."""
    await routed_tenant(engine)


@pytest.fixture
def worker_settings(settings: Settings, mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=2.0, breaker_reset_timeout_s=0.5)


async def documents(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text("""
            SELECT i.invoice_id, i.series, i.reserved_no, i.number, i.status, i.payload, d.body
              FROM invoices i
              LEFT JOIN invoice_documents d ON d.invoice_pk = i.id
                                           AND d.sha256 = i.document_sha256"""))
        return {row.invoice_id: row for row in result}


@pytest.mark.usefixtures("routed")
async def test_each_document_goes_to_its_channel_series_profile_and_alias(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    rng = random.Random(20)
    customers = [vkn(rng) for _ in range(12)]
    registered = {tax_id: [f"urn:mail:{n}pk@customer{n}.example"]
                  + ([f"urn:mail:{n}b@customer{n}.example"] if n % 3 == 0 else [])
                  for n, tax_id in enumerate(customers[:6])}
    mock_integrator.set_recipients(registered)
    messages = [message(f"r-{n}", customers[n % len(customers)]) for n in range(60)]
    # one message names the recipient's second alias
    second = next(t for t, aliases in registered.items() if len(aliases) == 2)
    messages.append(message("r-alias", second, customer={
        **message("x", second)["customer"], "alias": registered[second][1]}))
    async with running_worker(worker_settings, concurrency=8):
        await publish(worker_settings, *messages)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in messages},
                                         "ISSUED"), 90, message="every invoice ISSUED")
    stored = await documents(engine)
    ledger = {entry["number"]: entry for entry in mock_integrator.ledger()}
    for sent in messages:
        row = stored[sent["invoice_id"]]
        tax_id = sent["customer"]["tax_id"]
        body = bytes(row.body)
        assert_valid(body)
        if tax_id in registered:
            want_alias = sent["customer"].get("alias", registered[tax_id][0])
            assert (row.series, field(body, "cbc:ProfileID")) == ("EFA", "TEMELFATURA")
            assert row.payload["customer"]["alias"] == want_alias  # pinned with the number
            assert ledger[row.number]["alias"] == want_alias
            if sent["invoice_id"] == "r-alias":
                shown = json.loads(run_gapless(["invoice", "show", "r-alias", "--json"],
                                               integrated_env).stdout)
                assert (shown["channel"], shown["alias"]) == ("efatura", want_alias)
        else:
            assert (row.series, field(body, "cbc:ProfileID")) == ("EAR", "EARSIVFATURA")
            assert "alias" not in row.payload["customer"]
            assert ledger[row.number]["alias"] is None
    for series in ("EFA", "EAR"):  # both series gap-free
        numbers = sorted(r.reserved_no for r in stored.values() if r.series == series)
        assert numbers == list(range(1, len(numbers) + 1))
    audit = run_gapless(["audit", "--integrator"], integrated_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.usefixtures("routed")
async def test_a_registration_that_changes_is_followed_after_the_ttl(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    tax_id = "4840847211"
    settings = worker_settings.with_overrides(recipient_ttl_s=0.5)
    async with running_worker(settings):
        await publish(settings, message("t-1", tax_id))
        await await_until(lambda: all_in(engine, {"t-1"}, "ISSUED"), 30, message="t-1 ISSUED")
        mock_integrator.set_recipients({tax_id: ["urn:mail:defaultpk@new.example"]})
        await await_sql_age(engine, tax_id, 0.5)
        await publish(settings, message("t-2", tax_id))
        await await_until(lambda: all_in(engine, {"t-2"}, "ISSUED"), 30, message="t-2 ISSUED")
    stored = await documents(engine)
    assert (stored["t-1"].series, stored["t-2"].series) == ("EAR", "EFA")
    assert stored["t-2"].payload["customer"]["alias"] == "urn:mail:defaultpk@new.example"


@pytest.mark.usefixtures("routed")
async def test_a_numbered_invoice_sent_again_keeps_the_route_it_was_sealed_with(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    """A duplicate of an invoice numbered in e-Arşiv, arriving after its customer registered
    for e-Fatura and the cached answer went stale, is the same invoice: acked as final, never
    routed anew (that would name the EFA series and be refused as another series' invoice).
    Its seal in EFA finds the invoice numbered in EAR (a CONFLICT, nothing sealed), and the
    claim is taken again in EAR."""
    tax_id = "4840847211"
    settings = worker_settings.with_overrides(recipient_ttl_s=0.5)
    async with running_worker(settings, concurrency=1):
        await publish(settings, message("k-1", tax_id))
        await await_until(lambda: all_in(engine, {"k-1"}, "ISSUED"), 30, message="k-1 ISSUED")
        mock_integrator.set_recipients({tax_id: ["urn:mail:defaultpk@new.example"]})
        await await_sql_age(engine, tax_id, 0.5)
        # One delivery at a time, in order: k-2 issued means the duplicate was handled first.
        await publish(settings, message("k-1", tax_id), message("k-2", tax_id))
        await await_until(lambda: all_in(engine, {"k-2"}, "ISSUED"), 30, message="k-2 ISSUED")
    assert await drain_dead(settings, 0) == []
    stored = await documents(engine)
    assert set(stored) == {"k-1", "k-2"}
    assert (stored["k-1"].series, stored["k-1"].reserved_no) == ("EAR", 1)
    assert (stored["k-2"].series, stored["k-2"].reserved_no) == ("EFA", 1)
    assert [entry["invoice_id"] for entry in mock_integrator.ledger()].count("k-1") == 1


async def await_sql_age(engine: AsyncEngine, tax_id: str, ttl_s: float) -> None:
    """Wait until the cached answer for ``tax_id`` is older than ``ttl_s`` (by the database's
    clock, which the cache reads)."""
    async def stale() -> bool:
        async with engine.connect() as conn:
            return bool((await conn.execute(text(
                "SELECT checked_at < now() - make_interval(secs => :ttl) FROM recipients "
                "WHERE tax_id = :tax_id"), {"ttl": ttl_s, "tax_id": tax_id})).scalar_one())
    await await_until(stale, 10, message="the cached answer is stale")


@pytest.mark.usefixtures("routed")
async def test_nothing_is_sealed_while_the_recipient_check_is_down(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_recipients({"4840847211": ["urn:mail:defaultpk@a.example"]})
    mock_integrator.set_faults(down=True)
    messages = [message(f"d-{n}", "4840847211" if n % 2 else "5950193314") for n in range(10)]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *messages)
        await await_until(lambda: recipient_checks_refused(mock_integrator), 20,
                          message="the worker asked while the integrator was down")
        assert await counter(engine) == 0  # nothing sealed on a guess
        assert await rows(engine) == {}  # nor stored
        mock_integrator.set_faults(down=False)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in messages}, "ISSUED"),
                          60, message="everything issued once the check is back")
    assert len(mock_integrator.ledger()) == len(messages)


async def recipient_checks_refused(mock: MockIntegratorClient) -> bool:
    return int(mock.stats().get("down", 0)) >= 2


@pytest.mark.usefixtures("routed")
async def test_a_message_that_contradicts_the_answer_is_refused_before_any_number(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    user, other = "4840847211", "5950193314"
    mock_integrator.set_recipients({user: ["urn:mail:defaultpk@a.example"]})
    bad = [
        (message("c-earsiv-to-user", user, profile="EARSIVFATURA"), "profile: "),
        (message("c-efatura-to-other", other, profile="TICARIFATURA"), "profile: "),
        (message("c-series", other, series="EFA"), "series: "),
        (message("c-alias", user, customer={**message("x", user)["customer"],
                                            "alias": "urn:mail:someone@else.example"}),
         "customer.alias: "),
    ]
    good = [message("c-good", user, profile="TICARIFATURA"),
            message("c-any", other, series="ANY", profile="TICARIFATURA")]
    async with running_worker(worker_settings, concurrency=4):
        await publish(worker_settings, *[m for m, _ in bad], *good)
        dead = await drain_dead(worker_settings, len(bad))
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in good}, "ISSUED"),
                          30, message="the good ones ISSUED")
    reasons = {json.loads(m.body)["invoice_id"]: str((m.headers or {})[HEADER_DEAD_REASON])
               for m in dead}
    for sent, where in bad:
        assert reasons[sent["invoice_id"]].startswith(where), reasons
        assert user not in reasons[sent["invoice_id"]]
    assert set(await rows(engine)) == {"c-good", "c-any"}
    stored = await documents(engine)
    assert (stored["c-good"].series, stored["c-any"].series) == ("EFA", "ANY")
    # a series without routing is today's behaviour: the producer's profile, no check
    assert field(bytes(stored["c-any"].body), "cbc:ProfileID") == "TICARIFATURA"


@pytest.mark.usefixtures("routed")
async def test_a_registration_that_changes_after_the_check_is_corrected_under_load(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    # The cache says A and B are e-Fatura users and C is not; then the integrator's list
    # changes (A and B leave it, C joins): every document sent on the stale answer is refused
    # for its channel, voided naming its successor, and the successor issued in the other
    # channel's series.
    flipping = {"4840847211": "EFA", "5950193314": "EFA", "6060304417": "EAR"}
    steady = "7170415513"
    mock_integrator.set_recipients({"4840847211": ["urn:mail:apk@a.example"],
                                    "5950193314": ["urn:mail:bpk@b.example"],
                                    steady: ["urn:mail:spk@s.example"]})
    warm = [message(f"w-{n}", tax_id) for n, tax_id in enumerate([*flipping, steady])]
    async with running_worker(worker_settings, concurrency=8):
        await publish(worker_settings, *warm)
        await await_until(lambda: all_in(engine, {m["invoice_id"] for m in warm}, "ISSUED"),
                          30, message="the cache is warm")
        mock_integrator.set_recipients({"4840847211": [], "5950193314": [],
                                        "6060304417": ["urn:mail:cpk@c.example"]})
        load = [message(f"x-{n}", [*flipping, steady][n % 4]) for n in range(40)]
        await publish(worker_settings, *load)
        flipped = {m["invoice_id"] for m in load if m["customer"]["tax_id"] in flipping}
        await await_until(lambda: settled(engine, flipped), 60,
                          message="every invoice of a flipped customer issued or corrected")
    stored = await documents(engine)
    voided = {invoice_id for invoice_id in flipped if stored[invoice_id].status == "VOIDED"}
    assert voided  # the stale answers were refused and corrected (the first ones refresh it)
    for invoice_id in flipped:
        tax_id = stored[invoice_id].payload["customer"]["tax_id"]
        now = "EAR" if flipping[tax_id] == "EFA" else "EFA"
        live = stored[f"{invoice_id}~c1"] if invoice_id in voided else stored[invoice_id]
        assert (live.status, live.series) == ("ISSUED", now)
        assert field(bytes(live.body), "cbc:ProfileID") == (
            "EARSIVFATURA" if now == "EAR" else "TEMELFATURA")
        if invoice_id not in voided:
            continue
        assert stored[invoice_id].series == flipping[tax_id]  # sealed on the stale answer
        async with engine.connect() as conn:
            reason = (await conn.execute(text(
                "SELECT last_error FROM invoices WHERE invoice_id = :id"), {"id": invoice_id}
            )).scalar_one()
        assert reason.startswith("channel correction: ")
        assert live.number in reason
        assert f"{invoice_id}~c1" in reason
    steady_rows = [r for r in stored.values() if r.payload["customer"]["tax_id"] == steady]
    assert {r.status for r in steady_rows} == {"ISSUED"}  # the steady customer never noticed
    for series in ("EFA", "EAR"):  # every number accounted for, gap-free
        numbers = sorted(r.reserved_no for r in stored.values() if r.series == series)
        assert numbers == list(range(1, len(numbers) + 1))
    audit = run_gapless(["audit", "--integrator"], integrated_env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    show = run_gapless(["invoice", "show", sorted(voided)[0]], integrated_env)
    assert "channel correction" in show.stdout
    first = sorted(voided)[0]
    shown = json.loads(run_gapless(["invoice", "show", f"{first}~c1", "--json"],
                                   integrated_env).stdout)
    assert shown["channel"] == ("earsiv" if stored[first].series == "EFA" else "efatura")


async def settled(engine: AsyncEngine, invoice_ids: set[str]) -> bool:
    """Each invoice ISSUED, or VOIDED with its successor ISSUED."""
    current = await rows(engine)
    for invoice_id in invoice_ids:
        row = current.get(invoice_id)
        if row is None:
            return False
        if row.status == "VOIDED":
            successor = current.get(f"{invoice_id}~c1")
            if successor is None or successor.status != "ISSUED":
                return False
        elif row.status != "ISSUED":
            return False
    return True


@pytest.mark.usefixtures("routed")
async def test_a_correction_interrupted_by_a_crash_is_finished_by_the_redelivery(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    from gapless.issuing.correction import WRONG_CHANNEL_PREFIX
    from gapless.ledger.invoices import Draft, intake, mark_rejected

    tax_id = "4840847211"
    mock_integrator.set_recipients({tax_id: ["urn:mail:apk@a.example"]})
    async with running_worker(worker_settings):
        await publish(worker_settings, message("w-1", tax_id))
        await await_until(lambda: all_in(engine, {"w-1"}, "ISSUED"), 30, message="w-1 issued")
    # A worker sealed y-1 in EFA on the cached answer, was refused for its channel, recorded
    # the refusal — and died before correcting it; its delivery was never acked.
    sent = message("y-1", tax_id)
    routed_payload = {**sent, "series": "EFA", "profile": "TEMELFATURA",
                      "customer": {**sent["customer"], "alias": "urn:mail:apk@a.example"}}
    profile_version = 1
    claim = await intake(ledger(engine), Draft("y-1", "acme", "EFA", 1, routed_payload),
                         lease_s=300, lock_timeout_ms=5000, profile_version=profile_version)
    assert claim.sending is not None
    assert await mark_rejected(ledger(engine), claim.sending,
                               WRONG_CHANNEL_PREFIX + "recipient is not an e-Fatura user")
    mock_integrator.set_recipients({tax_id: []})
    async with running_worker(worker_settings):
        await publish(worker_settings, sent)  # the redelivery
        await await_until(lambda: all_in(engine, {"y-1~c1"}, "ISSUED"), 30,
                          message="the successor issued")
        await await_until(lambda: all_in(engine, {"y-1"}, "VOIDED"), 30,
                          message="y-1 voided")
    stored = await documents(engine)
    assert (stored["y-1"].series, stored["y-1~c1"].series) == ("EFA", "EAR")
    assert sorted(r.reserved_no for r in stored.values() if r.series == "EFA") == [1, 2]


@pytest.mark.usefixtures("routed")
async def test_recovery_corrects_what_its_resend_finds_refused_for_its_channel(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    from gapless.ledger.invoices import Draft, intake

    # z-1 was sealed in EFA on a registration that has ended since; its worker died before the
    # send, its delivery was acked by nobody and is gone (e.g. dead-lettered by an operator):
    # recovery's resend is the one refused, and recovery corrects it.
    tax_id = "4840847211"
    mock_integrator.set_recipients({tax_id: []})
    sent = message("z-1", tax_id)
    routed_payload = {**sent, "series": "EFA", "profile": "TEMELFATURA",
                      "customer": {**sent["customer"], "alias": "urn:mail:apk@a.example"}}
    claim = await intake(ledger(engine), Draft("z-1", "acme", "EFA", 1, routed_payload),
                         lease_s=0.01, lock_timeout_ms=5000, profile_version=1)
    assert claim.sending is not None
    result = run_gapless(["recovery", "--once", "--stuck-after", "0"], integrated_env)
    assert result.returncode == 0, result.stderr
    assert "rejected 1" in result.stdout
    assert "corrected the channel of 1" in result.stdout
    stored = await documents(engine)
    assert (stored["z-1"].status, stored["z-1~c1"].status) == ("VOIDED", "ISSUED")
    assert stored["z-1~c1"].series == "EAR"
    assert mock_integrator.ledger()[-1]["invoice_id"] == "z-1~c1"


@pytest.mark.usefixtures("routed")
async def test_a_refusal_the_fresh_answer_cannot_explain_stays_rejected_for_an_operator(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    # The cache remembers an alias the customer has given up; the registration itself did not
    # change, so there is no channel to correct: REJECTED, the mark gone, the reason says why.
    tax_id = "4840847211"
    mock_integrator.set_recipients({tax_id: ["urn:mail:new@a.example"]})
    async with engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO recipients (tax_id, registered, aliases) VALUES (:t, true, :a)"),
            {"t": tax_id, "a": ["urn:mail:old@a.example"]})
    async with running_worker(worker_settings):
        await publish(worker_settings, message("o-1", tax_id))
        await await_until(lambda: all_in(engine, {"o-1"}, "REJECTED"), 30,
                          message="o-1 rejected")
    current = await rows(engine)
    assert "o-1~c1" not in current
    assert current["o-1"].last_error.startswith("refused for its channel (alias is not")
    assert "not corrected: the integrator's fresh answer gives the same channel" in (
        current["o-1"].last_error)


@pytest.mark.usefixtures("routed")
async def test_refused_credentials_stop_consumption_and_reject_nothing(
        engine: AsyncEngine, worker_settings: Settings, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str]) -> None:
    # A configuration error (a revoked API key): the first invoice waits in ERROR with its
    # number, the worker stops taking messages (the rest wait in the queue, unsealed), nothing is
    # REJECTED; once the credentials work the worker resumes and recovery sends the first.
    mock_integrator.set_faults(unauthorized=True)
    messages = [message(f"k-{n}", "5950193314", series="ANY") for n in range(5)]
    settings = worker_settings.with_overrides(breaker_reset_timeout_s=0.3)
    async with running_worker(settings, concurrency=1):
        await publish(settings, *messages)
        await await_until(lambda: any_in(engine, "ERROR"), 20, message="the first in ERROR")
        await await_until(lambda: probed(mock_integrator), 20,
                          message="the paused worker probing")
        current = await rows(engine)
        assert {r.status for r in current.values()} <= {"ERROR", "RECEIVED"}
        assert await counter(engine) == 1  # the paused worker sealed nothing more
        mock_integrator.set_faults(unauthorized=False)
        sealed_first = {r.invoice_id for r in current.values() if r.status == "ERROR"}
        others = {m["invoice_id"] for m in messages} - sealed_first
        await await_until(lambda: all_in(engine, others, "ISSUED"), 30,
                          message="the worker resumed")
    await await_sql_due(engine)
    result = run_gapless(["recovery", "--once"], integrated_env)
    assert result.returncode == 0, result.stderr
    assert await all_in(engine, {m["invoice_id"] for m in messages}, "ISSUED")


async def any_in(engine: AsyncEngine, status: str) -> bool:
    return any(r.status == status for r in (await rows(engine)).values())


async def probed(mock: MockIntegratorClient) -> bool:
    return int(mock.stats().get("unauthorized", 0)) >= 2


async def await_sql_due(engine: AsyncEngine) -> None:
    async def due() -> bool:
        async with engine.connect() as conn:
            return bool((await conn.execute(text(
                "SELECT bool_and(next_attempt_at <= now()) FROM invoices "
                "WHERE status = 'ERROR'"))).scalar_one())
    await await_until(due, 30, message="the ERROR invoice due again")


# -- the answers a worker keeps in memory ---------------------------------------------------------


async def sql(engine: AsyncEngine, statement: str, **params: Any) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(statement), params)


async def silently(engine: AsyncEngine, statement: str, **params: Any) -> None:
    """Change the table with its triggers off (no change notice): what only a worker that serves
    from memory would not see."""
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL session_replication_role = replica"))
        await conn.execute(text(statement), params)


async def issue(engine: AsyncEngine, settings: Settings, tax_id: str, *ids: str) -> None:
    """Publish routed messages for ``tax_id`` and wait until each is ISSUED."""
    await publish(settings, *(message(invoice_id, tax_id) for invoice_id in ids))
    await await_until(lambda: all_in(engine, set(ids), "ISSUED"), 30,
                      message=f"{', '.join(ids)} ISSUED")


@contextlib.asynccontextmanager
async def remembering(engine: AsyncEngine, settings: Settings, prefix: str,
                      tax_id: str) -> AsyncIterator[tuple[Worker, RecipientMemory]]:
    """A worker (one delivery at a time) that keeps ``tax_id``'s answer in memory: the first
    message (``prefix``-0) asks the integrator and stores the answer, the next (``prefix``-1)
    reads it from the table and keeps it."""
    async with running_worker(settings, concurrency=1) as worker:
        notices, flow = worker.notices, worker._flow
        assert notices is not None
        assert flow is not None
        await await_until(at_once(lambda: notices.listening), 10, message="listening")
        assert metrics.RECIPIENT_MEMORY_LISTENING._value.get() == 1
        await issue(engine, settings, tax_id, f"{prefix}-0", f"{prefix}-1")
        memory = flow.recipients
        await await_until(at_once(lambda: memory.get("", tax_id) is not None), 10,
                          message="kept")
        yield worker, memory


@pytest.mark.usefixtures("routed")
async def test_a_worker_routes_on_the_answers_it_keeps_and_drops_one_the_table_says_changed(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    """The answer read once is kept in memory: a change made without a notice is not seen (the
    proof it is not read again per message); a notice — any writer's change, here a bare
    pg_notify — drops it at once, long before its TTL. (The first message asks the integrator
    and stores the answer; the next reads it from the table, and keeps it.)"""
    tax_id = "4840847211"
    answers = metrics.RECIPIENT_ANSWERS
    async with remembering(engine, worker_settings, "m", tax_id) as (_, memory):
        await silently(engine, "UPDATE recipients SET registered = true, "
                               "aliases = ARRAY['urn:mail:defaultpk@new.example'] "
                               "WHERE tax_id = :tax_id", tax_id=tax_id)
        before = {source: counter._value.get() for source, counter in answers.items()}
        await issue(engine, worker_settings, tax_id, "m-2")
        assert answers["memory"]._value.get() == before["memory"] + 1
        assert answers["table"]._value.get() == before["table"]
        mock_integrator.set_recipients({tax_id: ["urn:mail:defaultpk@new.example"]})
        await sql(engine, "SELECT pg_notify('gapless_recipients', E'\\t' || :tax_id)",
                  tax_id=tax_id)
        await await_until(at_once(lambda: memory.get("", tax_id) is None), 10, message="dropped")
        await issue(engine, worker_settings, tax_id, "m-3")
        assert answers["table"]._value.get() == before["table"] + 1
    stored = await documents(engine)
    assert [stored[f"m-{n}"].series for n in (1, 2, 3)] == ["EAR", "EAR", "EFA"]
    assert [entry["invoice_id"] for entry in mock_integrator.ledger()] == [
        "m-0", "m-1", "m-2", "m-3"]  # none refused, none corrected


@pytest.mark.usefixtures("routed")
async def test_an_operator_change_of_the_table_reaches_a_running_worker_by_its_trigger(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    tax_id = "4840847211"
    async with remembering(engine, worker_settings, "o", tax_id) as (_, memory):
        mock_integrator.set_recipients({tax_id: ["urn:mail:opk@op.example"]})
        await sql(engine, "UPDATE recipients SET registered = true, "
                          "aliases = ARRAY['urn:mail:opk@op.example'] WHERE tax_id = :tax_id",
                  tax_id=tax_id)
        await await_until(at_once(lambda: memory.get("", tax_id) is None), 10, message="dropped")
        await issue(engine, worker_settings, tax_id, "o-2")  # read from the table: kept again
        await await_until(at_once(lambda: memory.get("", tax_id) is not None), 10,
                          message="kept again")
        await sql(engine, "TRUNCATE recipients")
        await await_until(at_once(lambda: memory.get("", tax_id) is None), 10, message="dropped")
    stored = await documents(engine)
    assert [stored[f"o-{n}"].series for n in (1, 2)] == ["EAR", "EFA"]
    assert stored["o-2"].payload["customer"]["alias"] == "urn:mail:opk@op.example"


@pytest.mark.usefixtures("routed")
async def test_a_worker_whose_listener_is_cut_forgets_what_it_kept_and_listens_again(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    """While the listening connection is gone a change could pass unheard: everything kept is
    dropped, nothing is kept until the LISTEN is back."""
    tax_id = "4840847211"
    async with remembering(engine, worker_settings, "c", tax_id) as (worker, memory):
        notices = worker.notices
        assert notices is not None
        mock_integrator.set_recipients({tax_id: ["urn:mail:defaultpk@new.example"]})
        await silently(engine, "DELETE FROM recipients WHERE tax_id = :tax_id", tax_id=tax_id)
        await sql(engine, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'gapless-worker-listen' "
                          "AND datname = current_database()")
        await await_until(at_once(lambda: notices.sessions >= 2 and notices.listening), 20,
                          message="listening again")
        assert memory.get("", tax_id) is None
        await issue(engine, worker_settings, tax_id, "c-2")
    stored = await documents(engine)
    assert [stored[f"c-{n}"].series for n in (1, 2)] == ["EAR", "EFA"]


@pytest.mark.usefixtures("routed")
async def test_a_numbered_invoice_goes_on_while_the_recipient_check_is_down(
        engine: AsyncEngine, worker_settings: Settings,
        mock_integrator: MockIntegratorClient) -> None:
    """A duplicate of a numbered invoice needs no recipient answer: when the check cannot answer
    (its cached answer stale, the integrator down), the invoice's own route is read and the
    duplicate is settled by it (acked: final) instead of waiting for the integrator."""
    tax_id = "4840847211"
    settings = worker_settings.with_overrides(recipient_ttl_s=0.5)
    final = metrics.MESSAGES.labels(outcome="already_final")
    async with running_worker(settings, concurrency=1):
        await publish(settings, message("u-1", tax_id))
        await await_until(lambda: all_in(engine, {"u-1"}, "ISSUED"), 30, message="u-1 ISSUED")
        await await_sql_age(engine, tax_id, 0.5)
        mock_integrator.set_faults(down=True)
        before = final._value.get()
        await publish(settings, message("u-1", tax_id))
        await await_until(at_once(lambda: final._value.get() > before), 30,
                          message="the duplicate settled as final")
    assert await take_queue(settings) == []  # acked, not waiting
    assert await drain_dead(settings, 0) == []
