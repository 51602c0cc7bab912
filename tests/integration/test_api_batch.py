"""``POST /v1/invoices/batch`` as a real ``gapless api`` process over real HTTP, against real
PostgreSQL and RabbitMQ: one result per message with the single POST's meaning, partial
acceptance, idempotence (nothing published twice), and the limits of a batch."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aio_pika
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.api.invoices import MAX_BATCH, MAX_BATCH_BODY_BYTES
from gapless.constants import user_queue_name
from gapless.message import MAX_BODY_BYTES
from gapless.message.schema import message_schema
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until
from tests.integration.test_api import define_series, invoice_message
from tests.mock_client import MockIntegratorClient
from tests.worker_support import all_in, running_worker, take_queue

BATCH = "/v1/invoices/batch"


@dataclass
class BatchApi:
    url: str
    admin: str  # every tenant
    acme: str   # scoped to acme

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def api(api_servers: ApiServers, engine: AsyncEngine) -> BatchApi:
    await define_series(engine)
    admin, acme = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    url, _ = api_servers.start(f"{admin},acme:{acme}")
    return BatchApi(url, admin, acme)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def queued(messages: list[Any]) -> Counter[str]:
    """How many times each invoice_id is in the queue."""
    return Counter(str(message.message_id) for message in messages)


async def post_batch(http: httpx.AsyncClient, api: BatchApi, token: str,
                     batch: list[Any]) -> list[dict[str, Any]]:
    response = await http.post(f"{api.url}{BATCH}", json=batch, headers=api.headers(token))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [result["index"] for result in answer["results"]] == list(range(len(batch)))
    assert answer["accepted"] == sum(r["status"] == 202 for r in answer["results"])
    assert answer["published"] == sum(r["published"] for r in answer["results"])
    results: list[dict[str, Any]] = answer["results"]
    return results


async def test_each_item_is_answered_as_the_single_post_would_and_only_valid_ones_are_queued(
        api: BatchApi, http: httpx.AsyncClient, settings: Settings) -> None:
    no_lines = invoice_message("a-bad")
    del no_lines["lines"]
    huge = invoice_message("a-huge", lines=[
        {"description": "W" * 1000, "quantity": "1", "unit_price": "1.00", "vat_rate": "20"}
    ] * 300)
    batch = [invoice_message("a-1"), no_lines, ["not", "an", "object"],
             invoice_message("g-1", tenant="globex", series="GLX"), huge,
             invoice_message("a-2", priority="batch")]
    results = await post_batch(http, api, api.acme, batch)
    assert [(r["invoice_id"], r["status"], r["published"]) for r in results] == [
        ("a-1", 202, True), (None, 422, False), (None, 400, False), ("g-1", 403, False),
        (None, 422, False), ("a-2", 202, True)]
    assert results[1]["error"] == "lines: required field is missing"
    assert results[2]["error"] == "message must be a JSON object, not a list"
    assert results[3]["error"] == "this token may not issue invoices for that tenant"
    assert results[4]["error"].endswith(f"as JSON; at most {MAX_BODY_BYTES} are accepted")
    first = results[0]
    assert first["error"] is None
    assert first["invoice_status"] is None
    assert first["status_url"] == f"{api.url}/v1/invoices/a-1?tenant=acme"
    assert all(r["status_url"] is None for r in results[1:5])
    # Only the valid ones are queued, each once, at the message's own priority.
    taken = await take_queue(settings)
    assert queued(taken) == Counter({"a-1": 1, "a-2": 1})
    assert {str(m.message_id): m.priority for m in taken} == {"a-1": 4, "a-2": 1}
    metrics = (await http.get(f"{api.url}/metrics")).text
    assert 'gapless_api_invoices_accepted_total{published="true"} 2.0' in metrics


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


async def test_items_only_the_json_walk_refuses_are_answered_as_the_single_post(
        api: BatchApi, http: httpx.AsyncClient, settings: Settings) -> None:
    # A batch's text shows whether its messages need the walk of their JSON (a control
    # character's escape, deep nesting, a long number): each item is answered as alone.
    batch = [invoice_message("w-16", x=nested(15)),      # 16 levels with the message's own
             invoice_message("w-17", x=nested(16)),
             invoice_message("w-ctl", x={"a": "b\u0001"}),
             invoice_message("w-num", x=10 ** 100),
             invoice_message("w-ok", x=10 ** 99)]
    results = await post_batch(http, api, api.admin, batch)
    alone = []
    for message in batch:
        response = await http.post(f"{api.url}/v1/invoices", json=message,
                                   headers=api.headers(api.admin))
        alone.append((response.status_code, response.json().get("detail")))
    assert [(r["status"], r["error"]) for r in results] == alone
    assert [r["status"] for r in results] == [202, 422, 422, 422, 202]
    assert results[1]["error"].startswith("x.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0: nested more than 16")
    assert results[2]["error"] == "x.a: holds a character XML cannot carry (U+0001)"
    assert results[3]["error"].startswith("x: a number written out may have at most 100")
    assert queued(await take_queue(settings)) == Counter({"w-16": 2, "w-ok": 2})


async def test_a_batch_again_after_the_worker_issued_it_is_accepted_without_publishing(
        api: BatchApi, http: httpx.AsyncClient, settings: Settings, engine: AsyncEngine,
        mock_integrator: MockIntegratorClient) -> None:
    batch = [invoice_message(f"r-{n}") for n in range(5)]
    batch.append(invoice_message("g-1", tenant="globex", series="GLX"))
    ids = {message["invoice_id"] for message in batch}
    results = await post_batch(http, api, api.admin, batch)
    assert all(r["status"] == 202 and r["published"] for r in results)
    worker_settings = settings.with_overrides(integrator_url=mock_integrator.url)
    async with running_worker(worker_settings):
        await await_until(lambda: all_in(engine, ids, "ISSUED"), 60, message="batch ISSUED")
    again = await post_batch(http, api, api.admin, batch)
    assert [(r["invoice_id"], r["status"], r["published"], r["invoice_status"])
            for r in again] == [(m["invoice_id"], 202, False, "ISSUED") for m in batch]
    assert again[-1]["status_url"] == f"{api.url}/v1/invoices/g-1?tenant=globex"
    assert await take_queue(settings) == []
    # The same id under another series of the tenant is refused, as the single POST does.
    other = invoice_message("r-0", series="ZZZ")
    conflict = await post_batch(http, api, api.admin, [other, invoice_message("r-9")])
    assert [(r["status"], r["published"]) for r in conflict] == [(409, False), (202, True)]
    assert conflict[0]["error"] == ("invoice_id already names an invoice of another series of "
                                    "this tenant")
    assert queued(await take_queue(settings)) == Counter({"r-9": 1})


async def test_an_invoice_repeated_in_one_batch_is_published_once(
        api: BatchApi, http: httpx.AsyncClient, settings: Settings) -> None:
    batch = [invoice_message("d-1"), invoice_message("d-2"), invoice_message("d-1"),
             invoice_message("d-1", tenant="globex", series="GLX")]  # another tenant's key
    results = await post_batch(http, api, api.admin, batch)
    assert [(r["invoice_id"], r["status"], r["published"]) for r in results] == [
        ("d-1", 202, True), ("d-2", 202, True), ("d-1", 202, False), ("d-1", 202, True)]
    assert results[2]["status_url"] == results[0]["status_url"]
    assert results[3]["status_url"].endswith("?tenant=globex")
    assert queued(await take_queue(settings)) == Counter({"d-1": 2, "d-2": 1})


async def test_a_batch_over_the_limits_or_not_an_array_is_refused_whole(
        api: BatchApi, http: httpx.AsyncClient, settings: Settings) -> None:
    url, headers = f"{api.url}{BATCH}", api.headers(api.admin)
    too_many = await http.post(url, json=[invoice_message(f"m-{n}")
                                          for n in range(MAX_BATCH + 1)], headers=headers)
    assert too_many.status_code == 413
    assert too_many.json()["detail"] == (f"batch has {MAX_BATCH + 1} messages; at most "
                                         f"{MAX_BATCH} are accepted")
    big = b"[" + b" " * MAX_BATCH_BODY_BYTES + b"]"
    oversized = await http.post(url, content=big, headers={
        **headers, "Content-Type": "application/json"})
    assert oversized.status_code == 413
    assert oversized.json()["detail"] == f"body is larger than {MAX_BATCH_BODY_BYTES} bytes"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it is read
        yield b"["
        for _ in range(17):
            yield b" " * (1024 * 1024)
        yield b"]"

    streamed = await http.post(url, content=chunks(), headers={
        **headers, "Content-Type": "application/json"})
    assert streamed.status_code == 413
    single = await http.post(url, json=invoice_message("m-1"), headers=headers)
    assert single.status_code == 400
    assert single.json()["detail"] == "body must be a JSON array of messages, not an object"
    broken = await http.post(url, content=b"[{", headers={
        **headers, "Content-Type": "application/json"})
    assert broken.status_code == 400
    text = await http.post(url, content=b"[]", headers={**headers, "Content-Type": "text/plain"})
    assert text.status_code == 400
    unauthorized = await http.post(url, json=[invoice_message("m-2")])
    assert unauthorized.status_code == 401
    assert await take_queue(settings) == []
    empty = await http.post(url, json=[], headers=headers)
    assert empty.status_code == 200
    assert empty.json() == {"results": [], "accepted": 0, "published": 0}


async def test_the_openapi_document_describes_an_array_of_messages(
        api: BatchApi, http: httpx.AsyncClient) -> None:
    document = (await http.get(f"{api.url}/openapi.json")).json()
    operation = document["paths"][BATCH]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["type"] == "array"
    assert schema["maxItems"] == MAX_BATCH
    single = document["paths"]["/v1/invoices"]["post"]["requestBody"]["content"]
    assert schema["items"] == single["application/json"]["schema"]
    generated = message_schema(ref_template="#/components/schemas/{model}")
    assert schema["items"] == {key: value for key, value in generated.items()
                               if key not in ("$defs", "$schema")}
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/BatchAccepted"}
    item = document["components"]["schemas"]["BatchItem"]["properties"]
    assert set(item) == {"index", "invoice_id", "status", "published", "status_url",
                         "invoice_status", "error"}


async def test_a_message_the_broker_does_not_take_is_503_and_the_others_stay_accepted(
        api_servers: ApiServers, http: httpx.AsyncClient, engine: AsyncEngine,
        settings: Settings) -> None:
    """Quorum mode: user work goes to ``<prefix>.user``. With that queue deleted under the running
    API, its messages are unroutable (refused, not queued) while batch work is confirmed."""
    await define_series(engine)
    token = secrets.token_urlsafe(24)
    url, _ = api_servers.start(token, env={"GAPLESS_QUEUE_TYPE": "quorum"})
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(user_queue_name(settings.queue))
    batch = [invoice_message("u-1", priority="user"), invoice_message("b-1", priority="batch"),
             invoice_message("u-2", priority="user"), invoice_message("b-2", priority="batch")]
    response = await http.post(f"{url}{BATCH}", json=batch,
                               headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["invoice_id"], r["status"], r["published"]) for r in results] == [
        ("u-1", 503, False), ("b-1", 202, True), ("u-2", 503, False), ("b-2", 202, True)]
    assert results[0]["error"].startswith("unroutable: no queue")
    assert results[0]["status_url"] is None
    assert queued(await take_queue(settings)) == Counter({"b-1": 1, "b-2": 1})
