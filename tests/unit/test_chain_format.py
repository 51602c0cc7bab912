"""The chain's format (docs/chain.md): the worked example's values, and canonical JSON's rules.
The SQL functions that write the chain are held to the same values by the integration tests
(a verifier written from the document agrees with every chain a real run writes)."""

from __future__ import annotations

import json
from decimal import Decimal

from gapless.chain import canonical_json, genesis, message_sha256, record_hash

MESSAGE = ('{"invoice_id": "shop-1", "lines": [{"unit_price": "10.00", "quantity": 2.50}], '
           '"customer": {"name": "Örnek \\"Ltd\\"\\n"}}')


def test_the_worked_example_of_docs_chain_md() -> None:
    first = genesis("acme", "ABC", "2026")
    assert first == "ac33eb5d7e8dbba44d0583813d2b57b972b9aa95a6bdee7f926fddde02bd2ebf"
    message = message_sha256(MESSAGE)
    assert message == "29986299c051ada87ae01176a4db9e6077178aa1055f83f8dd0b33ae48b0509c"
    record = {"seq": 1, "kind": "seal", "tenant": "acme", "series": "ABC", "period_key": "2026",
              "reserved_no": 1, "number": "ABC2026000000001", "invoice_id": "shop-1",
              "uuid": "8f14e45f-ceea-467f-a8f6-8b1c2d3e4f50", "message_sha256": message,
              "document_sha256": None, "ref": None, "reason": None,
              "at": "2026-11-25T09:03:07.120400Z", "migrated": False}
    assert record_hash("gapless-chain/1", first, record) == \
        "3e58da7a4ca7fa4b55633884699f8df2ec40b5eebc36986453c5acf177adc0ce"


def test_canonical_json_escapes_exactly_what_the_format_says() -> None:
    text = "\"\\\b\f\n\r\t\x01\x1f/\x7fé€𝄞"
    assert canonical_json(text) == '"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\x7fé€𝄞"'
    assert canonical_json({"b": 1, "a": [True, None], "é": {}, "Z": []}) == \
        '{"Z":[],"a":[true,null],"b":1,"é":{}}'


def test_numbers_are_plain_decimals_without_trailing_zeros() -> None:
    parsed = json.loads("[1.50, 1e3, 2.0, -0.0, 0.00010, -12, 1E-7]", parse_float=Decimal)
    assert canonical_json(parsed) == "[1.5,1000,2,0,0.0001,-12,0.0000001]"
