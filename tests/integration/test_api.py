"""The HTTP API as a real ``gapless api`` process over real HTTP, against real PostgreSQL and
RabbitMQ: issuing, invoice status, authentication, health and metrics.

The feed endpoint has its own module (test_api_feed.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aio_pika
import httpx
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.api import parse_tokens
from gapless.api.app import CHECK_IDLE_S
from gapless.errors import ConfigurationError
from gapless.integrator.base import Receipt
from gapless.ledger.invoices import Draft, claim_for_sending, mark_issued, upsert_draft
from gapless.ledger.series import add_series
from gapless.message import MAX_BODY_BYTES
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import TcpProxy, await_until, free_port, ledger, run_gapless, today
from tests.worker_support import take_queue


def invoice_message(invoice_id: str, tenant: str = "acme", series: str = "ABC",
                    **extra: Any) -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": tenant, "series": series, "priority": "user",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}], **extra}


async def define_series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))


@dataclass
class Api:
    url: str
    admin: str   # every tenant
    acme: str    # scoped to acme
    globex: str  # scoped to globex

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def new_token() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture
async def api(api_servers: ApiServers, engine: AsyncEngine) -> Api:
    await define_series(engine)
    tokens = Api("", new_token(), new_token(), new_token())
    url, _ = api_servers.start(f"{tokens.admin}, acme:{tokens.acme},globex:{tokens.globex}")
    tokens.url = url
    return tokens


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=15) as client:
        yield client


async def issued_invoice(engine: AsyncEngine, invoice_id: str, tenant: str = "acme",
                         series: str = "ABC") -> str:
    """An invoice taken through the real domain operations to ISSUED; returns its number."""
    await upsert_draft(ledger(engine), Draft(invoice_id, tenant, series, 4,
                                     invoice_message(invoice_id, tenant, series)))
    claim = await claim_for_sending(ledger(engine), invoice_id, tenant=tenant, lease_s=60,
                                    lock_timeout_ms=5000)
    assert claim.sending is not None
    receipt = Receipt(tenant=tenant, number=claim.sending.number, invoice_id=invoice_id,
                      ref="REF-1")
    assert await mark_issued(ledger(engine), claim.sending.pk, receipt)
    return claim.sending.number


# ------------------------------------------------------------------------------ token format

def test_token_setting_format() -> None:
    tokens = parse_tokens(" aaaaaaaaaaaaaaaa , acme:bbbbbbbbbbbbbbbb,,*:cc:cccccccccccccc ")
    assert [(t.secret.decode(), t.tenant, t.index) for t in tokens] == [
        ("aaaaaaaaaaaaaaaa", None, 1), ("bbbbbbbbbbbbbbbb", "acme", 2),
        ("cc:cccccccccccccc", None, 4)]
    assert parse_tokens("") == ()


@pytest.mark.parametrize(("spec", "problem"), [
    ("short-token", "at least 16"),
    ("acme:short", "at least 16"),
    ("bad tenant!:bbbbbbbbbbbbbbbb", "tenant name"),
    ("aaaaaaaaaaaaaaaa,acme:aaaaaaaaaaaaaaaa", "listed twice"),
    ("aaaaaaaa aaaaaaaa", "without spaces"),
])
def test_bad_token_settings_are_refused_without_echoing_the_token(spec: str,
                                                                  problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as caught:
        parse_tokens(spec)
    secret = spec.rsplit(":", 1)[-1].rsplit(",", maxsplit=1)[-1]
    assert secret not in str(caught.value)


# ------------------------------------------------------------------------------ start-up

def test_without_tokens_the_api_refuses_to_start(gapless_env: dict[str, str]) -> None:
    result = run_gapless(["api", "--port", str(free_port())], {**gapless_env,
                                                                "GAPLESS_API_TOKEN": ""})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "GAPLESS_API_TOKEN is empty" in lines[0]
    assert "--insecure-no-auth" in lines[0]


def test_tokens_and_insecure_flag_together_are_refused(gapless_env: dict[str, str]) -> None:
    token = new_token()
    result = run_gapless(["api", "--port", str(free_port()), "--insecure-no-auth"],
                         {**gapless_env, "GAPLESS_API_TOKEN": token})
    assert result.returncode == 1
    assert "choose one" in result.stderr
    assert token not in result.stderr + result.stdout


def test_unreachable_database_is_one_line_and_exit_1(gapless_env: dict[str, str]) -> None:
    env = {**gapless_env, "GAPLESS_API_TOKEN": new_token(),
           "GAPLESS_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/none"}
    result = run_gapless(["api", "--port", str(free_port())], env, timeout=60)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cannot reach the database" in result.stderr


async def test_insecure_no_auth_serves_everyone(api_servers: ApiServers,
                                                http: httpx.AsyncClient) -> None:
    url, _ = api_servers.start("", extra_args=("--insecure-no-auth",))
    response = await http.get(f"{url}/v1/events")
    assert response.status_code == 200
    assert response.json()["results"] == []


# ------------------------------------------------------------------------------ authentication

@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/events"), ("GET", "/v1/invoices/inv-1"), ("POST", "/v1/invoices")])
async def test_no_or_invalid_token_is_401_with_a_bearer_challenge(
        api: Api, http: httpx.AsyncClient, method: str, path: str) -> None:
    body = json.dumps(invoice_message("inv-1")).encode()
    headers = {"Content-Type": "application/json"}
    missing = await http.request(method, api.url + path, content=body, headers=headers)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = await http.request(method, api.url + path, content=body,
                               headers={**headers, **api.headers(new_token())})
    assert wrong.status_code == 401
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
    basic = await http.request(method, api.url + path, content=body,
                               headers={**headers, "Authorization": "Basic YTpi"})
    assert basic.status_code == 401


async def test_another_tenants_invoice_is_404_exactly_like_a_missing_one(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    await issued_invoice(engine, "acme-1")
    own = await http.get(f"{api.url}/v1/invoices/acme-1", headers=api.headers(api.acme))
    assert own.status_code == 200
    foreign = await http.get(f"{api.url}/v1/invoices/acme-1", headers=api.headers(api.globex))
    missing = await http.get(f"{api.url}/v1/invoices/nothing",
                             headers=api.headers(api.globex))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert foreign.headers.get("content-length") == missing.headers.get("content-length")
    # Naming the other tenant changes nothing: the same 404.
    named = await http.get(f"{api.url}/v1/invoices/acme-1?tenant=acme",
                           headers=api.headers(api.globex))
    assert (named.status_code, named.content) == (404, missing.content)


async def test_an_invoice_id_two_tenants_hold_is_each_ones_own(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    """invoice_id is unique per tenant: each scoped token sees its own tenant's invoice of the
    id, an all-tenant token names the tenant (409 naming both without it)."""
    acme_number = await issued_invoice(engine, "same-1")
    globex_number = await issued_invoice(engine, "same-1", "globex", "GLX")

    async def positioned() -> bool:
        """Every event of both has its feed position (``sequence_id`` is assigned after the
        commit, and the two reads below must see the same history)."""
        async with engine.connect() as conn:
            waiting = (await conn.execute(text(
                "SELECT count(*) FROM invoice_events WHERE invoice_id = 'same-1' "
                "AND sequence_id IS NULL"))).scalar_one()
        return waiting == 0

    await await_until(positioned, 30, message="the events' feed positions")
    for token, tenant, number in ((api.acme, "acme", acme_number),
                                  (api.globex, "globex", globex_number)):
        own = await http.get(f"{api.url}/v1/invoices/same-1", headers=api.headers(token))
        assert own.status_code == 200
        assert (own.json()["tenant"], own.json()["number"]) == (tenant, number)
        other = "globex" if tenant == "acme" else "acme"
        assert other not in own.text
        named = await http.get(f"{api.url}/v1/invoices/same-1?tenant={tenant}",
                               headers=api.headers(token))
        assert named.json() == own.json()
    ambiguous = await http.get(f"{api.url}/v1/invoices/same-1", headers=api.headers(api.admin))
    assert ambiguous.status_code == 409
    assert ambiguous.json()["detail"] == ("invoice_id is held by tenants acme, globex; name one "
                                          "with ?tenant=")
    chosen = await http.get(f"{api.url}/v1/invoices/same-1?tenant=globex",
                            headers=api.headers(api.admin))
    assert (chosen.status_code, chosen.json()["number"]) == (200, globex_number)
    malformed = await http.get(f"{api.url}/v1/invoices/same-1?tenant=a%20b",
                               headers=api.headers(api.admin))
    assert malformed.status_code == 400


async def test_scoped_tokens_read_only_their_tenants_feed(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    await issued_invoice(engine, "acme-1")
    await issued_invoice(engine, "globex-1", "globex", "GLX")
    forbidden = await http.get(f"{api.url}/v1/events", params={"tenant": "acme"},
                               headers=api.headers(api.globex))
    assert forbidden.status_code == 403
    implicit = await http.get(f"{api.url}/v1/events", headers=api.headers(api.globex))
    explicit = await http.get(f"{api.url}/v1/events", params={"tenant": "globex"},
                              headers=api.headers(api.globex))
    assert implicit.status_code == explicit.status_code == 200
    for page in (implicit.json(), explicit.json()):
        assert {e["tenant"] for e in page["results"]} == {"globex"}
        assert [e["kind"] for e in page["results"]] == ["received", "reserved", "sending",
                                                        "issued"]
    everything = await http.get(f"{api.url}/v1/events", headers=api.headers(api.admin))
    assert {e["tenant"] for e in everything.json()["results"]} == {"acme", "globex"}


async def test_a_scoped_token_may_not_issue_for_another_tenant(
        api: Api, http: httpx.AsyncClient, settings: Settings) -> None:
    denied = await http.post(f"{api.url}/v1/invoices", json=invoice_message("g-1", "globex",
                                                                             "GLX"),
                             headers=api.headers(api.acme))
    assert denied.status_code == 403
    allowed = await http.post(f"{api.url}/v1/invoices", json=invoice_message("a-1"),
                              headers=api.headers(api.acme))
    assert allowed.status_code == 202
    assert [m.message_id for m in await take_queue(settings)] == ["a-1"]


async def test_tokens_are_never_logged(api_servers: ApiServers, http: httpx.AsyncClient,
                                       engine: AsyncEngine) -> None:
    await define_series(engine)
    admin, scoped, wrong = new_token(), new_token(), new_token()
    url, proc = api_servers.start(f"{admin},acme:{scoped}",
                                  env={"GAPLESS_LOG_LEVEL": "debug"})
    for token in (admin, scoped, wrong):
        headers = {"Authorization": f"Bearer {token}"}
        await http.get(f"{url}/v1/events", headers=headers)
        await http.get(f"{url}/v1/events", params={"tenant": "globex"}, headers=headers)
        await http.get(f"{url}/v1/invoices/x", headers=headers)
        await http.post(f"{url}/v1/invoices", json=invoice_message("tok-1"), headers=headers)
        await http.post(f"{url}/v1/invoices", content=b"{", headers={
            **headers, "Content-Type": "application/json"})
    assert proc.terminate() == 0
    output = proc.output()
    assert "api_request" in output
    assert "api_auth_failed" in output
    for token in (admin, scoped, wrong):
        assert token not in output


# ------------------------------------------------------------------------------ issuing

async def test_post_publishes_at_user_priority_and_answers_202_with_the_status_url(
        api: Api, http: httpx.AsyncClient, settings: Settings) -> None:
    message = invoice_message("shop-42-000981", priority="batch")  # the API issues as "user"
    response = await http.post(f"{api.url}/v1/invoices", json=message,
                               headers=api.headers(api.admin))
    assert response.status_code == 202
    body = response.json()
    assert body["invoice_id"] == "shop-42-000981"
    assert body["status_url"] == f"{api.url}/v1/invoices/shop-42-000981?tenant=acme"
    assert response.headers["Location"] == body["status_url"]
    assert body["published"] is True
    assert body["status"] is None
    [queued] = await take_queue(settings)
    assert queued.priority == 4
    assert queued.content_type == "application/json"
    assert queued.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert queued.message_id == "shop-42-000981"
    assert json.loads(queued.body) == message
    # Not stored yet (no worker here): the status URL answers 404 until the worker has it.
    status = await http.get(body["status_url"], headers=api.headers(api.admin))
    assert status.status_code == 404


async def test_repeated_posts_are_idempotent(api: Api, http: httpx.AsyncClient,
                                             settings: Settings, engine: AsyncEngine) -> None:
    headers = api.headers(api.admin)
    first = await http.post(f"{api.url}/v1/invoices", json=invoice_message("r-1"),
                            headers=headers)
    second = await http.post(f"{api.url}/v1/invoices", json=invoice_message("r-1"),
                             headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["status_url"] == second.json()["status_url"]
    # Both published: harmless, the worker maps them onto one invoice.
    assert [m.message_id for m in await take_queue(settings)] == ["r-1", "r-1"]

    # Known to the database and still RECEIVED: published again (someone must move it on).
    await upsert_draft(ledger(engine), Draft("r-2", "acme", "ABC", 4, invoice_message("r-2")))
    received = await http.post(f"{api.url}/v1/invoices", json=invoice_message("r-2"),
                               headers=headers)
    assert received.status_code == 202
    assert received.json()["published"] is True
    assert received.json()["status"] == "RECEIVED"

    # Already ISSUED: accepted again, pointing at it, and nothing is published.
    await issued_invoice(engine, "r-3")
    issued = await http.post(f"{api.url}/v1/invoices", json=invoice_message("r-3"),
                             headers=headers)
    assert issued.status_code == 202
    assert issued.json() == {"invoice_id": "r-3",
                             "status_url": f"{api.url}/v1/invoices/r-3?tenant=acme",
                             "published": False, "status": "ISSUED"}
    assert [m.message_id for m in await take_queue(settings)] == ["r-2"]


async def test_an_invoice_id_another_tenant_holds_is_accepted_for_the_callers_tenant(
        api: Api, http: httpx.AsyncClient, settings: Settings, engine: AsyncEngine) -> None:
    """Nothing tells a tenant that another holds the id: the answer is the one for a new id."""
    await issued_invoice(engine, "taken", "globex", "GLX")
    response = await http.post(f"{api.url}/v1/invoices", json=invoice_message("taken"),
                               headers=api.headers(api.acme))
    fresh = await http.post(f"{api.url}/v1/invoices", json=invoice_message("fresh"),
                            headers=api.headers(api.acme))
    assert response.status_code == fresh.status_code == 202
    assert response.json() == {"invoice_id": "taken", "published": True, "status": None,
                                "status_url": f"{api.url}/v1/invoices/taken?tenant=acme"}
    assert "globex" not in response.text
    assert [m.message_id for m in await take_queue(settings)] == ["taken", "fresh"]
    # Not stored for acme yet: its status URL answers exactly as for an id nobody holds.
    status = await http.get(response.json()["status_url"], headers=api.headers(api.acme))
    absent = await http.get(f"{api.url}/v1/invoices/nobody", headers=api.headers(api.acme))
    assert (status.status_code, status.content) == (404, absent.content)


async def test_an_invoice_id_of_another_series_of_the_tenant_is_a_conflict(
        api: Api, http: httpx.AsyncClient, settings: Settings, engine: AsyncEngine) -> None:
    await issued_invoice(engine, "taken-g", "globex", "GLX")
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("globex", "GLY"))
    response = await http.post(
        f"{api.url}/v1/invoices", json=invoice_message("taken-g", "globex", "GLY"),
        headers=api.headers(api.globex))
    assert response.status_code == 409
    assert response.json()["detail"] == ("invoice_id already names an invoice of another "
                                         "series of this tenant")
    assert await take_queue(settings) == []


@pytest.mark.parametrize(("body", "content_type", "status", "reason"), [
    (b"{not json", "application/json", 400, "not valid JSON"),
    (b"[1, 2]", "application/json", 400, "JSON object"),
    (json.dumps(invoice_message("x")).encode(), "text/plain", 400, "not application/json"),
    (b'{"invoice_id": "a", "invoice_id": "b"}', "application/json", 400, "duplicate"),
    (json.dumps(invoice_message("x", currency="try")).encode(), "application/json", 422,
     "currency"),
    (json.dumps({**invoice_message("x"), "lines": []}).encode(), "application/json", 422,
     "lines"),
    (json.dumps({k: v for k, v in invoice_message("x").items() if k != "tenant"}).encode(),
     "application/json", 422, "tenant: required"),
])
async def test_invalid_messages_are_refused_with_the_parsers_reason(
        api: Api, http: httpx.AsyncClient, settings: Settings, body: bytes,
        content_type: str, status: int, reason: str) -> None:
    response = await http.post(f"{api.url}/v1/invoices", content=body, headers={
        **api.headers(api.admin), "Content-Type": content_type})
    assert response.status_code == status
    assert reason in response.json()["detail"]
    assert "1234567890" not in response.text  # the tax id is never echoed
    assert await take_queue(settings) == []


async def test_oversized_body_is_413(api: Api, http: httpx.AsyncClient) -> None:
    big = json.dumps(invoice_message("big", note="x" * MAX_BODY_BYTES)).encode()
    response = await http.post(f"{api.url}/v1/invoices", content=big, headers={
        **api.headers(api.admin), "Content-Type": "application/json"})
    assert response.status_code == 413


# ------------------------------------------------------------------------------ invoice status

async def test_invoice_status_shows_state_number_and_history(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    number = await issued_invoice(engine, "st-1")
    response = await http.get(f"{api.url}/v1/invoices/st-1", headers=api.headers(api.admin))
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("invoice_id", "tenant", "series", "status", "number",
                                 "attempts", "last_error", "integrator_ref")} == {
        "invoice_id": "st-1", "tenant": "acme", "series": "ABC", "status": "ISSUED",
        "number": number, "attempts": 1, "last_error": None, "integrator_ref": "REF-1"}
    assert body["issued_at"].endswith("Z")
    assert body["created_at"].endswith("Z")
    assert [(e["kind"], e["to_status"]) for e in body["events"]] == [
        ("received", "RECEIVED"), ("reserved", "RECEIVED"), ("sending", "SENDING"),
        ("issued", "ISSUED")]
    assert all(e["actor"] == "test" for e in body["events"])
    assert "payload" not in body
    assert "1234567890" not in response.text


async def test_invoice_ids_with_url_characters_round_trip(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    odd = "shop/42?x=1#frag%20"
    accepted = await http.post(f"{api.url}/v1/invoices", json=invoice_message(odd),
                               headers=api.headers(api.admin))
    assert accepted.status_code == 202
    assert accepted.json()["status_url"] == (f"{api.url}/v1/invoices/{quote(odd, safe='')}"
                                             "?tenant=acme")
    await issued_invoice(engine, odd)
    status = await http.get(accepted.json()["status_url"], headers=api.headers(api.admin))
    assert status.status_code == 200
    assert status.json()["invoice_id"] == odd


# ------------------------------------------------------------------------------ health, metrics

@pytest.fixture
def proxies(settings: Settings) -> Iterator[tuple[TcpProxy, TcpProxy]]:
    database = TcpProxy(make_url(settings.database_url).port or 5432)
    broker = TcpProxy(make_url(settings.amqp_url).port or 5672)
    database.start()
    broker.start()
    yield database, broker
    database.cut()
    broker.cut()


async def test_healthz_reports_which_service_is_unreachable(
        api_servers: ApiServers, http: httpx.AsyncClient, settings: Settings,
        proxies: tuple[TcpProxy, TcpProxy]) -> None:
    database, broker = proxies
    db_url = make_url(settings.database_url).set(port=database.port).render_as_string(
        hide_password=False)
    amqp_url = make_url(settings.amqp_url).set(port=broker.port).render_as_string(
        hide_password=False)
    token = new_token()
    url, _ = api_servers.start(token, env={"GAPLESS_DATABASE_URL": db_url,
                                           "GAPLESS_AMQP_URL": amqp_url})

    async def health(expected: dict[str, str] | None) -> httpx.Response | None:
        response = await http.get(f"{url}/healthz")  # no token: health is public
        body = response.json()
        if expected is None:
            return response if response.status_code == 200 else None
        ok = all(body[k].startswith(v) for k, v in expected.items())
        return response if response.status_code == 503 and ok else None

    healthy = await health(None)
    assert healthy is not None
    assert healthy.json() == {"database": "ok", "broker": "ok"}

    broker.cut()
    await await_until(lambda: health({"database": "ok", "broker": "error"}), 30,
                      message="healthz to report the broker")
    broker.start()
    await await_until(lambda: health(None), 60, message="healthz to recover the broker")

    database.cut()
    await await_until(lambda: health({"database": "error", "broker": "ok"}), 30,
                      message="healthz to report the database")
    # Meanwhile a request that needs the database is a retryable 503, not a 500.
    feed = await http.get(f"{url}/v1/events", headers={"Authorization": f"Bearer {token}"})
    assert feed.status_code == 503
    assert feed.headers["Retry-After"] == "5"
    database.start()
    await await_until(lambda: health(None), 30, message="healthz to recover the database")


async def test_a_database_out_of_reach_is_a_quick_503_after_the_first(
        api_servers: ApiServers, http: httpx.AsyncClient, settings: Settings,
        proxies: tuple[TcpProxy, TcpProxy]) -> None:
    """During an outage one request waits for the pool (its timeout, 10 s) and gets a 503; the
    next ones get theirs at once (the pool saw that nobody was lent a connection meanwhile), not
    after 10 s each — and once the database is back, they are answered again.

    A request that meets a pooled connection the cut has killed gets its 503 at once too,
    before any wait: so six requests take one pool wait in all, where they took four or more
    (40 s and more) before."""
    database, _ = proxies
    db_url = make_url(settings.database_url).set(port=database.port).render_as_string(
        hide_password=False)
    token = new_token()
    url, _ = api_servers.start(token, env={"GAPLESS_DATABASE_URL": db_url})
    headers = {"Authorization": f"Bearer {token}"}
    assert (await http.get(f"{url}/v1/events", headers=headers)).status_code == 200

    database.cut()
    started = time.monotonic()
    answers = [await http.get(f"{url}/v1/events", headers=headers) for _ in range(6)]
    assert [r.status_code for r in answers] == [503] * 6
    assert all(r.headers["Retry-After"] == "5" for r in answers)
    assert time.monotonic() - started < 25

    database.start()

    async def answered() -> bool:
        return (await http.get(f"{url}/v1/events", headers=headers)).status_code == 200

    await await_until(answered, 30, interval=0.2, message="the API to reach the database again")


async def test_requests_after_the_apis_connections_died_are_answered(
        api: Api, http: httpx.AsyncClient, engine: AsyncEngine) -> None:
    """The API's pool lends no dead connection after an outage: every backend of the API is
    terminated (a restart or a failover does the same to idle connections), and once they have
    sat idle for the pool's check interval the next requests each find a live one (the pool
    tests an idle connection before lending it) — a 200, never a 503."""
    number = await issued_invoice(engine, "alive-1")
    headers = api.headers(api.admin)
    # Several requests at once: several pooled connections are made and used.
    warm = await asyncio.gather(*(http.get(f"{api.url}/v1/invoices/alive-1", headers=headers)
                                  for _ in range(6)))
    assert {r.status_code for r in warm} == {200}
    last_request = time.monotonic()

    db = ledger(engine)
    killed = await db.one(
        "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'gapless-api'")
    assert killed.n >= 1

    async def gone() -> bool:
        row = await db.one("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = "
                           "current_database() AND application_name = 'gapless-api'")
        return bool(row.n == 0)

    await await_until(gone, 15, message="the API's backends to be gone")
    # The pool tests a connection that sat idle this long (the condition is the time itself).
    await await_until(lambda: asyncio.sleep(0, time.monotonic() - last_request > CHECK_IDLE_S),
                      5, message="the connections to have sat idle")

    for _ in range(8):
        shown = await http.get(f"{api.url}/v1/invoices/alive-1", headers=headers)
        assert shown.status_code == 200, shown.text
        assert shown.json()["number"] == number


async def test_metrics_count_requests_by_route_without_auth(
        api: Api, http: httpx.AsyncClient) -> None:
    headers = api.headers(api.admin)
    for _ in range(3):
        await http.get(f"{api.url}/v1/events", headers=headers)
    await http.get(f"{api.url}/v1/invoices/a", headers=headers)
    await http.get(f"{api.url}/v1/invoices/b", headers=headers)
    await http.get(f"{api.url}/no/such/page/{new_token()}")
    response = await http.get(f"{api.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert ('gapless_api_requests_total{method="GET",route="/v1/events",status="200"} 3.0'
            in text)
    assert ('gapless_api_requests_total{method="GET",route="/v1/invoices/{invoice_id:path}",'
            'status="404"} 2.0' in text)
    assert 'route="unmatched",status="404"} 1.0' in text
    assert "gapless_api_request_seconds_bucket" in text


async def test_openapi_docs_describe_the_endpoints(api: Api, http: httpx.AsyncClient) -> None:
    docs = await http.get(f"{api.url}/docs")
    assert docs.status_code == 200
    schema = (await http.get(f"{api.url}/openapi.json")).json()
    assert {"/v1/invoices", "/v1/invoices/{invoice_id}", "/v1/events", "/healthz",
            "/metrics"} <= set(schema["paths"])
    body = schema["paths"]["/v1/invoices"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["oneOf"] == [{"$ref": "#/components/schemas/InvoiceMessage"},
                                       {"$ref": "#/components/schemas/DespatchMessage"}]
    components = schema["components"]["schemas"]
    assert "invoice_id" in components["InvoiceMessage"]["properties"]
    assert {"Customer", "Line"} <= set(components)
    assert "token" in schema["components"]["securitySchemes"]
