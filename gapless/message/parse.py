"""Parsing a delivery's body into a message, and the one-line reason of a refusal."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gapless.constants import MAX_PRIORITY, PRIORITIES, PRIORITY_BATCH
from gapless.message import jsontext
from gapless.message.despatch import DespatchMessage
from gapless.message.fields import (
    DOCUMENTS,
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_LINES,
    InvalidMessage,
    format_path,
    json_type,
    one_line,
    rule_errors,
)
from gapless.message.model import InvoiceMessage

#: A message of any document: the parser returns the model ``document`` names.
AnyMessage = InvoiceMessage | DespatchMessage
#: Each document's model, by ``document``.
MODELS: dict[str, type[InvoiceMessage] | type[DespatchMessage]] = {
    "invoice": InvoiceMessage, "despatch": DespatchMessage}

_ACCEPTED_CHARSETS = frozenset({"utf-8", "utf8"})

_GENERIC_REASONS = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field (extra fields are kept only at the top level)",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
}


def reason_of(error: ValidationError) -> str:
    """One line naming the first problem's field path (and how many more there are)."""
    errors = rule_errors(error.errors(include_url=False, include_input=False))
    if not errors:  # pragma: no cover - pydantic always reports at least one
        return "invalid message"
    first = errors[0]
    path = format_path(tuple(first["loc"]))
    kind = first["type"]
    if kind in _GENERIC_REASONS:
        problem = _GENERIC_REASONS[kind]
    elif kind == "too_short" and path == "lines":
        problem = "must contain at least 1 line"
    elif kind == "too_long" and path == "lines":
        problem = f"must contain at most {MAX_LINES} lines"
    else:
        problem = first["msg"]
    reason = f"{path}: {problem}" if path else problem
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more)"
    return one_line(reason)


def model_of(data: Any) -> type[InvoiceMessage] | type[DespatchMessage]:
    """The model of the document ``data`` says it is (``document``; absent: an invoice)."""
    document = data.get("document", DOCUMENTS[0]) if isinstance(data, dict) else DOCUMENTS[0]
    model = MODELS.get(document) if isinstance(document, str) else None
    if model is None:
        raise InvalidMessage(f"document: must be one of {', '.join(DOCUMENTS)}")
    return model


def validate_message(data: Any) -> AnyMessage:
    """The message of the document ``data`` is — an :class:`InvoiceMessage` or a
    :class:`DespatchMessage`, by its ``document`` field — from already-decoded data (a dict, or
    a model).

    Raises :class:`InvalidMessage` with a one-line reason.
    """
    if isinstance(data, InvoiceMessage | DespatchMessage):
        return data
    model = model_of(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(reason_of(exc)) from None
    except RecursionError:
        # Only reachable for Python objects that nest deeper than the interpreter's stack
        # (cycles); JSON input is depth-checked before any recursion.
        raise InvalidMessage("message nests too deeply") from None


def check_content_type(content_type: str | None) -> None:
    """Accept ``application/json``, optionally with ``charset=utf-8``; raise InvalidMessage."""
    if not content_type:
        raise InvalidMessage("missing content type; must be application/json")
    mime, *params = content_type.split(";")
    if mime.strip().lower() != "application/json":
        shown = mime.strip()[:60] if mime.strip().isprintable() else "?"
        raise InvalidMessage(f"content type {shown!r} is not application/json")
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
            if charset not in _ACCEPTED_CHARSETS:
                raise InvalidMessage("charset must be utf-8")


class _DuplicateKey(ValueError):
    pass


class _NotJsonConstant(ValueError):
    pass


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A repeated key is ambiguous (parsers disagree on which value wins): refuse it.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


def decode_json(body: bytes) -> Any:
    """Strict JSON from UTF-8 bytes: no NaN/Infinity, no duplicate keys, nesting bounded by
    MAX_DEPTH (then the contract's own walk gives the path), numbers with a fraction as exact
    ``Decimal``s (:mod:`gapless.message.jsontext`); raise InvalidMessage."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage("body is not valid UTF-8") from None
    text = text.removeprefix("\ufeff")
    try:
        # Deeper than the contract allows, so that its walk names the field that nests too deep
        # (past this, the body is refused as a whole).
        return jsontext.loads(text, max_depth=4 * MAX_DEPTH,
                              object_pairs_hook=_object_without_duplicates,
                              parse_constant=_refuse_constant)
    except _DuplicateKey:
        raise InvalidMessage("body has a duplicate field name in an object") from None
    except _NotJsonConstant:
        raise InvalidMessage("body is not valid JSON: NaN and Infinity are not allowed") from None
    except jsontext.TooDeep:
        raise InvalidMessage(f"body nests more than {MAX_DEPTH} levels deep") from None
    except jsontext.NotJson as exc:
        raise InvalidMessage(f"body is {exc.reason}") from None
    except ValueError:
        # e.g. an integer literal longer than Python's int conversion limit
        raise InvalidMessage("body is not valid JSON: a number literal is too long") from None


def parse_message(body: bytes, content_type: str | None) -> AnyMessage:
    """The message in an AMQP delivery, or InvalidMessage with a one-line reason.

    Checks, in order: content type, size (before any parsing), UTF-8, JSON, object, the contract.
    Never raises anything but InvalidMessage, whatever ``body`` holds.
    """
    check_content_type(content_type)
    if len(body) > MAX_BODY_BYTES:
        raise InvalidMessage(f"body is {len(body)} bytes; at most {MAX_BODY_BYTES} are accepted")
    data = decode_json(body)
    if not isinstance(data, dict):
        raise InvalidMessage(f"body must be a JSON object, not {json_type(data)}")
    return validate_message(data)


def priority_of(message_priority_property: int | None, body_priority: str | None) -> int:
    """The effective priority 0..4 of a delivery.

    The AMQP ``priority`` property rules (contract: 4 user, 1 batch; above 4 counts as 4). When
    the property is missing the message counts as batch, unless its body says ``"user"`` — the
    broker has already ordered it as low priority, but the invoice row keeps what the producer
    asked for.
    """
    if message_priority_property is None:
        return PRIORITIES.get(body_priority or "batch", PRIORITY_BATCH)
    return max(0, min(MAX_PRIORITY, int(message_priority_property)))
