"""The message's JSON Schema (docs/message.schema.json) and the contract's examples
(examples/messages/*.json, the ones docs/message.md shows).

* The committed schema is the one :mod:`gapless.message.schema` generates from the model, and a
  valid draft 2020-12 schema.
* Every example validates against the committed schema, passes :func:`parse_message`, and (all
  but the minimal one, which is for a tenant without an issuer profile) passes the UBL-TR checks
  and renders a document GİB's XSD and schematron accept.
* Wrong messages (no lines, a float amount, a bad VAT rate, a bad profile, …) fail the schema
  and the parser alike.
* Each field rule's schema accepts exactly what the rule accepts, on generated strings (the
  differences docs/message.md lists are left out on purpose, and named here).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, BeforeValidator
from pydantic_core import PydanticCustomError

from gapless.documents import (
    build_issuer,
    check_despatch_inputs,
    check_ubl_inputs,
    render_despatch,
    render_ubl_tr,
)
from gapless.message import (
    DESPATCH_PROFILES,
    DESPATCH_TYPES,
    DespatchMessage,
    InvalidMessage,
    despatch,
    fields,
    parse_message,
)
from gapless.message.schema import RULES, UnknownRule, _RefinedSchema, message_schema, schema_text
from tests.helpers import ROOT
from tests.ubl import assert_valid, assert_valid_despatch

SCHEMA_FILE = ROOT / "docs" / "message.schema.json"
EXAMPLES = sorted((ROOT / "examples" / "messages").glob("*.json"))
#: The example for a tenant without an issuer profile (no UBL-TR document).
MINIMAL = "minimal"
ISSUER = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                      postal_zone="34716")


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="module")
def validator(committed: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(committed)


def test_the_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "docs/message.schema.json is stale: run `make schema` "
        "(python -m gapless.message.schema > docs/message.schema.json)")


def test_the_module_prints_the_schema() -> None:
    """`python -m gapless.message.schema` (`make schema`) writes what is committed."""
    printed = subprocess.run([sys.executable, "-m", "gapless.message.schema"], cwd=ROOT,
                             capture_output=True, timeout=60, check=True)
    assert printed.stdout.decode("utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")


def test_the_schema_is_a_valid_draft_2020_12_schema(committed: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(committed)
    assert committed["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_schema_shows_the_rules_not_bare_strings(committed: dict[str, Any]) -> None:
    assert committed["oneOf"] == [{"$ref": "#/$defs/InvoiceMessage"},
                                  {"$ref": "#/$defs/DespatchMessage"}]
    line = committed["$defs"]["Line"]["properties"]
    assert line["quantity"]["type"] == "string"
    assert {"pattern", "not", "maxLength"} <= set(line["quantity"])
    assert "pattern" in line["vat_rate"]
    assert committed["$defs"]["Customer"]["properties"]["tax_id"]["pattern"] == \
        "^[0-9]{10,11}$"
    invoice = committed["$defs"]["InvoiceMessage"]
    profile = invoice["properties"]["profile"]["anyOf"][0]
    assert profile["enum"] == list(fields.PROFILES)
    kind = invoice["properties"]["type"]["anyOf"][0]
    assert kind["enum"] == list(fields.INVOICE_TYPES)
    assert set(invoice["required"]) == {"invoice_id", "tenant", "issue_date", "currency",
                                        "customer", "lines"}
    assert invoice["properties"]["document"]["const"] == "invoice"
    note = committed["$defs"]["DespatchMessage"]
    assert set(note["required"]) == {"document", "invoice_id", "tenant", "issue_date",
                                     "customer", "despatch", "lines"}
    assert note["properties"]["document"]["const"] == "despatch"
    despatch = committed["$defs"]["Despatch"]["properties"]
    assert despatch["profile"]["anyOf"][0]["enum"] == list(DESPATCH_PROFILES)
    assert despatch["type"]["anyOf"][0]["enum"] == list(DESPATCH_TYPES)
    assert "pattern" in despatch["license_plate"]["anyOf"][0]
    assert "quantity" in committed["$defs"]["DespatchLine"]["required"]


def test_there_is_an_example_of_every_kind() -> None:
    names = {path.stem for path in EXAMPLES}
    messages = [json.loads(path.read_text(encoding="utf-8")) for path in EXAMPLES]
    invoices = [message for message in messages if "despatch" not in message]
    notes = [message["despatch"] for message in messages if "despatch" in message]
    kinds = {message.get("type", "SATIS") for message in invoices}
    profiles = {message.get("profile") for message in invoices}
    assert {note.get("type", "SEVK") for note in notes} == set(DESPATCH_TYPES)
    assert {note.get("profile", "TEMELIRSALIYE") for note in notes} == set(DESPATCH_PROFILES)
    assert any("carrier" in note for note in notes)
    assert MINIMAL in names
    assert set(fields.INVOICE_TYPES) - {"TEVKIFATIADE"} <= kinds
    assert {"IHRACAT", "EARSIVFATURA", "KAMU"} <= profiles


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_each_example_validates_and_parses(
        path: Path, validator: jsonschema.Draft202012Validator) -> None:
    body = path.read_bytes()
    errors = [error.message for error in validator.iter_errors(json.loads(body))]
    assert errors == []
    message = parse_message(body, "application/json")
    if path.stem == MINIMAL:
        return
    if isinstance(message, DespatchMessage):
        check_despatch_inputs(message, ISSUER)
        assert_valid_despatch(render_despatch(
            message, number="IRS2026000000001", uuid=uuid.uuid4(),
            sealed_at=datetime(2026, 11, 26, 9, tzinfo=UTC), tz="Europe/Istanbul",
            issuer=ISSUER))
        return
    check_ubl_inputs(message, ISSUER)
    document = render_ubl_tr(message, number="ABC2026000000001", uuid=uuid.uuid4(),
                             sealed_at=datetime(2026, 11, 26, 9, tzinfo=UTC),
                             tz="Europe/Istanbul", issuer=ISSUER)
    assert_valid(document)


def _minimal() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "examples" / "messages" / f"{MINIMAL}.json").read_text(encoding="utf-8"))
    return data


def _broken(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(_minimal())
    change(data)
    return data


WRONG: dict[str, Callable[[dict[str, Any]], None]] = {
    "missing lines": lambda m: m.pop("lines"),
    "no line": lambda m: m.update(lines=[]),
    "float amount": lambda m: m["lines"][0].update(unit_price=10.5),
    "integer quantity": lambda m: m["lines"][0].update(quantity=2),
    "zero quantity": lambda m: m["lines"][0].update(quantity="0.000"),
    "exponent": lambda m: m["lines"][0].update(unit_price="1e3"),
    "signed amount": lambda m: m["lines"][0].update(unit_price="-1.00"),
    "too many decimals": lambda m: m["lines"][0].update(unit_price="1.123456789"),
    "bad vat_rate": lambda m: m["lines"][0].update(vat_rate="20%"),
    "vat_rate above 100": lambda m: m["lines"][0].update(vat_rate="100.01"),
    "vat_rate as a number": lambda m: m["lines"][0].update(vat_rate=20),
    "bad profile": lambda m: m.update(profile="EFATURA"),
    "bad type": lambda m: m.update(type="SALE"),
    "bad priority": lambda m: m.update(priority="urgent"),
    "short tax_id": lambda m: m["customer"].update(tax_id="123456789"),
    "tax_id as a number": lambda m: m["customer"].update(tax_id=1234567890),
    "unknown customer field": lambda m: m["customer"].update(email="a@example.com"),
    "null series": lambda m: m.update(series=None),
    "bad date": lambda m: m.update(issue_date="26.11.2026"),
    "lower-case currency": lambda m: m.update(currency="try"),
    "blank name": lambda m: m["customer"].update(name="   "),
    "missing customer": lambda m: m.pop("customer"),
    "bad send_type": lambda m: m.update(earsiv={"send_type": "EMAIL"}),
    "empty billing_reference": lambda m: m.update(billing_reference=[]),
    "empty extra field name": lambda m: m.update({"": 1}),
    "unknown document": lambda m: m.update(document="receipt"),
    "a dispatch note without despatch": lambda m: m.update(document="despatch"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_message_fails_the_schema_and_the_parser(
        name: str, validator: jsonschema.Draft202012Validator) -> None:
    data = _broken(WRONG[name])
    assert not validator.is_valid(data)
    with pytest.raises(InvalidMessage):
        parse_message(json.dumps(data).encode(), "application/json")


def test_unknown_top_level_fields_are_kept_by_both(
        validator: jsonschema.Draft202012Validator) -> None:
    data = _broken(lambda m: m.update(order_ref="PO-7", shop={"id": 3}))
    assert validator.is_valid(data)
    assert parse_message(json.dumps(data).encode(), "application/json").payload()["shop"] == \
        {"id": 3}


# --------------------------------------------------------- each rule's schema is the rule


def _rule(alias: Any) -> Callable[[Any], Any]:
    function: Callable[[Any], Any] = alias.__metadata__[0].func
    return function


def _accepted_by_rule(alias: Any, value: Any) -> bool:
    try:
        _rule(alias)(value)
    except PydanticCustomError:
        return False
    return True


#: Rules whose schema is exactly the rule (docs/message.md: the others differ where JSON
#: Schema cannot follow: a real calendar date, an IBAN's check digits, Python's printable).
EXACT = {
    "Quantity": fields.Quantity, "UnitPrice": fields.UnitPrice, "VatRate": fields.VatRate,
    "ExchangeRate": fields.ExchangeRate, "Discount": fields.Discount,
    "WithholdingRate": fields.WithholdingRate, "TaxId": fields.TaxId,
    "Tenant": fields.Tenant, "OptionalSeriesCode": fields.OptionalSeriesCode,
    "Currency": fields.Currency, "UnitCode": fields.UnitCode, "Code3": fields.Code3,
    "Gtip": fields.Gtip, "DibLineCode": fields.DibLineCode, "Incoterms": fields.Incoterms,
    "TransportMode": fields.TransportMode, "DocumentNumber": fields.DocumentNumber,
    "Profile": fields.Profile, "InvoiceType": fields.InvoiceType,
    "SendType": fields.SendType, "PaymentMethod": fields.PaymentMethod,
    "Priority": fields.Priority,
}

_NUMBERISH = st.text(alphabet="0123456789.-+eE ", max_size=24)
_CODEISH = st.text(alphabet="0123456789ABCZaz_-./ ", max_size=70)


@st.composite
def candidates(draw: st.DrawFn, fragment: dict[str, Any]) -> Any:
    """Values near what the fragment accepts: matches of its pattern (and their edits),
    numberish and codeish text, its enum's values and their edits, non-strings."""
    pools: list[st.SearchStrategy[Any]] = [_NUMBERISH, _CODEISH,
                                           st.none(), st.integers(), st.floats()]
    if "pattern" in fragment:
        pools.append(st.from_regex(fragment["pattern"], fullmatch=True))
    if "enum" in fragment:
        pools.append(st.sampled_from(fragment["enum"]))
        pools.append(st.sampled_from([str(v).lower() for v in fragment["enum"]]))
    return edited(draw, draw(st.one_of(pools)), ["", "0", "9", ".", "-", "A", "a"])


def edited(draw: st.DrawFn, value: Any, replacements: list[str]) -> Any:
    """Half the time, a non-empty string with one character replaced by one of
    ``replacements`` (an empty one cuts it); anything else as it is."""
    if isinstance(value, str) and value and draw(st.booleans()):
        cut = draw(st.integers(0, len(value)))
        return value[:cut] + draw(st.sampled_from(replacements)) + value[cut + 1:]
    return value


@pytest.mark.parametrize("name", sorted(EXACT))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_each_rule_s_schema_accepts_exactly_what_the_rule_accepts(name: str,
                                                                   data: st.DataObject) -> None:
    alias = EXACT[name]
    fragment = RULES[alias]
    schema_validator = jsonschema.Draft202012Validator(fragment)
    value = data.draw(candidates(fragment))
    # A Python validator's `$` also matches before a final line feed (ECMA-262's does not).
    if isinstance(value, str) and value.endswith("\n"):
        return
    assert schema_validator.is_valid(value) == _accepted_by_rule(alias, value), repr(value)


@pytest.mark.parametrize(("alias", "value"), [
    (fields.Quantity, "0000000000000000000001.5"),  # leading zeros do not count
    (fields.Quantity, "1234567890123"),             # 13 digits before the point
    (fields.VatRate, "0100.00"),
    (fields.VatRate, "100.001"),
    (fields.WithholdingRate, "0.00"),
    (fields.UnitPrice, "0"),
    (fields.Discount, "1.234"),
    (fields.Quantity, "1" * 65),
])
def test_decimal_edges_agree(alias: Any, value: str) -> None:
    schema_validator = jsonschema.Draft202012Validator(RULES[alias])
    assert schema_validator.is_valid(value) == _accepted_by_rule(alias, value)


def test_every_rule_of_the_fields_module_has_a_schema() -> None:
    rules = {value for module in (fields, despatch) for name, value in vars(module).items()
             if getattr(value, "__metadata__", None) and name[0].isupper()
             and any(isinstance(m, fields.Rule) for m in value.__metadata__)}
    assert len(rules) > 30
    assert rules <= set(RULES)


def test_a_rule_without_a_schema_stops_the_generator() -> None:
    def odd(value: Any) -> str:
        return str(value)

    class Odd(BaseModel):
        field: Annotated[str, BeforeValidator(odd)]

    with pytest.raises(UnknownRule, match="odd"):
        Odd.model_json_schema(schema_generator=_RefinedSchema)


def test_the_schema_can_be_placed_under_openapi_components() -> None:
    schema = message_schema(ref_template="#/components/schemas/{model}")
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(schema))
    assert refs
    assert all(ref.startswith("#/components/schemas/") for ref in refs)


# ------------------------------------------------------- docs/message.md shows these files


def test_docs_message_md_shows_every_example_file_as_it_is() -> None:
    """Each example file is a JSON block of docs/message.md (same text), and each JSON block
    of a message there is an example file: the page and the files cannot drift apart."""
    page = (ROOT / "docs" / "message.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", page, flags=re.DOTALL)
    files = {path.stem: path.read_text(encoding="utf-8") for path in EXAMPLES}
    shown = [block for block in blocks if '"invoice_id"' in block]
    assert sorted(shown) == sorted(files.values())
    for name in files:
        assert f"{name}.json" in page
