"""A message's body is its payload written as JSON (:func:`gapless.message.jsontext.dumps`),
byte for byte, whichever way it is made: pydantic's serializer writes the body of a message
without unknown fields at once (a third of validating a message cheaper), the payload's writer
the rest. Proven on generated messages of every document kind, with any text in any text field,
explicit nulls and every priority."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gapless.demo.samples import sample_messages, sample_note
from gapless.message import InvalidMessage, parse_message, validate_message
from gapless.message.jsontext import dumps
from tests.hostile.strategies import HOSTILE_PIECES, put, text_paths

CT = "application/json"
EXAMPLES = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

#: Texts that every JSON writer must escape alike, and some it must not escape at all.
_TEXTS = st.one_of(
    st.text(max_size=20),
    st.sampled_from(HOSTILE_PIECES),
    st.sampled_from(["a\nb", "tab\there", "quote \" and \\ back", "\u2028\u2029", "ü ş ğ İ ı",
                     "\x7f", "</cbc:Note>", "\U0001f600", "", " "]))


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A demo message of any kind (or a dispatch note), one text replaced, its priority any of
    the contract's (or null, or absent), and maybe an optional field given as an explicit
    null."""
    seed = draw(st.integers(0, 10_000))
    [message] = sample_messages(1, tenant="acme", series="ABC", priority="batch", seed=seed)
    if draw(st.booleans()):
        message = sample_note(random.Random(seed), message)
    path = draw(st.sampled_from(text_paths(message)))
    put(message, path, draw(_TEXTS))
    priority = draw(st.sampled_from(["user", "batch", None, "absent"]))
    if priority == "absent":
        message.pop("priority")
    else:
        message["priority"] = priority
    if draw(st.booleans()):
        message["customer"]["tax_office"] = None
    if draw(st.booleans()):
        message["note"] = None
    return message


@EXAMPLES
@given(messages())
def test_the_body_is_the_payload_written_as_json(data: dict[str, Any]) -> None:
    try:
        message = validate_message(data)
    except InvalidMessage:
        return  # a text the contract refuses: no body to compare
    assert message.body() == dumps(message.payload()).encode()
    assert parse_message(message.body(), CT) == message


def test_the_messages_the_property_starts_from_are_valid() -> None:
    """The property above is not vacuous: before a text is replaced, every generated message
    (invoices of every kind, dispatch notes) is valid, and its body is its payload's JSON."""
    rng = random.Random(7)
    for seed in range(60):
        [data] = sample_messages(1, tenant="acme", series="ABC", priority="batch", seed=seed)
        if seed % 2:
            data = sample_note(rng, data)
        message = validate_message(data)
        assert message.body() == dumps(message.payload()).encode()


def test_a_null_priority_is_left_out_of_the_body() -> None:
    [data] = sample_messages(1, tenant="acme", series="ABC", priority="batch", seed=1)
    data["priority"] = None
    body = json.loads(validate_message(data).body())
    assert "priority" not in body


def test_unknown_fields_keep_their_exact_numbers_in_the_body() -> None:
    [data] = sample_messages(1, tenant="acme", series="ABC", priority="batch", seed=2)
    data["order_ref"] = {"total": Decimal("12.50"), "count": 3, "weight": 0.1}
    message = validate_message(data)
    assert message.body() == dumps(message.payload()).encode()
    text = message.body().decode()
    assert '"total":12.50' in text
    assert '"weight":0.1' in text
    assert '"count":3' in text


def test_a_copy_with_a_series_chosen_has_the_body_of_its_payload() -> None:
    """Routing copies a message with the series it chose: the copy's body is made anew, and is
    its own payload's JSON too."""
    [data] = sample_messages(1, tenant="acme", series="ABC", priority="user", seed=3)
    del data["series"]
    message = validate_message(data)
    for update in ({"series": "EFA"}, {"series": "EAR", "priority": None}):
        copy = message.model_copy(update=update)
        assert copy.body() == dumps(copy.payload()).encode()
        assert json.loads(copy.body())["series"] == update["series"]
