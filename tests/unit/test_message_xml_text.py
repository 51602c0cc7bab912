"""One check for every text field: a character XML 1.0 cannot carry is refused before any number,
naming the field, whatever the field and the document kind; and numbers keep their exact text
(gapless.message.jsontext)."""

from __future__ import annotations

import copy
import json
import types
import typing
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from pydantic import BaseModel

from gapless.message import (
    INVOICE_TYPES,
    MAX_DEPTH,
    PROFILES,
    InvalidMessage,
    InvoiceMessage,
    decode_json,
    parse_message,
    validate_message,
)
from gapless.message.jsontext import NotJson, TooDeep, dumps, loads, nests_within, number_text

#: XML 1.0's Char production excludes these (surrogates stand for the whole block).
NOT_XML = [chr(c) for c in [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)]] + [
    "\ud800", "\udbff", "\udc00", "\udfff", "\ufffe", "\uffff"]

#: A message with every part of the contract present (all valid), so that every field path of the
#: model exists in it. A field added to the model must be added here: the test below says so.
FULL: dict[str, Any] = {
    "invoice_id": "shop-42", "tenant": "acme", "series": "ABC", "priority": "user",
    "issue_date": "2026-11-20", "currency": "USD", "exchange_rate": "34.5",
    "profile": "TICARIFATURA", "type": "SATIS", "note": "Thank you",
    "customer": {
        "tax_id": "1234567890", "name": "Example Ltd", "tax_office": "Çankaya", "alias": "urn:pk",
        "address": {"street": "Atatürk Blv. 1", "district": "Çankaya", "city": "Ankara",
                    "postal_zone": "06100", "country": "Türkiye"},
        "person": {"first_name": "Ayşe", "family_name": "Yılmaz"}},
    "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
               "vat_rate": "20", "unit_code": "C62", "vat_exemption_code": "301",
               "vat_exemption_reason": "Export", "withholding_code": "601",
               "withholding_rate": "40", "discount": "1.00", "gtip": "123456789012",
               "dib_line_code": "ABCDEFGHIJK"}],
    "billing_reference": [{"number": "ABC2026000000001", "issue_date": "2026-11-01"}],
    "despatch_references": [{"number": "IRS2026000000004", "issue_date": "2026-11-18"}],
    "export": {"incoterms": "FOB", "transport_mode": "1",
               "delivery_address": {"street": "Main St 1", "district": "Mitte", "city": "Berlin",
                                    "postal_zone": "10115", "country": "Germany"}},
    "payment": {"iban": "TR330006100519786457841326"},
    "earsiv": {"send_type": "ELEKTRONIK", "is_despatch": True, "internet_sale": {
        "website": "shop.example", "payment_method": "EFT/HAVALE", "payment_date": "2026-11-19",
        "shipment_date": "2026-11-20",
        "carrier": {"tax_id": "9876543210", "name": "Kargo A.Ş.",
                    "address": {"street": "Rıhtım Cad. 1", "district": "Kadıköy",
                                "city": "İstanbul", "postal_zone": "34716",
                                "country": "Türkiye"}}}},
}


def _parts(annotation: Any) -> list[Any]:
    """The types an annotation admits (Optional and unions unwrapped, Annotated stripped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _parts(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [part for arg in typing.get_args(annotation) for part in _parts(arg)]
    return [annotation]


def field_paths(model: type[BaseModel], prefix: tuple[str | int, ...] = ()
                ) -> list[tuple[str | int, ...]]:
    """Every leaf field of ``model`` that JSON writes as text, as a path (a list's first item
    stands for all; a flag, a JSON boolean, is no text), found from the model itself: a field
    added later is a path here without anyone listing it."""
    paths: list[tuple[str | int, ...]] = []
    for name, info in model.model_fields.items():
        path: tuple[str | int, ...] = (*prefix, name)
        for part in _parts(info.annotation):
            item = part
            if typing.get_origin(part) is list:
                (item,) = typing.get_args(part)
                path = (*path, 0)
            if isinstance(item, type) and issubclass(item, BaseModel):
                paths += field_paths(item, path)
                break
        else:
            if _parts(info.annotation) != [bool]:
                paths.append(path)
    return paths


PATHS = field_paths(InvoiceMessage)


def dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in path)


def get(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def put(data: Any, path: tuple[str | int, ...], value: Any) -> None:
    get(data, path[:-1])[path[-1]] = value


def test_every_field_of_the_model_is_in_the_full_message_and_it_is_valid() -> None:
    assert len(PATHS) > 50  # the walk found the nested parts, not just the top level
    for path in PATHS:
        assert isinstance(get(FULL, path), str), dotted(path)
    validate_message(FULL)


@settings(max_examples=400, deadline=None)
@given(path=st.sampled_from(PATHS), bad=st.sampled_from(NOT_XML), data=st.data(),
       kind=st.tuples(st.sampled_from(INVOICE_TYPES), st.sampled_from(PROFILES)))
def test_a_character_xml_cannot_carry_is_refused_in_every_text_field_naming_it(
        path: tuple[str | int, ...], bad: str, data: st.DataObject,
        kind: tuple[str, str]) -> None:
    message = copy.deepcopy(FULL)
    message["type"], message["profile"] = kind
    value = get(message, path)
    at = data.draw(st.integers(0, len(value)), label="position")
    put(message, path, value[:at] + bad + value[at:])
    expected = f"{dotted(path)}: holds a character XML cannot carry (U+{ord(bad):04X})"
    with pytest.raises(InvalidMessage) as refused:
        validate_message(message)
    assert refused.value.reason == expected
    if "\ud800" <= bad <= "\udfff":
        return  # a lone surrogate cannot even be encoded as a UTF-8 body
    with pytest.raises(InvalidMessage) as parsed:
        parse_message(json.dumps(message).encode(), "application/json")
    assert parsed.value.reason == expected


@pytest.mark.parametrize("bad", NOT_XML)
def test_the_refused_characters_are_exactly_those_lxml_cannot_write(bad: str) -> None:
    element = etree.Element("Note")
    with pytest.raises(ValueError, match=r"XML compatible|surrogates not allowed"):
        element.text = f"a{bad}b"


@pytest.mark.parametrize("good", ["\t", "\n", "\r", " ", "\x7f", "\x85", "\u2028", "\u202e",
                                  "\ufdd0", "\ufffd", "\U0001f600", "\U0010fffd"])
def test_characters_xml_carries_pass_the_check(good: str) -> None:
    element = etree.Element("Note")
    element.text = f"a{good}b"
    message = copy.deepcopy(FULL)
    message["note"] = f"a{good}b"
    assert validate_message(message).note == f"a{good}b"


def test_field_names_of_unknown_fields_are_checked_too() -> None:
    with pytest.raises(InvalidMessage, match=r"^meta: a field name holds a character XML cannot "
                                             r"carry \(U\+0001\)$"):
        validate_message({**FULL, "meta": {"a\x01": 1}})
    with pytest.raises(InvalidMessage, match=r"^meta\.0: holds a character XML cannot carry"):
        validate_message({**FULL, "meta": ["\x1f"]})


# --- exact numbers --------------------------------------------------------------------------------

EXACT = "0.1000000000000000055511151231257827"


def test_a_number_in_the_body_is_kept_with_its_exact_text() -> None:
    body = json.dumps({**FULL, "weight": "@"}).replace('"@"', EXACT).encode()
    message = parse_message(body, "application/json")
    assert message.payload()["weight"] == Decimal(EXACT)
    assert f'"weight":{EXACT}'.encode() in message.body()
    # the API and the producer re-publish the body: it comes back the same message
    assert parse_message(message.body(), "application/json") == message


@pytest.mark.parametrize(("text", "written"), [
    ("1.50", "1.50"), ("1e2", "100"), ("1E-3", "0.001"), ("-0.0", "0.0"), ("-2.5e1", "-25"),
    ("0e5", "0"), ("123456789012345678901234567890.5", "123456789012345678901234567890.5"),
])
def test_numbers_are_written_in_plain_notation_as_postgresql_keeps_them(
        text: str, written: str) -> None:
    assert number_text(Decimal(text)) == written
    assert dumps(loads(f"[{text}]", max_depth=2)) == f"[{written}]"


def test_dumps_without_decimals_is_the_standard_compact_json() -> None:
    value = {"b": [1, 2.5, "ü", None, True], "a": {"x": "\u2028"}}
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert dumps(value, sort_keys=True) == json.dumps(value, ensure_ascii=False, sort_keys=True,
                                                      separators=(",", ":"))
    with_decimal = {**value, "c": Decimal("1.10")}
    assert dumps(with_decimal, sort_keys=True) == json.dumps(
        {**value, "c": "@"}, ensure_ascii=False, sort_keys=True,
        separators=(",", ":")).replace('"@"', "1.10")


def test_a_number_whose_exponent_would_make_it_huge_is_refused() -> None:
    body = json.dumps({**FULL, "weight": "@"}).replace('"@"', "1e999999999").encode()
    with pytest.raises(InvalidMessage, match=r"^weight: a number written out may have at most"):
        parse_message(body, "application/json")


def test_nesting_is_bounded_without_recursion_errors() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(TooDeep):
        loads(deep, max_depth=32)
    with pytest.raises(TooDeep):
        loads(b"[" * 40 + b"]" * 40, max_depth=32)
    assert loads(b"[" * 32 + b"]" * 32, max_depth=32) is not None
    with pytest.raises(InvalidMessage, match=f"body nests more than {MAX_DEPTH} levels deep"):
        decode_json(deep)
    with pytest.raises(NotJson, match="not valid JSON"):
        loads(b"<html>", max_depth=32)
    with pytest.raises(NotJson, match="not valid UTF-8"):
        loads(b"\"\xff\"", max_depth=32)


def _depth(value: object) -> int:
    """The levels of dicts and lists in ``value``, recursively (the reference)."""
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


_NESTED = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                       lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                       max_leaves=40)


@given(_NESTED, st.integers(0, 8))
def test_nests_within_agrees_with_the_recursive_depth(value: object, max_depth: int) -> None:
    assert nests_within(value, max_depth) is (_depth(value) <= max_depth)
