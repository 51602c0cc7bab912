"""The API's OpenAPI document, with the message's real schema as the request body.

The issuing endpoints read their body raw and parse it with :func:`gapless.message.parse_message`
(so every producer meets one parser); FastAPI therefore knows nothing of its shape. This puts
the message's JSON Schema (:func:`gapless.message.schema.message_schema`: decimal strings with
their patterns, tax id patterns, the profile, type and priority enums) in as the request body
of ``POST /v1/invoices`` and the items of ``POST /v1/invoices/batch``, its parts (``Customer``,
``Line`` …) under ``components/schemas``. How requests are parsed does not change.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gapless.message.schema import message_schema

#: The request bodies that carry messages: one message, or an array of them.
ONE_MESSAGE = ("/v1/invoices", "post")
MESSAGE_ARRAY = ("/v1/invoices/batch", "post")


def _json_body(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    """The ``application/json`` entry of an operation's request body (made if absent)."""
    operation = document["paths"][path][method]
    body = operation.setdefault("requestBody", {"required": True})
    entry: dict[str, Any] = body.setdefault("content", {}).setdefault("application/json", {})
    return entry


def with_message_schema(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (an OpenAPI document of the API) with the message's schema in its
    components and as the messages' request bodies; changed in place and returned."""
    message = message_schema(ref_template="#/components/schemas/{model}")
    message.pop("$schema", None)  # the OpenAPI document's dialect (3.1: draft 2020-12)
    parts = message.pop("$defs", {})
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.update(parts)
    _json_body(document, *ONE_MESSAGE)["schema"] = message
    batch = _json_body(document, *MESSAGE_ARRAY)
    batch["schema"] = {**batch.get("schema", {}), "type": "array", "items": message}
    return document


def install(app: FastAPI) -> None:
    """Serve ``app``'s OpenAPI document with the message's schema (built once, on first
    request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_message_schema(get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
