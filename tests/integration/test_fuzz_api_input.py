"""Fuzzing the HTTP API's input: whatever a client sends, the answer is a clear 4xx or an accepted
valid invoice — never a 500, never an exception escaping the app.

The app is the real ``create_app(settings)`` (its lifespan opens the test database and a publisher
on the test's queue prefix), driven in-process through httpx's ASGI transport, which re-raises any
exception the app lets escape. Every 202 is cross-checked against the contract parser: the API
accepted exactly what ``parse_message`` accepts. Every refusal carries a one-line ``detail``.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.api import create_app
from gapless.message import InvalidMessage, parse_message
from gapless.settings import Settings
from tests.helpers import today
from tests.integration.test_api import define_series

TOKEN = secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CT = "application/json"
#: What the issue endpoint may answer to a client's input (503 only if the broker fails).
CLIENT_ERRORS = {400, 401, 403, 409, 413, 415, 422}

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.fixture
async def client(settings: Settings, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    await define_series(engine)  # acme's series ABC: the API refuses an unknown series at once
    app = create_app(settings.with_overrides(api_token=TOKEN))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield http


def valid() -> dict[str, Any]:
    return {"invoice_id": "fuzz-1", "tenant": "acme", "series": "ABC", "priority": "user",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}


async def issue(client: httpx.AsyncClient, body: bytes, content_type: str | None = CT,
          headers: dict[str, str] | None = None) -> Any:
    all_headers = dict(AUTH if headers is None else headers)
    if content_type is not None:
        all_headers["Content-Type"] = content_type
    return await client.post("/v1/invoices", content=body, headers=all_headers)


def expect_clear_answer(response: Any, body: bytes, content_type: str | None) -> None:
    """A 202 for what the contract parser accepts, a 4xx with a one-line detail otherwise."""
    try:
        message = parse_message(body, content_type)
    except InvalidMessage:
        message = None
    if response.status_code == 202:
        assert message is not None, (body[:200], response.json())
        assert response.json()["invoice_id"] == message.invoice_id
        assert response.headers["Location"].endswith(response.json()["status_url"].split(
            "/v1/", 1)[-1])
        return
    assert response.status_code in CLIENT_ERRORS, (response.status_code, response.text[:500])
    detail = response.json()["detail"]
    assert isinstance(detail, str)
    assert detail.strip()
    assert "\n" not in detail
    if response.status_code == 422 and message is not None:
        # A contract message the worker would refuse before any number (docs/api.md).
        assert detail.split(":", 1)[0] in ("tenant", "series", "issue_date"), detail
    elif response.status_code in (400, 422):
        assert message is None, (body[:200], detail)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)
content_types = st.sampled_from([CT, "application/json; charset=utf-8", "text/plain",
                                 "application/json; charset=latin-1", "application/xml", ""])


@FUZZ
@given(body=st.binary(max_size=2048), content_type=content_types)
async def test_any_bytes_get_a_clear_answer(client: httpx.AsyncClient, body: bytes,
                                      content_type: str) -> None:
    response = await issue(client, body, content_type or None)
    expect_clear_answer(response, body, content_type or None)


@FUZZ
@given(value=json_values)
async def test_any_json_value_gets_a_clear_answer(client: httpx.AsyncClient, value: Any) -> None:
    body = json.dumps(value).encode()
    expect_clear_answer(await issue(client, body), body, CT)


FIELDS = ["invoice_id", "tenant", "series", "priority", "issue_date", "currency", "customer",
          "customer.tax_id", "customer.name", "lines", "lines.0", "lines.0.description",
          "lines.0.quantity", "lines.0.unit_price", "lines.0.vat_rate"]


def mutate(message: dict[str, Any], path: str, value: Any, delete: bool) -> dict[str, Any]:
    mutated = copy.deepcopy(message)
    *parents, last = path.split(".")
    target: Any = mutated
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if delete:
        del target[key]
    else:
        target[key] = value
    return mutated


@FUZZ
@given(path=st.sampled_from(FIELDS), value=json_values, delete=st.booleans(),
       invoice_id=st.text(min_size=1, max_size=40))
async def test_a_mutated_message_gets_a_clear_answer(
        client: httpx.AsyncClient, path: str, value: Any, delete: bool, invoice_id: str) -> None:
    message = mutate({**valid(), "invoice_id": invoice_id}, path, value, delete)
    body = json.dumps(message).encode()
    expect_clear_answer(await issue(client, body), body, CT)


@FUZZ
@given(quantity=st.decimals(min_value="0.001", max_value=10**6, places=3),
       price=st.decimals(min_value=0, max_value=10**6, places=2),
       vat=st.sampled_from(["0", "1", "10", "20", "100"]),
       name=st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=50),
       number=st.integers(0, 10**9))
async def test_valid_messages_are_accepted(client: httpx.AsyncClient, quantity: Any,
                                           price: Any, vat: str, name: str,
                                           number: int) -> None:
    message = valid()
    message["invoice_id"] = f"fuzz-{number}"
    message["customer"]["name"] = name
    message["lines"][0].update(quantity=format(quantity, "f"), unit_price=format(price, "f"),
                               vat_rate=vat)
    body = json.dumps(message).encode()
    response = await issue(client, body)
    assert response.status_code == 202, response.text
    expect_clear_answer(response, body, CT)


@FUZZ
@given(header=st.one_of(st.none(), st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)))
async def test_any_authorization_header_gets_a_clear_answer(client: httpx.AsyncClient,
                                                      header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    body = json.dumps(valid()).encode()
    response = await issue(client, body, headers=headers)
    if header == AUTH["Authorization"]:
        assert response.status_code == 202
    else:
        assert response.status_code == 401, response.text
        assert response.json()["detail"]


async def test_an_oversized_body_is_refused_with_413(client: httpx.AsyncClient) -> None:
    message = valid()
    message["lines"] = [message["lines"][0]] * 1000
    message["note"] = "x" * 300_000
    response = await issue(client, json.dumps(message).encode())
    assert response.status_code == 413
    assert "larger than" in response.json()["detail"]
