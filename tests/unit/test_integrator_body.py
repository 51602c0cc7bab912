"""The integrator request's body: the document embedded as JSON writes it, byte for byte."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gapless.integrator.base import MEDIA_JSON, MEDIA_XML, Document
from gapless.integrator.http import json_string, request_body

#: Any text UTF-8 can carry: every control character included (XML carries three of them).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=500, deadline=None)
@given(TEXT)
def test_a_text_is_the_json_string_json_writes(text: str) -> None:
    assert json_string(text.encode()) == json.dumps(text, ensure_ascii=False).encode()


@settings(max_examples=200, deadline=None)
@given(TEXT, st.none() | st.text(max_size=20))
def test_the_body_is_the_contract_object_with_the_document_embedded(text: str,
                                                                    alias: str | None) -> None:
    document = Document.of(tenant="acme", number="ABC2026000000001", invoice_id="inv-1 \"ş\"",
                           uuid="3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c", body=text.encode(),
                           media_type=MEDIA_XML, format="ubl-tr-2.1/4", alias=alias)
    expected = {"tenant": "acme", "number": "ABC2026000000001", "invoice_id": "inv-1 \"ş\"",
                "uuid": "3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c"}
    if alias is not None:
        expected["alias"] = alias
    assert json.loads(request_body(document)) == {**expected, "document": text}


def test_a_json_document_is_embedded_as_the_object_it_is() -> None:
    body = b'{"a":[1,"\\u00e7"]}'
    document = Document.of(tenant="acme", number="ABC2026000000001", invoice_id="inv-1",
                           uuid="3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c", body=body,
                           media_type=MEDIA_JSON, format="json/1")
    assert request_body(document).endswith(b',"document":' + body + b"}")
