"""The dispatch note's message (``"document": "despatch"``): parsed into a DespatchMessage by the
same parser as invoices, with the same protocol; every refusal of GİB's rules names the field,
before any number."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from gapless.message import (
    DespatchMessage,
    InvalidMessage,
    InvoiceMessage,
    parse_message,
    validate_message,
)

#: The contract's example (docs/message.md, examples/messages/despatch.json).
NOTE: dict[str, Any] = {
    "document": "despatch", "invoice_id": "wh-7-000123", "tenant": "acme", "priority": "batch",
    "issue_date": "2026-11-26",
    "customer": {"tax_id": "1234567890", "name": "Example Ltd", "tax_office": "Kadıköy",
                 "address": {"street": "Moda Cd. 1", "district": "Kadıköy", "city": "İstanbul",
                             "postal_zone": "34710", "country": "Türkiye"}},
    "despatch": {"type": "SEVK", "profile": "TEMELIRSALIYE",
                 "despatch_date": "2026-11-26", "despatch_time": "10:00:00",
                 "delivery_address": {"street": "Depo Sk. 5", "district": "Tuzla",
                                      "city": "İstanbul", "postal_zone": "34940",
                                      "country": "Türkiye"},
                 "drivers": [{"first_name": "Ali", "family_name": "Yılmaz",
                              "tckn": "10000000078"}],
                 "license_plate": "34ABC123"},
    "lines": [{"description": "Widget", "quantity": "12", "unit_code": "C62"}]}

INVOICE: dict[str, Any] = {
    "invoice_id": "shop-42", "tenant": "acme", "series": "ABC", "issue_date": "2026-11-26",
    "currency": "TRY", "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
    "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
               "vat_rate": "20"}]}


def changed(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data = copy.deepcopy(NOTE)
    change(data)
    return data


def reason(data: dict[str, Any]) -> str:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(json.dumps(data).encode(), "application/json")
    return caught.value.reason


def test_the_contract_s_example_is_a_dispatch_note() -> None:
    message = parse_message(json.dumps(NOTE).encode(), "application/json")
    assert isinstance(message, DespatchMessage)
    assert message.despatch.type_code == "SEVK"
    assert message.despatch.profile_code == "TEMELIRSALIYE"
    assert message.despatch.scheme.name == "PLAKA"
    assert message.payload() == NOTE
    assert validate_message(json.loads(message.body())) == message


def test_both_documents_share_one_protocol() -> None:
    note = validate_message(NOTE)
    invoice = validate_message(INVOICE)
    assert (note.document, invoice.document) == ("despatch", "invoice")
    assert note.channels == frozenset({"edespatch"})
    assert invoice.channels == frozenset({"any", "efatura", "earsiv"})
    for message in (note, invoice):
        assert (message.invoice_id, message.tenant) == (message.payload()["invoice_id"], "acme")
        assert message.customer.name == "Example Ltd"
        assert len(message.lines) == 1
        assert str(message.issue_date) == "2026-11-26"
    assert (note.priority_value, invoice.priority_value) == (1, 1)
    assert note.series is None


def test_an_invoice_that_says_so_is_the_invoice_it_was() -> None:
    said = validate_message({**INVOICE, "document": "invoice"})
    assert isinstance(said, InvoiceMessage)
    assert said.payload() == {**INVOICE, "document": "invoice"}
    assert validate_message(INVOICE).payload() == INVOICE


@pytest.mark.parametrize("value", ["receipt", "", "DESPATCH", 1, None, ["despatch"]])
def test_an_unknown_document_is_refused_naming_the_field(value: Any) -> None:
    assert reason({**NOTE, "document": value}) == "document: must be one of invoice, despatch"


def test_the_json_shape_checks_are_the_invoice_s() -> None:
    assert reason(changed(lambda m: m["despatch"].update(note="a\x01"))).startswith(
        "despatch.note: holds a character XML cannot carry (U+0001)")
    assert reason(changed(lambda m: m.update(note="x\x00"))) == \
        "note: holds a character XML cannot carry (U+0000)"
    assert reason(changed(lambda m: m.update(lines=[m["lines"][0]] * 1001))) == \
        "lines: must contain at most 1000 lines"
    too_big = changed(lambda m: m.update(lines=[{**m["lines"][0], "description": "x" * 999}]
                                          * 300))
    with pytest.raises(InvalidMessage, match="bytes as JSON; at most"):
        validate_message(too_big)
    unknown = changed(lambda m: m["despatch"].update(truck="big"))
    assert reason(unknown) == ("despatch.truck: unknown field (extra fields are kept only at "
                               "the top level)")
    assert validate_message(changed(lambda m: m.update(warehouse={"id": 7}))).payload()[
        "warehouse"] == {"id": 7}


REFUSALS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "no driver and no carrier": (
        lambda m: m["despatch"].pop("drivers"),
        "despatch.drivers: a dispatch note needs at least one driver (with license_plate) or a "
        "carrier"),
    "no despatch": (lambda m: m.pop("despatch"), "despatch: required field is missing"),
    "no despatch date": (lambda m: m["despatch"].pop("despatch_date"),
                         "despatch.despatch_date: required field is missing"),
    "no despatch time": (lambda m: m["despatch"].pop("despatch_time"),
                         "despatch.despatch_time: required field is missing"),
    "a despatch time out of the day": (
        lambda m: m["despatch"].update(despatch_time="24:00:00"),
        "despatch.despatch_time: is not a real time of day"),
    "no delivery address": (lambda m: m["despatch"].pop("delivery_address"),
                            "despatch.delivery_address: required field is missing"),
    "a driver without a plate": (
        lambda m: m["despatch"].pop("license_plate"),
        "despatch.license_plate: required with drivers (the vehicle's plate)"),
    "a plate GİB's pattern refuses": (
        lambda m: m["despatch"].update(license_plate="99XYZ1"),
        "despatch.license_plate: must be a Turkish plate: the province code 01-81, letters, "
        "digits (e.g. 34ABC123) (PLAKA)"),
    "a plate without digits at its end": (
        lambda m: m["despatch"].update(license_plate="34ABC"),
        "despatch.license_plate: must be a Turkish plate: the province code 01-81, letters, "
        "digits (e.g. 34ABC123) (PLAKA)"),
    "a plate in lower case": (
        lambda m: m["despatch"].update(license_plate="34abc123"),
        "despatch.license_plate: must be 1-32 upper-case letters, digits, '_' or '-', no "
        "spaces (e.g. 34ABC123)"),
    "a foreign plate GİB's pattern refuses": (
        lambda m: m["despatch"].update(plate_scheme="YABANCIPLAKA", license_plate="AB 123"),
        "despatch.license_plate: must be 1-32 upper-case letters, digits, '_' or '-', no "
        "spaces (e.g. 34ABC123)"),
    "an unknown plate scheme": (
        lambda m: m["despatch"].update(plate_scheme="DORSE"),
        "despatch.plate_scheme: must be one of PLAKA, YABANCIPLAKA"),
    "a trailer GİB's pattern refuses": (
        lambda m: m["despatch"].update(trailer_plates=["34DEF45", "00A1"]),
        "despatch.trailer_plates.1: must be a Turkish plate: the province code 01-81, letters, "
        "digits (e.g. 34ABC123) (DORSEPLAKA)"),
    "trailers without a vehicle": (
        lambda m: (m["despatch"].pop("drivers"), m["despatch"].pop("license_plate"),
                   m["despatch"].update(carrier={"tax_id": "9876543210", "name": "Kargo"},
                                        trailer_plates=["34DEF45"])),
        "despatch.license_plate: required with trailer_plates"),
    "a postal zone GİB's pattern refuses": (
        lambda m: m["despatch"]["delivery_address"].update(postal_zone="99940"),
        "despatch.delivery_address.postal_zone: must be a Turkish postal code: the province "
        "code 01-81 and 3 digits (e.g. 34940)"),
    "no postal zone": (
        lambda m: m["despatch"]["delivery_address"].pop("postal_zone"),
        "despatch.delivery_address.postal_zone: required for a dispatch note"),
    "no district": (
        lambda m: m["despatch"]["delivery_address"].pop("district"),
        "despatch.delivery_address.district: required for a dispatch note"),
    "MATBUDAN without printed": (
        lambda m: m["despatch"].update(type="MATBUDAN"),
        "despatch.printed: required for a MATBUDAN dispatch note (the paper note's number and "
        "issue_date)"),
    "printed on a SEVK": (
        lambda m: m["despatch"].update(printed={"number": "ABC2026000000001",
                                                "issue_date": "2026-11-20"}),
        "despatch.printed: only for a MATBUDAN dispatch note"),
    "a printed number that is not 16 characters": (
        lambda m: m["despatch"].update(type="MATBUDAN", printed={"number": "IRS25-1",
                                                                 "issue_date": "2026-11-20"}),
        "despatch.printed.number: must be the paper note's 16-character number"),
    "an unknown type": (lambda m: m["despatch"].update(type="SATIS"),
                        "despatch.type: must be one of SEVK, MATBUDAN"),
    "an unknown profile": (
        lambda m: m["despatch"].update(profile="TEMELFATURA"),
        "despatch.profile: must be one of TEMELIRSALIYE, HKSIRSALIYE, IDISIRSALIYE"),
    "HKS without kunye_no": (
        lambda m: m["despatch"].update(profile="HKSIRSALIYE"),
        "lines.0.kunye_no: required on every line of a HKSIRSALIYE dispatch note (the "
        "19-character HKS künye number)"),
    "a kunye_no of 18 characters": (
        lambda m: (m["despatch"].update(profile="HKSIRSALIYE"),
                   m["lines"][0].update(kunye_no="1" * 18)),
        "lines.0.kunye_no: must be the 19-character HKS künye number"),
    "a kunye_no outside HKS": (
        lambda m: m["lines"][0].update(kunye_no="1" * 19),
        "lines.0.kunye_no: only for a HKSIRSALIYE dispatch note"),
    "IDIS without sevkiyat_no": (
        lambda m: (m["despatch"].update(profile="IDISIRSALIYE"),
                   m["lines"][0].update(etiket_no="AB1234567")),
        "despatch.sevkiyat_no: required for a IDISIRSALIYE dispatch note (SE- or ES- and 7 "
        "digits)"),
    "IDIS without etiket_no": (
        lambda m: m["despatch"].update(profile="IDISIRSALIYE", sevkiyat_no="SE-1234567"),
        "lines.0.etiket_no: required on every line of a IDISIRSALIYE dispatch note (2 letters "
        "and 7 digits)"),
    "a sevkiyat_no GİB's pattern refuses": (
        lambda m: m["despatch"].update(profile="IDISIRSALIYE", sevkiyat_no="XE-1234567"),
        "despatch.sevkiyat_no: must be SE- or ES- and 7 digits"),
    "an etiket_no GİB's pattern refuses": (
        lambda m: m["lines"][0].update(etiket_no="A12345678"),
        "lines.0.etiket_no: must be 2 letters and 7 digits"),
    "a sevkiyat_no outside IDIS": (
        lambda m: m["despatch"].update(sevkiyat_no="SE-1234567"),
        "despatch.sevkiyat_no: only for a IDISIRSALIYE dispatch note"),
    "a driver's TCKN failing its check digits": (
        lambda m: m["despatch"]["drivers"][0].update(tckn="10000000079"),
        "despatch.drivers.0.tckn: an 11-digit TCKN whose check digits do not match"),
    "a driver's TCKN of 10 digits": (
        lambda m: m["despatch"]["drivers"][0].update(tckn="1000000007"),
        "despatch.drivers.0.tckn: must be an 11-digit TCKN, as a string"),
    "a driver without a family name": (
        lambda m: m["despatch"]["drivers"][0].pop("family_name"),
        "despatch.drivers.0.family_name: required field is missing"),
    "an empty list of drivers": (
        lambda m: m["despatch"].update(drivers=[]),
        "despatch.drivers: List should have at least 1 item after validation, not 0"),
    "a carrier's TCKN failing its check digits": (
        lambda m: m["despatch"].update(carrier={"tax_id": "10000000079", "name": "Ali Kargo"}),
        "despatch.carrier.tax_id: an 11-digit TCKN whose check digits do not match"),
    "an order without its date": (
        lambda m: m["despatch"].update(order={"number": "PO-7"}),
        "despatch.order.issue_date: required field is missing"),
    "a line without a quantity": (lambda m: m["lines"][0].pop("quantity"),
                                  "lines.0.quantity: required field is missing"),
    "a price as a JSON number": (
        lambda m: m["lines"][0].update(unit_price=2.5),
        "lines.0.unit_price: must be a decimal string such as \"10.00\", not a JSON number "
        "(money and quantities travel as strings)"),
    "an invoice's field on a line": (
        lambda m: m["lines"][0].update(vat_rate="20"),
        "lines.0.vat_rate: unknown field (extra fields are kept only at the top level)"),
    "no lines": (lambda m: m.update(lines=[]), "lines: must contain at least 1 line"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_each_refusal_names_the_field(name: str) -> None:
    change, expected = REFUSALS[name]
    assert reason(changed(change)) == expected


def test_a_carrier_alone_carries_the_goods() -> None:
    def carrier(m: dict[str, Any]) -> None:
        m["despatch"].pop("drivers")
        m["despatch"].pop("license_plate")
        m["despatch"]["carrier"] = {"tax_id": "9876543210", "name": "Kargo A.Ş."}

    message = validate_message(changed(carrier))
    assert isinstance(message, DespatchMessage)
    assert message.despatch.carrier is not None


def test_a_foreign_plate_takes_its_own_pattern() -> None:
    message = validate_message(changed(lambda m: m["despatch"].update(
        plate_scheme="YABANCIPLAKA", license_plate="B-XY_123", trailer_plates=["W-12"])))
    assert isinstance(message, DespatchMessage)
    assert (message.despatch.scheme.name, message.despatch.scheme.trailer) == \
        ("YABANCIPLAKA", "YABANCIDORSEPLAKA")


def test_an_invoice_is_not_a_dispatch_note() -> None:
    """Without ``document`` the message is an invoice: a note's body is refused as one."""
    data = changed(lambda m: m.pop("document"))
    assert reason(data).startswith("currency: required field is missing")


#: A dispatch note with every field of the model (the walk below finds them from the model).
FULL: dict[str, Any] = changed(lambda m: (
    m.update(series="IRS", note="Kırılacak eşya", currency="TRY"),
    m["customer"].update(alias="urn:mail:irsaliyepk@example.com",
                         person={"first_name": "Ali", "family_name": "Yılmaz"}),
    m["despatch"].update(
        type="MATBUDAN", profile="IDISIRSALIYE", sevkiyat_no="SE-1234567",
        printed={"number": "A000000000004711", "issue_date": "2026-11-25"},
        plate_scheme="PLAKA", trailer_plates=["34DEF45"],
        carrier={"tax_id": "9876543210", "name": "Kargo A.Ş.",
                 "address": {"street": "Rıhtım Cad. 1", "district": "Kadıköy",
                             "city": "İstanbul", "postal_zone": "34716",
                             "country": "Türkiye"}},
        order={"number": "PO-7", "issue_date": "2026-11-24"}),
    m["lines"][0].update(unit_price="2.50", etiket_no="AB1234567")))


#: The same under HKS: the line's künye number instead of IDIS's numbers.
FULL_HKS: dict[str, Any] = copy.deepcopy(FULL)
FULL_HKS["despatch"].update(profile="HKSIRSALIYE")
del FULL_HKS["despatch"]["sevkiyat_no"]
del FULL_HKS["lines"][0]["etiket_no"]
FULL_HKS["lines"][0]["kunye_no"] = "2611250000000000471"


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in _leaves(item, (*path, index))]
    return [path]


def _model_leaves(model: Any, prefix: tuple[str | int, ...] = ()) -> set[tuple[str | int, ...]]:
    """Every leaf field of ``model``, as a path (a list's first item stands for all)."""
    import types
    import typing

    from pydantic import BaseModel

    def parts(annotation: Any) -> list[Any]:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            return parts(typing.get_args(annotation)[0])
        if origin in (typing.Union, types.UnionType):
            return [part for arg in typing.get_args(annotation) for part in parts(arg)]
        return [annotation]

    found: set[tuple[str | int, ...]] = set()
    for name, info in model.model_fields.items():
        path: tuple[str | int, ...] = (*prefix, name)
        for part in parts(info.annotation):
            item = part
            if typing.get_origin(part) is list:
                (item,) = typing.get_args(part)
                path = (*path, 0)
            if isinstance(item, type) and issubclass(item, BaseModel):
                found |= _model_leaves(item, path)
                break
        else:
            found.add(path)
    return found


def test_the_full_note_has_every_field_and_is_valid() -> None:
    assert _model_leaves(DespatchMessage) <= set(_leaves(FULL)) | set(_leaves(FULL_HKS))
    assert validate_message(FULL).payload() == FULL
    assert validate_message(FULL_HKS).payload() == FULL_HKS


@pytest.mark.parametrize(("full", "path"), [
    # (``document`` picks the model: any other value is refused as unknown, above.)
    *((FULL, path) for path in _leaves(FULL) if path != ("document",)),
    (FULL_HKS, ("lines", 0, "kunye_no"))],
    ids=lambda value: ".".join(map(str, value)) if isinstance(value, tuple) else "")
def test_a_character_xml_cannot_carry_is_refused_in_every_text_naming_it(
        full: dict[str, Any], path: tuple[str | int, ...]) -> None:
    data = copy.deepcopy(full)
    holder: Any = data
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = f"{holder[path[-1]]}\x0b"
    dotted = ".".join(map(str, path))
    assert reason(data) == f"{dotted}: holds a character XML cannot carry (U+000B)"
