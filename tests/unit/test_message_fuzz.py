"""Fuzzing the parser: whatever arrives, the result is a valid message or InvalidMessage.

A valid result must round-trip (its body parses to the same message) and fit the size limit; a
refusal must carry a one-line, bounded reason. Any other exception fails the test — that is the
worker's guarantee that a bad message never crashes it.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gapless.message import (
    MAX_BODY_BYTES,
    MAX_REASON,
    InvalidMessage,
    InvoiceMessage,
    decode_body,
    decode_json,
    parse_message,
    validate_message,
)

CT = "application/json"
TAX_ID = "9876543210"

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def valid() -> dict[str, Any]:
    return {"invoice_id": "shop-42-000981", "tenant": "acme", "series": "ABC", "priority": "user",
            "issue_date": "2026-11-22", "currency": "TRY",
            "customer": {"tax_id": TAX_ID, "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"},
                      {"description": "Shipping", "quantity": "1", "unit_price": "45.50",
                       "vat_rate": "10"}]}


def outcome(body: bytes, content_type: str | None = CT) -> InvoiceMessage | InvalidMessage:
    """Parse, and check the promises of whichever outcome it is."""
    try:
        message = parse_message(body, content_type)
    except InvalidMessage as exc:
        refusal = exc
    else:
        refusal = None
    if refusal is not None:
        assert refusal.reason
        assert "\n" not in refusal.reason
        assert len(refusal.reason) <= MAX_REASON
        return refusal
    again = message.body()
    assert len(again) <= MAX_BODY_BYTES
    if decode_body(body).shaped:
        # parse_message did not write it to measure it: a shaped body bounds it.
        assert len(again) <= len(body)
    assert parse_message(again, CT) == message
    assert json.loads(again) == message.payload()
    return message


json_scalars = (st.none() | st.booleans() | st.integers() | st.floats()
                | st.text(max_size=30) | st.sampled_from(["", "0", "-1", "1e3", "NaN", TAX_ID,
                                                           "user", "2026-11-22", "TRY"]))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=5),
    max_leaves=30)


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(body: bytes) -> None:
    assert isinstance(outcome(body), InvalidMessage)  # random bytes are never a valid invoice


@FUZZ
@given(json_values)
def test_arbitrary_json_values(value: Any) -> None:
    outcome(json.dumps(value).encode())


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(valid())) | st.text(max_size=8), json_values,
                       max_size=12))
def test_objects_with_contract_field_names_and_arbitrary_values(value: dict[str, Any]) -> None:
    outcome(json.dumps(value).encode())


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_messages(draw: st.DrawFn) -> Any:
    """A valid message with 1..3 edits: a value replaced, a key removed or a key added."""
    data: Any = valid()
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            if action == "replace":
                data = draw(json_values)
            continue
        parent = data
        try:
            for step in path[:-1]:
                parent = parent[step]
        except (KeyError, IndexError, TypeError):
            continue
        key = path[-1]
        if action == "replace":
            parent[key] = draw(json_values)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return data


@FUZZ
@given(mutated_messages())
# A float whose JSON text has more digits than the float holds exactly: the body path reads the
# text (46464259575874450), the producer path once wrote the float (46464259575874448).
@example({**valid(), "0": {"": [4.646425957587445e+16]}})
def test_mutated_valid_messages(data: Any) -> None:
    result = outcome(json.dumps(data).encode())
    if isinstance(result, InvalidMessage):
        assert TAX_ID not in result.reason  # mutations change values, never print the tax id
    # the same data through the Python producer path agrees with the body path (a float of the
    # producer's is the exact Decimal of its JSON text there: the same value)
    try:
        direct: InvoiceMessage | None = validate_message(copy.deepcopy(data))
    except InvalidMessage:
        direct = None
    assert (None if direct is None else json.loads(direct.body())) == (
        json.loads(result.body()) if isinstance(result, InvoiceMessage) else None)


@FUZZ
@given(st.data())
def test_byte_level_corruption_of_a_valid_body(data: st.DataObject) -> None:
    body = bytearray(json.dumps(valid(), ensure_ascii=False).encode())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "flip":
            body[position] = data.draw(st.integers(0, 255))
        elif action == "insert":
            body[position:position] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del body[position]
    outcome(bytes(body))


@FUZZ
@given(st.one_of(st.none(), st.text(max_size=60),
                 st.sampled_from(["application/json", "application/json; charset=utf-16"])))
def test_arbitrary_content_types(content_type: str | None) -> None:
    result = outcome(json.dumps(valid()).encode(), content_type)
    if isinstance(result, InvoiceMessage):
        assert content_type is not None
        assert content_type.split(";")[0].strip().lower() == "application/json"


@FUZZ
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None, min_value=-10**14,
                   max_value=10**14))
def test_quantity_acceptance_matches_the_rule(number: Decimal) -> None:
    text = format(number, "f")
    data = valid()
    data["lines"][0]["quantity"] = text
    whole, _, fraction = text.lstrip("-").partition(".")
    expected = (not text.startswith("-") and number > 0 and len(whole.lstrip("0")) <= 12
                and len(fraction) <= 6)
    result = outcome(json.dumps(data).encode())
    assert isinstance(result, InvoiceMessage) == expected, (text, result)


_ODD_TEXT = st.text(alphabet=st.sampled_from(
    "aı \t\n\x00\x01\x08\x0c\x1f\x7f\ufffe\uffff\ud800\udfff\\\"/\u2028\U0001f600"), max_size=8)
_NUMBERS = (st.integers(min_value=-10 ** 101, max_value=10 ** 101)
            | st.sampled_from([10 ** 99, 10 ** 100, -10 ** 99, -(10 ** 99) + 1, 1e300, 1.5e-300,
                               1e99, 2.5e16])
            | st.floats(allow_nan=False, allow_infinity=False))


@st.composite
def shaped_or_not(draw: st.DrawFn) -> Any:
    """A valid message with a value put somewhere that the walk may refuse: odd text (as a
    value or a field name), long numbers, deep nesting."""
    data: Any = valid()
    value = draw(st.recursive(_ODD_TEXT | _NUMBERS | json_scalars,
                              lambda inner: st.lists(inner, max_size=3)
                              | st.dictionaries(_ODD_TEXT, inner, max_size=3), max_leaves=8))
    for _ in range(draw(st.integers(0, 18))):
        value = [value]
    paths = [path for path in _paths(data) if path]
    path = draw(st.sampled_from(paths))
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    if draw(st.booleans()):
        parent[path[-1]] = value
    elif isinstance(parent, dict):
        parent[draw(_ODD_TEXT)] = value
    else:
        data[draw(_ODD_TEXT)] = value
    return data


@FUZZ
@given(shaped_or_not(), st.booleans())
@example({**valid(), "x": 1e300}, True)
@example({**valid(), "x": {"y": "a\x01"}}, False)
@example({**valid(), "x": [[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]}, True)
def test_what_the_parser_reads_off_the_text_is_what_the_walk_finds(data: Any,
                                                                   ascii_only: bool) -> None:
    # parse_message skips the walk of a body whose text shows it needs none; the same decoded
    # value walked gives the same message or the same reason.
    body = json.dumps(data, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        decoded = decode_json(body)
    except InvalidMessage:
        return
    results: list[Any] = []
    for parse in (lambda: parse_message(body, CT), lambda: validate_message(decoded)):
        try:
            results.append(parse())
        except InvalidMessage as exc:
            results.append(exc.reason)
    assert results[0] == results[1]
    if isinstance(results[0], InvoiceMessage) and decode_body(body).shaped:
        assert len(results[0].body()) <= len(body)


def test_numbers_that_grow_written_out_are_measured_written_out() -> None:
    # Within the body's limit as sent, past it as stored: an exponent makes a short text a long
    # number, so such a body is measured by writing it, and refused.
    body = json.dumps({**valid(), "readings": ["1e99"] * 50_000},
                      separators=(",", ":")).replace('"1e99"', "1e99")
    assert len(body) < MAX_BODY_BYTES
    with pytest.raises(InvalidMessage, match="bytes as JSON; at most"):
        parse_message(body.encode(), CT)
    # The same numbers in plain notation stay as long as they came.
    plain = json.dumps({**valid(), "readings": [7] * 50_000}, separators=(",", ":"))
    assert len(parse_message(plain.encode(), CT).body()) <= len(plain)
