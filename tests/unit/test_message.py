"""The message contract: every validation rule, money as strings, sizes, reasons, priorities."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from gapless.message import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_EXTRA_FIELDS,
    MAX_LINES,
    MAX_REASON,
    InvalidMessage,
    InvoiceMessage,
    parse_message,
    priority_of,
    validate_message,
)

TAX_ID = "1234567890"
CT = "application/json"


def valid() -> dict[str, Any]:
    return {"invoice_id": "shop-42-000981", "tenant": "acme", "series": "ABC", "priority": "user",
            "issue_date": "2026-11-22", "currency": "TRY",
            "customer": {"tax_id": TAX_ID, "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}


def body(data: Any) -> bytes:
    return json.dumps(data).encode()


def reason_for(data: Any, content_type: str | None = CT) -> str:
    raw = data if isinstance(data, bytes) else body(data)
    with pytest.raises(InvalidMessage) as caught:
        parse_message(raw, content_type)
    reason = caught.value.reason
    assert reason == str(caught.value)
    assert "\n" not in reason
    assert len(reason) <= MAX_REASON
    assert TAX_ID not in reason
    return reason


def mutated(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data = valid()
    change(data)
    return data


def set_line(key: str, value: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["lines"][0].__setitem__(key, value)


def set_top(key: str, value: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d.__setitem__(key, value)


def set_customer(key: str, value: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["customer"].__setitem__(key, value)


# --- the valid message ----------------------------------------------------------------------------


def test_the_contract_example_parses_and_keeps_every_field() -> None:
    message = parse_message(body(valid()), CT)
    assert message.invoice_id == "shop-42-000981"
    assert (message.tenant, message.series, message.priority) == ("acme", "ABC", "user")
    assert message.issue_date == date(2026, 11, 22)
    assert message.customer.tax_id == TAX_ID
    line = message.lines[0]
    assert (line.quantity_value, line.unit_price_value, line.vat_rate_value) == (
        Decimal(2), Decimal("10.00"), Decimal(20))
    assert message.payload() == valid()


def test_payload_keeps_the_producers_digits_and_round_trips() -> None:
    data = mutated(set_line("unit_price", "0.00000001"))
    data["lines"][0]["quantity"] = "1.500000"
    message = parse_message(body(data), CT)
    assert message.payload()["lines"][0]["unit_price"] == "0.00000001"  # never "1E-8"
    assert message.payload()["lines"][0]["quantity"] == "1.500000"
    assert parse_message(message.body(), CT) == message


def test_unknown_top_level_fields_are_kept_in_the_payload() -> None:
    data = valid() | {"kind": "e-archive", "meta": {"source": "shop", "tags": [1, 2.5, None]}}
    message = parse_message(body(data), CT)
    assert message.payload()["kind"] == "e-archive"
    assert message.payload()["meta"] == {"source": "shop", "tags": [1, 2.5, None]}


def test_absent_priority_is_batch_and_not_invented_in_the_payload() -> None:
    data = valid()
    del data["priority"]
    message = parse_message(body(data), CT)
    assert message.priority is None
    assert message.priority_value == 1
    assert "priority" not in message.payload()


def test_the_model_is_frozen() -> None:
    message = parse_message(body(valid()), CT)
    with pytest.raises(Exception, match="frozen"):
        message.tenant = "other"  # type: ignore[misc]


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON;charset=\"UTF-8\"",
    "application/json; charset=utf8",
])
def test_accepted_content_types(content_type: str) -> None:
    assert parse_message(body(valid()), content_type).invoice_id == "shop-42-000981"


def test_a_utf8_byte_order_mark_is_tolerated() -> None:
    assert parse_message(b"\xef\xbb\xbf" + body(valid()), CT).tenant == "acme"


def test_unicode_text_is_fine_where_text_is_free() -> None:
    data = mutated(set_customer("name", "Anadolu Gıda A.Ş. — İzmir"))
    data["lines"][0]["description"] = "Çay, 1 kg\nsecond line\tindented"
    message = parse_message(json.dumps(data, ensure_ascii=False).encode(), CT)
    assert message.customer.name.endswith("İzmir")


def test_limits_are_inclusive() -> None:
    data = valid()
    data["invoice_id"] = "x" * 128
    data["customer"]["name"] = "n" * 256
    data["customer"]["tax_id"] = "12345678901"
    data["lines"] = [{"description": "d" * 1000, "quantity": "999999999999.999999",
                      "unit_price": "999999999999999.99999999", "vat_rate": "100.00"}] * 100
    data["lines"].append({"description": "free", "quantity": "0.000001", "unit_price": "0",
                          "vat_rate": "0"})
    assert len(parse_message(body(data), CT).lines) == 101
    data["lines"] = [valid()["lines"][0]] * MAX_LINES
    assert len(parse_message(body(data), CT).lines) == MAX_LINES


# --- each rule, and the reason it gives -----------------------------------------------------------

RULES: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    # invoice_id
    ("missing invoice_id", lambda d: d.pop("invoice_id"), "invoice_id: required field is missing"),
    ("empty invoice_id", set_top("invoice_id", ""), "invoice_id: must be 1 to 128 characters"),
    ("long invoice_id", set_top("invoice_id", "x" * 129), "invoice_id: must be 1 to 128"),
    ("space in invoice_id", set_top("invoice_id", "shop 42"), "invoice_id: must be printable"),
    ("tab in invoice_id", set_top("invoice_id", "shop\t42"), "invoice_id: must be printable"),
    ("control in invoice_id", set_top("invoice_id", "a\x07b"), "invoice_id: holds a character XML "
     "cannot carry (U+0007)"),
    ("numeric invoice_id", set_top("invoice_id", 42), "invoice_id: must be a string, not a number"),
    # tenant and series reuse the numbering rules
    ("missing tenant", lambda d: d.pop("tenant"), "tenant: required field is missing"),
    ("tenant with space", set_top("tenant", "ac me"), "tenant: must be 1-64 letters"),
    ("tenant with newline", set_top("tenant", "acme\n"), "tenant: must be 1-64 letters"),
    ("tenant too long", set_top("tenant", "a" * 65), "tenant: must be 1-64 letters"),
    ("series with dot", set_top("series", "A.B"), "series: must be 1-32 letters"),
    ("series empty", set_top("series", ""), "series: must be 1-32 letters"),
    ("series null", set_top("series", None), "series: must be a string, not null"),
    # priority
    ("unknown priority", set_top("priority", "urgent"), 'priority: must be "user" or "batch"'),
    ("numeric priority", set_top("priority", 4), 'priority: must be "user" or "batch"'),
    ("list priority", set_top("priority", ["user"]), 'priority: must be "user" or "batch"'),
    # issue_date
    ("missing date", lambda d: d.pop("issue_date"), "issue_date: required field is missing"),
    ("impossible date", set_top("issue_date", "2026-02-30"), "issue_date: is not a real"),
    ("date with time", set_top("issue_date", "2026-11-22T10:00:00"), "issue_date: must be a date"),
    ("date as number", set_top("issue_date", 20261122), "issue_date: must be a string"),
    ("date other format", set_top("issue_date", "22.11.2026"), "issue_date: must be a date"),
    # currency
    ("lower-case currency", set_top("currency", "try"), "currency: must be a 3-letter"),
    ("long currency", set_top("currency", "TRYY"), "currency: must be a 3-letter"),
    # customer
    ("missing customer", lambda d: d.pop("customer"), "customer: required field is missing"),
    ("customer not object", set_top("customer", "Example"), "customer: must be an object"),
    ("short tax id", set_customer("tax_id", "123456789"), "customer.tax_id: must be a string of "
     "10 or 11 digits"),
    ("long tax id", set_customer("tax_id", "123456789012"), "customer.tax_id: must be a string"),
    ("letters in tax id", set_customer("tax_id", "12345x7890"), "customer.tax_id: must be"),
    ("arabic-indic digits", set_customer("tax_id", "١٢٣٤٥٦٧٨٩٠"), "customer.tax_id: must be"),
    ("tax id as number", set_customer("tax_id", 1234567890), "customer.tax_id: must be a string"),
    ("blank name", set_customer("name", "   "), "customer.name: must be 1 to 256 characters"),
    ("long name", set_customer("name", "n" * 257), "customer.name: must be at most 256"),
    ("newline in name", set_customer("name", "A\nB"), "customer.name: must not contain control"),
    ("unknown customer field", set_customer("iban", "TR00"), "customer.iban: unknown field"),
    # lines
    ("missing lines", lambda d: d.pop("lines"), "lines: required field is missing"),
    ("no lines", set_top("lines", []), "lines: must contain at least 1 line"),
    ("too many lines", lambda d: d.__setitem__("lines", d["lines"] * (MAX_LINES + 1)),
     "lines: must contain at most 1000 lines"),
    ("lines not a list", set_top("lines", {"0": {}}), "lines: must be a list"),
    ("line not an object", set_top("lines", ["Widget"]), "lines.0: must be an object"),
    ("missing quantity", lambda d: d["lines"][0].pop("quantity"),
     "lines.0.quantity: required field is missing"),
    ("unknown line field", set_line("discont", "5"), "lines.0.discont: unknown field"),
    ("blank description", set_line("description", ""), "lines.0.description: must be 1 to 1000"),
    ("long description", set_line("description", "d" * 1001), "lines.0.description: must be at "
     "most 1000"),
    # money and quantities: strings, plain notation, bounds
    ("quantity as int", set_line("quantity", 2), "lines.0.quantity: must be a decimal string "
     "such as \"10.00\", not a JSON number"),
    ("price as float", set_line("unit_price", 10.5), "lines.0.unit_price: must be a decimal "
     "string such as \"10.00\", not a JSON number"),
    ("vat as float", set_line("vat_rate", 20.0), "lines.0.vat_rate: must be a decimal string "
     "such as"),
    ("quantity as bool", set_line("quantity", True), "lines.0.quantity: must be a decimal string, "
     "not a boolean"),
    ("quantity null", set_line("quantity", None), "lines.0.quantity: must be a decimal string, "
     "not null"),
    ("zero quantity", set_line("quantity", "0"), "lines.0.quantity: must be a decimal string "
     "greater than 0"),
    ("negative quantity", set_line("quantity", "-1"), "lines.0.quantity: must be a decimal "
     "string greater than 0"),
    ("negative price", set_line("unit_price", "-0.01"), "lines.0.unit_price: must be a decimal "
     "string greater than or equal to 0"),
    ("negative zero price", set_line("unit_price", "-0"), "lines.0.unit_price: must be a decimal "
     "string greater than or equal to 0"),
    ("vat over 100", set_line("vat_rate", "100.01"), "lines.0.vat_rate: must be a decimal string "
     "between 0 and 100"),
    ("exponent", set_line("quantity", "1e3"), "lines.0.quantity: must be a decimal string"),
    ("NaN string", set_line("unit_price", "NaN"), "lines.0.unit_price: must be a decimal string"),
    ("Infinity string", set_line("unit_price", "Infinity"), "lines.0.unit_price: must be a "
     "decimal"),
    ("plus sign", set_line("quantity", "+2"), "lines.0.quantity: must be a decimal string"),
    ("comma decimal", set_line("unit_price", "10,00"), "lines.0.unit_price: must be a decimal"),
    ("spaces", set_line("unit_price", " 10.00"), "lines.0.unit_price: must be a decimal"),
    ("dangling point", set_line("unit_price", "10."), "lines.0.unit_price: must be a decimal"),
    ("leading point", set_line("unit_price", ".5"), "lines.0.unit_price: must be a decimal"),
    ("too many fraction digits", set_line("unit_price", "1.123456789"),
     "lines.0.unit_price: must have at most 15 digits before the point and 8 after it"),
    ("too many whole digits", set_line("quantity", "1" * 13),
     "lines.0.quantity: must have at most 12 digits before the point and 6 after it"),
    ("huge digit string", set_line("unit_price", "9" * 5000), "lines.0.unit_price: must be a "
     "decimal string"),
    ("vat fraction digits", set_line("vat_rate", "18.005"), "lines.0.vat_rate: must have at most "
     "3 digits before the point and 2 after it"),
    # text storable in PostgreSQL jsonb
    ("NUL in name", set_customer("name", "Ex\x00ample"),
     "customer.name: holds a character XML cannot carry (U+0000)"),
    ("lone surrogate in note", set_top("note", "\ud800"), "note: holds a character XML cannot "
     "carry (U+D800)"),
    ("NUL in extra key", set_top("no\x00te", 1), "a field name holds a character XML cannot "
     "carry (U+0000)"),
    # extra fields and nesting
    ("too many extra fields",
     lambda d: d.update({f"extra{i}": i for i in range(MAX_EXTRA_FIELDS + 1)}),
     f"unknown top-level fields; at most {MAX_EXTRA_FIELDS}"),
    ("long extra field name", set_top("k" * 65, 1), "unknown top-level field names must be 1 to "
     "64"),
    ("deep extra", set_top("deep", json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))),
     f"nested more than {MAX_DEPTH} levels deep"),
]


@pytest.mark.parametrize(("change", "expected"), [(c, e) for _, c, e in RULES],
                         ids=[name for name, _, _ in RULES])
def test_each_rule_refuses_with_a_reason_naming_the_field(
        change: Callable[[dict[str, Any]], object], expected: str) -> None:
    assert expected in reason_for(mutated(change))


def test_several_problems_name_the_first_and_count_the_rest() -> None:
    data = mutated(set_line("quantity", 2))
    data["currency"] = "try"
    data["lines"][0]["vat_rate"] = "101"
    reason = reason_for(data)
    assert reason.startswith("currency: must be a 3-letter")
    assert reason.endswith("(and 2 more)")


def test_field_names_that_are_not_identifiers_are_masked_in_reasons() -> None:
    # A key could be anything a producer typed, a tax id included: never echo it.
    reason = reason_for(mutated(set_customer(TAX_ID, "x")))
    assert reason == "customer.<field>: unknown field (extra fields are kept only at the top level)"


def test_a_tax_id_never_appears_in_a_reason() -> None:
    for bad in ("123456789", "123456789012", "12345x7890"):
        data = mutated(set_customer("tax_id", bad))
        data["lines"][0]["quantity"] = "-1"
        reason = reason_for(data)
        assert bad not in reason


# --- the body: content type, size, encoding, JSON ------------------------------------------------


@pytest.mark.parametrize(("content_type", "expected"), [
    (None, "missing content type; must be application/json"),
    ("", "missing content type"),
    ("text/plain", "content type 'text/plain' is not application/json"),
    ("application/xml", "is not application/json"),
    ("application/jsonx", "is not application/json"),
    ("application/json; charset=latin-1", "charset must be utf-8"),
])
def test_wrong_content_type_is_refused(content_type: str | None, expected: str) -> None:
    assert expected in reason_for(valid(), content_type)


def test_a_1_mb_body_is_refused_before_json_parsing() -> None:
    # Not even JSON: if it were parsed first, the reason would be about JSON.
    big = b"{" + b"x" * (1024 * 1024)
    assert reason_for(big) == f"body is {len(big)} bytes; at most {MAX_BODY_BYTES} are accepted"


def test_a_body_just_over_the_limit_is_refused_and_at_the_limit_accepted() -> None:
    data = valid() | {"note": ""}
    size = len(body(data))
    data["note"] = "n" * (MAX_BODY_BYTES - size)
    assert len(body(data)) == MAX_BODY_BYTES
    assert parse_message(body(data), CT).payload()["note"] == data["note"]
    data["note"] += "n"
    assert "at most 262144 are accepted" in reason_for(data)


def test_a_model_that_would_not_fit_in_a_body_is_invalid_too() -> None:
    data = valid()
    data["lines"] = [{"description": "d" * 1000, "quantity": "1", "unit_price": "1",
                      "vat_rate": "20"}] * 300
    with pytest.raises(InvalidMessage, match="bytes as JSON; at most 262144 are accepted"):
        validate_message(data)


@pytest.mark.parametrize(("raw", "expected"), [
    (b"\xff\xfe{}", "body is not valid UTF-8"),
    (b"", "body is not valid JSON"),
    (b"not json", "body is not valid JSON: Expecting value at line 1 column 1"),
    (b'{"invoice_id": "a",', "body is not valid JSON"),
    (b"[1, 2]", "body must be a JSON object, not a list"),
    (b'"text"', "body must be a JSON object, not a string"),
    (b"null", "body must be a JSON object, not null"),
    (b"42", "body must be a JSON object, not a number"),
    (b'{"a": NaN}', "NaN and Infinity are not allowed"),
    (b'{"a": -Infinity}', "NaN and Infinity are not allowed"),
    (b'{"a": 1, "a": 2}', "body has a duplicate field name"),
    (b'{"a": 1, "b": 2, "a": 1}', "body has a duplicate field name"),  # the same value again
    (b"[" * 50_000 + b"]" * 50_000, "levels deep"),
    (b'{"a": ' + b"1" * 5000 + b"}", "a number literal is too long"),
    (b"{}", "invoice_id: required field is missing (and 5 more)"),
])
def test_bodies_that_are_not_messages(raw: bytes, expected: str) -> None:
    assert expected in reason_for(raw)


def test_duplicate_keys_inside_nested_objects_are_refused() -> None:
    raw = body(valid()).replace(b'"name": "Example Ltd"',
                                b'"name": "Example Ltd", "name": "Other"')
    assert "duplicate field name" in reason_for(raw)


# --- validate_message from Python values ----------------------------------------------------------


def test_validate_message_accepts_a_model_as_is() -> None:
    message = validate_message(valid())
    assert validate_message(message) is message
    assert InvoiceMessage.model_validate(valid()) == message


@pytest.mark.parametrize(("value", "expected"), [
    ([valid()], "message must be a JSON object, not a list"),
    (valid() | {"when": date(2026, 1, 1)}, "when: date is not a JSON value"),
    (valid() | {"amount": Decimal("NaN")}, "amount: NaN and Infinity are not JSON"),
    (valid() | {"amount": Decimal("1E+101")}, "amount: a number written out may have at most"),
    (valid() | {"ratio": float("nan")}, "ratio: NaN and Infinity are not JSON"),
    (valid() | {"keys": {1: "a"}}, "keys: object keys must be strings"),
])
def test_validate_message_refuses_values_json_cannot_carry(value: Any, expected: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        validate_message(value)
    assert expected in caught.value.reason


def test_a_python_producer_passing_decimals_for_money_gets_a_clear_reason() -> None:
    data = copy.deepcopy(valid())
    data["lines"][0]["unit_price"] = Decimal("10.00")
    with pytest.raises(InvalidMessage,
                       match=r"lines\.0\.unit_price: must be a decimal string such as \"10\.00\", "
                             r"not a JSON number"):
        validate_message(data)


# --- priorities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("prop", "body_priority", "expected"), [
    (4, None, 4), (1, None, 1), (0, None, 0), (2, "user", 2), (9, None, 4), (255, "batch", 4),
    (4, "batch", 4), (1, "user", 1),
    (None, None, 1), (None, "batch", 1), (None, "user", 4), (None, "bogus", 1),
])
def test_priority_of(prop: int | None, body_priority: str | None, expected: int) -> None:
    assert priority_of(prop, body_priority) == expected
