"""Parsing a delivery's body into a message, and the one-line reason of a refusal."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

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
from gapless.message.jsontext import MAX_NUMBER_TEXT
from gapless.message.model import SHAPED, SHAPED_BODY, InvoiceMessage

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


def validate_message(data: Any, *, shaped: bool = False) -> AnyMessage:
    """The message of the document ``data`` is — an :class:`InvoiceMessage` or a
    :class:`DespatchMessage`, by its ``document`` field — from already-decoded data (a dict, or
    a model). ``shaped``: ``data`` is known to hold only what a message's JSON walk accepts
    (:attr:`Decoded.shaped`), and is not walked again.

    Raises :class:`InvalidMessage` with a one-line reason.
    """
    if isinstance(data, InvoiceMessage | DespatchMessage):
        return data
    return _validated(data, SHAPED if shaped else None)


def _validated(data: Any, context: dict[str, bool] | None) -> AnyMessage:
    model = model_of(data)
    try:
        return model.model_validate(data, context=context)
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
    # A repeated key is ambiguous (parsers disagree on which value wins): refuse it. The dict
    # is made in C; a repeated key makes it shorter than its pairs.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey
    return result


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


class _NeedsWalk(Exception):
    """A number the walk must judge: longer than the rule allows as written, or written with
    an exponent (its plain text, which is what is stored and sent, may be longer)."""


def _bounded_int(text: str) -> int:
    # The walk's rule (model._check_number) on the text: JSON writes an integer in plain
    # digits, without leading zeros, so its text is its plain text.
    if len(text) > MAX_NUMBER_TEXT:
        raise _NeedsWalk
    return int(text)


def _bounded_decimal(text: str) -> Decimal:
    # Without an exponent a JSON number's text is its plain text (jsontext.number_text).
    if len(text) > MAX_NUMBER_TEXT or "e" in text or "E" in text:
        raise _NeedsWalk
    return Decimal(text)


#: The escapes of a JSON text that can make a string XML cannot carry: ``\b``, ``\f``, a ``\u``
#: escape of a C0 control, a surrogate, U+FFFE or U+FFFF (an escaped backslash followed by such
#: letters is found too). Written as they are, those two are looked for apart; a control
#: character cannot stand raw in a JSON string, nor a surrogate in UTF-8.
_NOT_XML_ESCAPE = re.compile(r"\\[bf]|\\u(?:00[01]|[dD][89a-fA-F]|[fF]{3}[eEfF])")


def _carried_by_xml(text: str) -> bool:
    """Whether no string of the JSON ``text`` can hold a character XML cannot carry (a
    message's text seldom has a backslash, and ``in`` is cheaper than a search)."""
    return ("\ufffe" not in text and "\uffff" not in text
            and ("\\" not in text or _NOT_XML_ESCAPE.search(text) is None))


class Decoded(NamedTuple):
    """A decoded body, and whether it is known to hold only what a message's walk accepts
    (texts XML can carry, numbers in plain notation and short, nesting within the bound): read
    off the text and checked while decoding, so that validation need not walk it again.

    A message of a shaped body is never longer as JSON (:meth:`Message.body`) than the body:
    its texts need no more escaping than JSON gave them, its numbers are written as they came,
    and nothing is added but what was there (fields the producer did not set are left out).
    """

    value: Any
    shaped: bool


def decode_json(body: bytes) -> Any:
    """Strict JSON from UTF-8 bytes: no NaN/Infinity, no duplicate keys, nesting bounded by
    MAX_DEPTH (then the contract's own walk gives the path), numbers with a fraction as exact
    ``Decimal``s (:mod:`gapless.message.jsontext`); raise InvalidMessage."""
    return decode_body(body).value


def decode_body(body: bytes, *, levels: int = MAX_DEPTH) -> Decoded:
    """:func:`decode_json`'s value, and whether it is shaped as a message's walk wants with at
    most ``levels`` levels of nesting (a batch's messages are one level down)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessage("body is not valid UTF-8") from None
    text = text.removeprefix("\ufeff")
    try:
        value = _decoded(text, parse_int=_bounded_int, parse_float=_bounded_decimal)
    except _NeedsWalk:
        # Rare: decoded again as it is, for the walk to judge its numbers.
        return Decoded(_decoded(text), shaped=False)
    shaped = _carried_by_xml(text) and jsontext.nests_at_most(text, value, levels)
    return Decoded(value, shaped)


def _decoded(text: str, *, parse_int: Callable[[str], Any] | None = None,
             parse_float: Callable[[str], Any] = Decimal) -> Any:
    try:
        # Deeper than the contract allows, so that its walk names the field that nests too deep
        # (past this, the body is refused as a whole).
        return jsontext.loads(text, max_depth=4 * MAX_DEPTH,
                              object_pairs_hook=_object_without_duplicates,
                              parse_constant=_refuse_constant, parse_int=parse_int,
                              parse_float=parse_float)
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
    data, shaped = decode_body(body)
    if not isinstance(data, dict):
        raise InvalidMessage(f"body must be a JSON object, not {json_type(data)}")
    # A shaped body within MAX_BODY_BYTES makes a message no longer: its size is not measured
    # by writing it (it is written when it is needed, once).
    return _validated(data, SHAPED_BODY if shaped else None)


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
