"""The API's OpenAPI document, read from a running ``gapless api``: the request bodies of the
issuing endpoints are the message's real schema (docs/message.schema.json), with its patterns
and enums, not bare strings; and the contract's examples validate against it."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import jsonschema
import pytest

from gapless.message import INVOICE_TYPES, PROFILES
from tests.conftest import ApiServers
from tests.helpers import ROOT

EXAMPLES = sorted((ROOT / "examples" / "messages").glob("*.json"))


@pytest.fixture
def openapi(api_servers: ApiServers) -> dict[str, Any]:
    url, _ = api_servers.start(secrets.token_urlsafe(24))
    answer = httpx.get(f"{url}/openapi.json", timeout=15)
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    return document


def body_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    schema: dict[str, Any] = (document["paths"][path]["post"]["requestBody"]["content"]
                              ["application/json"]["schema"])
    return schema


def resolving(document: dict[str, Any], schema: dict[str, Any]
              ) -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` whose ``#/components/…`` references resolve in ``document``."""
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


def test_the_request_body_is_the_message_schema(openapi: dict[str, Any]) -> None:
    body = body_schema(openapi, "/v1/invoices")
    committed = json.loads((ROOT / "docs" / "message.schema.json").read_text(encoding="utf-8"))
    # The committed schema, its messages and parts moved to the components (and no dialect of
    # its own): one of an invoice and a dispatch note.
    assert body["oneOf"] == [{"$ref": "#/components/schemas/InvoiceMessage"},
                             {"$ref": "#/components/schemas/DespatchMessage"}]
    parts = openapi["components"]["schemas"]
    for name in ("InvoiceMessage", "DespatchMessage"):
        assert parts[name]["properties"].keys() == committed["$defs"][name]["properties"].keys()
        assert parts[name]["required"] == committed["$defs"][name]["required"]
    invoice = parts["InvoiceMessage"]
    assert parts["Line"] == committed["$defs"]["Line"]
    line = parts["Line"]["properties"]
    assert line["quantity"]["type"] == "string"
    assert line["quantity"]["pattern"].startswith("^0*[0-9]")
    assert "pattern" in line["unit_price"]
    assert "pattern" in line["vat_rate"]
    assert parts["Customer"]["properties"]["tax_id"]["pattern"] == "^[0-9]{10,11}$"
    assert invoice["properties"]["profile"]["anyOf"][0]["enum"] == list(PROFILES)
    assert invoice["properties"]["type"]["anyOf"][0]["enum"] == list(INVOICE_TYPES)
    assert invoice["properties"]["priority"]["enum"] == ["user", "batch", None]

    batch = body_schema(openapi, "/v1/invoices/batch")
    assert batch["type"] == "array"
    assert batch["maxItems"] == 1000
    assert batch["items"] == body


def test_the_examples_validate_against_the_api_s_schema(openapi: dict[str, Any]) -> None:
    one = resolving(openapi, body_schema(openapi, "/v1/invoices"))
    many = resolving(openapi, body_schema(openapi, "/v1/invoices/batch"))
    messages = [json.loads(path.read_text(encoding="utf-8")) for path in EXAMPLES]
    for message in messages:
        assert list(one.iter_errors(message)) == []
    assert many.is_valid(messages)
    wrong = {**messages[0], "lines": [{**messages[0]["lines"][0], "quantity": 2}]}
    assert not one.is_valid(wrong)
    assert not many.is_valid([*messages, wrong])
