"""Each field rule's two ways (:class:`gapless.message.fields.Rule`): the ``fast`` way, checked
in pydantic-core without Python, accepts only values the rule itself accepts — for the rules
whose shape a regex says exactly (codes, choices, decimal strings) exactly those — and a value
only the rule accepts is still accepted; a refused value's reason is the rule's, with the field's
path and nothing of the two ways in it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import PydanticCustomError, SchemaValidator

from gapless.message import InvalidMessage, despatch, fields, parse_message, validate_message
from gapless.message.fields import MAX_NAME, PLAIN_TEXT, Rule
from tests.unit.test_message_schema import edited


def _rules() -> dict[str, tuple[Any, Rule]]:
    found = {}
    for module in (fields, despatch):
        for name, value in vars(module).items():
            for meta in getattr(value, "__metadata__", ()):
                if isinstance(meta, Rule):
                    found[f"{module.__name__.rsplit('.', 1)[1]}.{name}"] = (value, meta)
    return found


RULES = _rules()
FAST_RULES = {name: rule for name, (_, rule) in RULES.items() if rule.fast is not None}
#: Rules whose fast way is the rule itself (every valid value skips Python); the others' fast
#: way is a part: texts of common characters, ids of ASCII, notes without odd characters.
EXACT = {name for name in FAST_RULES if name.split(".")[1] not in {
    "Name", "Description", "InvoiceId", "Note"}}
DECIMALS = ("Quantity", "UnitPrice", "VatRate", "ExchangeRate", "Discount", "WithholdingRate")


def _fast_accepts(rule: Rule, value: Any) -> bool:
    assert rule.fast is not None
    try:
        SchemaValidator(rule.fast.schema()).validate_python(value)
    except ValidationError:
        return False
    return True


def _rule_accepts(rule: Rule, value: Any) -> bool:
    try:
        rule.func(value)
    except PydanticCustomError:
        return False
    return True


_ODD = "\t\n\r\x00\x0b\x1f\x7f\x85\xa0\xad\u2028\u200b\ufeff\ufffe\uffff\U0001f600日"
_PLAIN_SAMPLE = "".join(chr(low) + chr(high) for low, high in PLAIN_TEXT)


@st.composite
def values(draw: st.DrawFn) -> Any:
    """Strings of digits, points, signs, codes' letters, plain and odd characters; their
    edits; and values of other types."""
    alphabet = st.sampled_from("0123456789.-+eE ABCZaz_/:" + _PLAIN_SAMPLE + _ODD)
    pools: list[st.SearchStrategy[Any]] = [
        st.text(alphabet=alphabet, max_size=40),
        st.text(alphabet="0123456789.", max_size=24),
        st.sampled_from([*fields.PROFILES, *fields.INVOICE_TYPES, *fields.PAYMENT_METHODS,
                         *despatch.DESPATCH_TYPES, *despatch.PLATE_SCHEMES, "user", "batch",
                         "despatch", "TRY", "C62", "301", "ABC2026000000001", "34ABC123",
                         "SE-1234567", "bench", "Kadıköy", "0.5", "100.00", "1" * 65]),
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    ]
    return edited(draw, draw(st.one_of(pools)), ["", "0", " ", "\n", "a", "ı", "日"])


@pytest.mark.parametrize("name", sorted(FAST_RULES))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values())
def test_the_fast_way_accepts_only_what_the_rule_accepts(name: str, value: Any) -> None:
    rule = FAST_RULES[name]
    fast, slow = _fast_accepts(rule, value), _rule_accepts(rule, value)
    assert slow or not fast, f"{name}: the fast way accepts {value!r}, the rule refuses it"
    if name in EXACT:
        assert fast == slow, f"{name}: {value!r} is left to Python"


@pytest.mark.parametrize("name", DECIMALS)
def test_decimal_strings_up_to_six_characters_agree_exactly(name: str) -> None:
    rule = FAST_RULES[f"fields.{name}"]
    for size in range(7):
        for chars in itertools.product("0159.", repeat=size):
            value = "".join(chars)
            assert _fast_accepts(rule, value) == _rule_accepts(rule, value), (name, value)


@pytest.mark.parametrize(("name", "value"), [
    ("Quantity", "0000000000000000000001.5"), ("Quantity", "1234567890123"),
    ("Quantity", "123456789012.123456"), ("Quantity", "0.000001"), ("Quantity", "0.0000001"),
    ("Quantity", "1" * 65), ("Quantity", "0" * 63 + "1"), ("UnitPrice", "0"),
    ("UnitPrice", "999999999999999.99999999"), ("VatRate", "0100.00"), ("VatRate", "100.001"),
    ("VatRate", "100.01"), ("VatRate", "99.99"), ("WithholdingRate", "0.00"),
    ("WithholdingRate", "0.01"), ("WithholdingRate", "100"), ("Discount", "1.234"),
    ("ExchangeRate", "-1"), ("ExchangeRate", "+1"), ("ExchangeRate", "1e3"),
])
def test_decimal_edges_agree(name: str, value: str) -> None:
    rule = FAST_RULES[f"fields.{name}"]
    assert _fast_accepts(rule, value) == _rule_accepts(rule, value)


def test_plain_text_characters_are_printable_and_not_white_space() -> None:
    for low, high in PLAIN_TEXT:
        for code in range(low, high + 1):
            char = chr(code)
            assert char.isprintable(), f"U+{code:04X}"
            assert not char.isspace(), f"U+{code:04X}"


def test_a_name_of_plain_characters_is_bounded_by_characters_not_bytes() -> None:
    rule = FAST_RULES["fields.Name"]
    assert _fast_accepts(rule, "ş" * MAX_NAME)
    assert not _fast_accepts(rule, "ş" * (MAX_NAME + 1))
    assert not _rule_accepts(rule, "ş" * (MAX_NAME + 1))
    assert not _fast_accepts(rule, "   ")
    assert not _rule_accepts(rule, "   ")


def _message(**changes: Any) -> dict[str, Any]:
    message = {"invoice_id": "inv-1", "tenant": "acme", "series": "ABC",
               "issue_date": "2026-11-29", "currency": "TRY",
               "customer": {"tax_id": "1234567890", "name": "Acme Ltd"},
               "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                          "vat_rate": "20"}]}
    message.update(changes)
    return message


@pytest.mark.parametrize("name", ["日本商事 株式会社", "Ωmega ✓", "Çay Evi \U0001f600"])
def test_a_value_only_the_rule_accepts_is_accepted_as_it_is(name: str) -> None:
    assert not _fast_accepts(FAST_RULES["fields.Name"], name)
    data = _message(customer={"tax_id": "1234567890", "name": name})
    message = validate_message(data)
    assert message.customer.name == name
    assert parse_message(json.dumps(data).encode(), "application/json") == message


@pytest.mark.parametrize(("changes", "reason"), [
    ({"lines": [{"description": "W", "quantity": "0", "unit_price": "1", "vat_rate": "20"}]},
     "lines.0.quantity: must be a decimal string greater than 0"),
    ({"currency": "try"}, "currency: must be a 3-letter upper-case ISO 4217 code, e.g. TRY"),
    ({"customer": {"tax_id": "1234567890", "name": " "}},
     "customer.name: must be 1 to 256 characters, not blank"),
    ({"priority": "soon", "type": "SALE"},
     "priority: must be \"user\" or \"batch\" (or absent) (and 1 more)"),
    ({"invoice_id": 7}, "invoice_id: must be a string, not a number"),
])
def test_a_refused_value_s_reason_is_the_rule_s(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        validate_message(_message(**changes))
    assert refused.value.reason == reason
    assert "\x00" not in refused.value.reason
