"""The message's JSON Schema (draft 2020-12), generated from :class:`InvoiceMessage` and
:class:`~gapless.message.despatch.DespatchMessage` (one of them, by ``document``).

pydantic's own schema of the model shows every rule of :mod:`gapless.message.fields` as a bare
string (the rules are Python functions it cannot look into). :func:`message_schema`
generates the model's schema with each rule replaced by what it accepts, in JSON Schema's terms:
patterns for tax ids, codes and decimal strings (money and quantities are strings, never JSON
numbers), enums for profiles, types and priorities, lengths, the top level's bounds on unknown
fields. A rule the generator does not know stops it (:class:`UnknownRule`): a new field cannot
slip into the schema as a bare string.

The schema tells the truth about :func:`gapless.message.parse_message` for every field's shape;
what JSON Schema cannot say (an IBAN's check digits, a real calendar date, the body's byte size,
nesting depth, Python's notion of a printable character) and the document checks that need the
tenant's issuer profile are listed in docs/message.md, "The JSON Schema". The committed copy is
docs/message.schema.json; regenerate it with ``python -m gapless.message.schema >
docs/message.schema.json`` (``make schema``).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, models_json_schema
from pydantic_core import core_schema

from gapless.message import despatch, fields
from gapless.message.despatch import (
    DESPATCH_PROFILES,
    DESPATCH_TYPES,
    IDENTIFIERS,
    PLATE_SCHEMES,
    DespatchMessage,
)
from gapless.message.fields import (
    DOCUMENTS,
    FAST,
    INVOICE_TYPES,
    MAX_DECIMAL_TEXT,
    MAX_DESCRIPTION,
    MAX_EXTRA_FIELDS,
    MAX_EXTRA_KEY,
    MAX_INVOICE_ID,
    MAX_NAME,
    PAYMENT_METHODS,
    PROFILES,
    RULE,
    SEND_TYPES,
)
from gapless.message.model import InvoiceMessage

DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: Characters no text of the message may hold (XML 1.0 cannot carry them): C0 controls but tab,
#: line feed and carriage return, U+FFFE and U+FFFF. (Lone surrogates are refused too; a JSON
#: Schema pattern cannot name them portably.)
_NOT_XML = r"\x00-\x08\x0B\x0C\x0E-\x1F\uFFFE\uFFFF"
#: Control characters (C0, DEL, C1): a name or an id has none.
_CONTROL = r"\x00-\x1F\x7F-\x9F\uFFFE\uFFFF"


class UnknownRule(RuntimeError):
    """A field rule of :mod:`gapless.message.fields` has no JSON Schema here: add it to
    :data:`RULES` (what the rule accepts), or the schema would call the field a bare string."""


def _decimal(int_digits: int, frac_digits: int, *, positive: bool,
             maximum: str | None = None, description: str) -> dict[str, Any]:
    """A decimal string: digits, an optional fraction, no sign or exponent; leading zeros do
    not count towards ``int_digits``. ``positive``: zero (``"0"``, ``"0.00"``) is refused.
    ``maximum`` ``"100"``: at most 100 (the rates), with ``int_digits`` 3."""
    fraction = rf"(\.[0-9]{{1,{frac_digits}}})?"
    if maximum is None:
        pattern = rf"^0*[0-9]{{1,{int_digits}}}{fraction}$"
    else:
        if (maximum, int_digits) != ("100", 3):
            raise ValueError("only the rates' bound (100, 3 digits) is expressed")
        pattern = rf"^0*([0-9]{{1,2}}{fraction}|100(\.0{{1,{frac_digits}}})?)$"
    schema: dict[str, Any] = {"type": "string", "pattern": pattern,
                              "maxLength": MAX_DECIMAL_TEXT, "description": description}
    if positive:
        schema["not"] = {"pattern": r"^[0.]*$"}
    return schema


def _text(limit: int, *, multiline: bool, description: str) -> dict[str, Any]:
    """Free text: 1 to ``limit`` characters, not blank, no control characters (tab and line
    feed allowed in ``multiline`` text)."""
    allowed = r"\x00-\x08\x0B-\x1F\x7F-\x9F\uFFFE\uFFFF" if multiline else _CONTROL
    return {"type": "string", "minLength": 1, "maxLength": limit,
            "pattern": rf"^[^{allowed}]*[^\s{allowed}][^{allowed}]*$",
            "description": description}


def _pattern(pattern: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern, "description": description, **more}


def _enum(values: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description}


_DATE = {"type": "string", "format": "date", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
         "description": "A calendar date, YYYY-MM-DD."}

#: Each rule of gapless.message.fields (its ``Annotated`` type) and what it accepts.
RULES: dict[Any, dict[str, Any]] = {
    fields.InvoiceId: {
        "type": "string", "minLength": 1, "maxLength": MAX_INVOICE_ID,
        "pattern": rf"^[^\s{_CONTROL}]+$",
        "description": "The producer's key of the document, unique per tenant (the idempotency "
                       f"key): 1 to {MAX_INVOICE_ID} printable characters, no spaces."},
    fields.Tenant: _pattern(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                            "1-64 letters, digits, '.', '_' or '-', starting with a letter or "
                            "digit."),
    fields.SeriesCode: _pattern(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$",
                                "The series' code: 1-32 letters, digits, '_' or '-', starting "
                                "with a letter or digit."),
    fields.OptionalSeriesCode: _pattern(
        r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$",
        "The series' code: 1-32 letters, digits, '_' or '-', starting with a letter or digit. "
        "Absent: the tenant's default series of the channel routing chooses (null is refused)."),
    fields.Priority: {"enum": ["user", "batch", None],
                      "description": "user (a person waits) or batch; absent or null: batch. "
                                     "The AMQP priority property decides the order on the "
                                     "queue; this is what the invoice row records."},
    fields.IssueDate: _DATE,
    fields.Currency: _pattern(r"^[A-Z]{3}$", "ISO 4217 code, upper case, e.g. TRY (a UBL-TR "
                                             "document takes GİB's list)."),
    fields.TaxId: _pattern(r"^[0-9]{10,11}$", "A 10-digit VKN (company) or an 11-digit TCKN "
                                              "(person), as a string."),
    fields.Name: _text(MAX_NAME, multiline=False, description=f"Text of 1 to {MAX_NAME} "
                                                              "characters, not blank, one line."),
    fields.Description: _text(MAX_DESCRIPTION, multiline=True,
                              description=f"Text of 1 to {MAX_DESCRIPTION} characters, not "
                                          "blank; line feeds and tabs allowed."),
    fields.Quantity: _decimal(12, 6, positive=True, description=(
        "Decimal string greater than 0: at most 12 digits before the point, 6 after.")),
    fields.UnitPrice: _decimal(15, 8, positive=False, description=(
        "Decimal string, 0 or more: at most 15 digits before the point, 8 after.")),
    fields.VatRate: _decimal(3, 2, positive=False, maximum="100", description=(
        "VAT (KDV) percent, a decimal string from 0 to 100 with at most 2 decimals. A UBL-TR "
        "document takes 0, 1, 10 or 20 only (checked against the tenant's issuer profile).")),
    fields.ExchangeRate: _decimal(15, 6, positive=True, description=(
        "TRY per 1 unit of the document's currency: a decimal string greater than 0 (at most "
        "15 digits before the point, 6 after). A UBL-TR document needs it for a currency other "
        "than TRY and refuses it for TRY.")),
    fields.UnitCode: _pattern(r"^[A-Z0-9]{1,4}$", "UN/ECE Rec. 20 unit code (default C62, "
                                                  "piece); a UBL-TR document takes GİB's list."),
    fields.Profile: _enum(PROFILES, "The GİB scenario (ProfileID). Absent: routing chooses "
                                    "(TEMELFATURA or EARSIVFATURA)."),
    fields.InvoiceType: _enum(INVOICE_TYPES, "The invoice type (InvoiceTypeCode); absent: "
                                             "SATIS."),
    fields.SendType: _enum(SEND_TYPES, "How an e-Arşiv document reaches the buyer; absent: "
                                       "ELEKTRONIK."),
    fields.PaymentMethod: _enum(PAYMENT_METHODS, "GİB's e-Arşiv payment method of an internet "
                                                 "sale."),
    fields.Code3: _pattern(r"^[0-9]{3}$", "GİB's 3-digit code (whether GİB knows it is a "
                                          "UBL-TR document check)."),
    fields.Discount: _decimal(15, 2, positive=False, description=(
        "An amount taken off the line's quantity × unit price: a decimal string, 0 or more, at "
        "most 2 decimals.")),
    fields.WithholdingRate: _decimal(3, 2, positive=True, maximum="100", description=(
        "Withholding percent, greater than 0 and at most 100; when given it must equal the "
        "rate of withholding_code in GİB's list (checked, never used).")),
    fields.Gtip: _pattern(r"^[0-9]{12}$", "The 12-digit customs tariff number (GTİP)."),
    fields.DibLineCode: _pattern(r"^[A-Z0-9]{11}$", "The buyer's 11-character DİB line code."),
    fields.Incoterms: _pattern(r"^[A-Z]{3}$", "INCOTERMS code, e.g. FOB (GİB's list: "
                                              "CFR CIF CIP CPT DAF DDP DDU DEQ DES EXW FAS FCA "
                                              "FOB DAP DPU)."),
    fields.TransportMode: _pattern(r"^[0-9]$", "UN/ECE Rec. 19 transport mode, one digit "
                                               "(1 sea, 2 rail, 3 road, 4 air …)."),
    fields.DocumentNumber: _pattern(r"^[A-Za-z0-9_/.-]{1,64}$",
                                    "A document number: 1-64 letters, digits, '_', '/', '.' "
                                    "or '-' (a return's reference must be a GİB number, e.g. "
                                    "ABC2026000000012)."),
    fields.GibNumber: _pattern(rf"^{fields.GIB_NUMBER_RE.pattern}$",
                               "A GİB e-document number: 3 upper-case letters or digits, the "
                               "year and 9 digits, e.g. IRS2026000000004."),
    fields.Flag: {"type": "boolean", "description": "true or false (a JSON boolean)."},
    fields.Iban: _pattern(r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$",
                          "An IBAN, upper case, no spaces, its check digits right (a UBL-TR "
                          "document needs a Turkish one, TR…)."),
    fields.Note: _pattern(rf"^[^{_NOT_XML}]*$", "Free text for the document (cbc:Note)."),
    fields.DespatchDocument: {"const": DOCUMENTS[1], "description": (
        "A dispatch note (e-İrsaliye, UBL-TR DespatchAdvice).")},
    despatch.DespatchType: _enum(tuple(DESPATCH_TYPES), (
        "The dispatch note's type (DespatchAdviceTypeCode); absent: SEVK. MATBUDAN registers a "
        "paper note issued earlier and needs printed.")),
    despatch.DespatchProfile: _enum(tuple(DESPATCH_PROFILES), (
        "The dispatch note's GİB scenario (ProfileID); absent: TEMELIRSALIYE. HKSIRSALIYE needs "
        "kunye_no on every line; IDISIRSALIYE needs sevkiyat_no and etiket_no on every line.")),
    despatch.PlateSchemeName: _enum(tuple(PLATE_SCHEMES), (
        "The plates' scheme; absent: PLAKA (a Turkish plate, trailers DORSEPLAKA). "
        "YABANCIPLAKA: a foreign plate (trailers YABANCIDORSEPLAKA).")),
    despatch.Plate: _pattern(r"^[A-Z0-9_-]{1,32}$", (
        "A plate: upper-case letters, digits, '_' or '-'. Under PLAKA it must match GİB's "
        f"{PLATE_SCHEMES['PLAKA'].pattern.pattern} (e.g. 34ABC123).")),
    despatch.Tckn: _pattern(r"^[0-9]{11}$", (
        "An 11-digit TCKN (T.C. kimlik numarası), as a string; its check digits must be "
        "right.")),
    despatch.DespatchTime: _pattern(r"^[0-9]{2}:[0-9]{2}:[0-9]{2}$",
                                    "A time of day, HH:MM:SS."),
    despatch.SevkiyatNo: _pattern(IDENTIFIERS["sevkiyat_no"].pattern.pattern,
                                  "The IDIS shipment number (SEVKIYATNO): SE- or ES- and 7 "
                                  "digits."),
    despatch.KunyeNo: _pattern(IDENTIFIERS["kunye_no"].pattern.pattern,
                               "The HKS künye number (KUNYENO) of the line: 19 characters."),
    despatch.EtiketNo: _pattern(IDENTIFIERS["etiket_no"].pattern.pattern,
                                "The IDIS label number (ETIKETNO) of the line: 2 letters and 7 "
                                "digits."),
    despatch.PrintedNumber: _pattern(IDENTIFIERS["printed_number"].pattern.pattern,
                                     "The paper note's number: 16 letters or digits."),
}

#: Field notes beyond the type's, by model and field.
FIELD_NOTES: dict[tuple[str, str], str] = {
    ("Customer", "alias"): "The alias to send to: one of the customer's e-Fatura aliases for "
                           "an invoice, e-İrsaliye aliases for a dispatch note (default: its "
                           "first).",
    ("Customer", "person"): "Required by a UBL-TR document for an 11-digit TCKN customer.",
    ("Customer", "tax_office"): "Required by a UBL-TR document for a 10-digit VKN customer.",
    ("Line", "vat_exemption_code"): "GİB's VAT exemption code of a zero-VAT line, e.g. 301, "
                                    "350, 351, 701, 801.",
    ("Line", "vat_exemption_reason"): "Text of the exemption (default: GİB's name of the "
                                      "code); only with vat_exemption_code.",
    ("Line", "withholding_code"): "GİB's withholding (tevkifat) code, 601…627 or 801…825: "
                                  "required on every line of a TEVKIFAT or TEVKIFATIADE "
                                  "invoice.",
    ("Line", "gtip"): "Required on every line of an IHRACAT document, and of an IHRACKAYITLI "
                      "invoice with exemption code 702.",
    ("Line", "dib_line_code"): "Required on every line of an IHRACKAYITLI invoice with "
                               "exemption code 702.",
    ("InvoiceMessage", "billing_reference"): "The invoices a return (IADE, TEVKIFATIADE) "
                                             "returns; only on a return.",
    ("InvoiceMessage", "despatch_references"): "The dispatch notes (e-İrsaliye) the invoice "
                                               "bills, no two alike; each issue_date not after "
                                               "today in the series' time zone (checked before "
                                               "the seal).",
    ("EArsiv", "is_despatch"): "true: the e-Arşiv invoice travels with the goods instead of a "
                               "dispatch note (the IS_DESPATCH reference); absent: false. Only "
                               "on an invoice that goes e-Arşiv.",
    ("InvoiceMessage", "export"): "Delivery terms of an IHRACAT (export) document; only there.",
    ("InvoiceMessage", "payment"): "Required for a KAMU document.",
    ("InvoiceMessage", "earsiv"): "Only for an EARSIVFATURA document.",
    ("Despatch", "printed"): "Required for a MATBUDAN dispatch note; only there.",
    ("Despatch", "sevkiyat_no"): "Required for an IDISIRSALIYE dispatch note; only there.",
    ("Despatch", "delivery_address"): "district, city and postal_zone are required; "
                                      "postal_zone must match GİB's "
                                      f"{IDENTIFIERS['postal_zone'].pattern.pattern}.",
    ("Despatch", "drivers"): "Who drives the vehicle (then license_plate is required); a "
                             "dispatch note needs drivers or a carrier.",
    ("Despatch", "carrier"): "A carrier company; a dispatch note needs drivers or a carrier.",
    ("Despatch", "trailer_plates"): "The trailers' plates, in the scheme of plate_scheme; only "
                                    "with license_plate.",
    ("DespatchLine", "kunye_no"): "Required on every line of an HKSIRSALIYE dispatch note; "
                                  "only there.",
    ("DespatchLine", "etiket_no"): "Required on every line of an IDISIRSALIYE dispatch note; "
                                   "only there.",
    ("DespatchLine", "unit_price"): "Optional: a dispatch note need not carry prices.",
    ("DespatchMessage", "currency"): "The currency of the lines' prices; absent: TRY.",
}

#: A part's description where its docstring speaks to gapless's developers, not producers.
PART_DESCRIPTIONS = {
    "Customer": "The buyer: a company (10-digit VKN) or a person (11-digit TCKN). A UBL-TR "
                "document needs the tax office of a company, the name parts of a person, and "
                "an address with at least the district and the city.",
}

_TITLE = "gapless message"
_DESCRIPTION = (
    "The JSON body of a message (AMQP content_type application/json, or the body of "
    "POST /v1/invoices): an invoice, or a dispatch note when document is \"despatch\". Unknown "
    "top-level fields are kept and travel in the payload; unknown fields inside any part are "
    "refused. Amounts and quantities are decimal strings, never JSON numbers. A tenant with an "
    "issuer profile (UBL-TR documents) checks more before any number is sealed: "
    "docs/message.md.")
#: The messages, by ``document``: each one's model and description.
MESSAGES: dict[str, tuple[type[BaseModel], str]] = {
    "invoice": (InvoiceMessage, "An invoice (document absent or \"invoice\")."),
    "despatch": (DespatchMessage, "A dispatch note (e-İrsaliye, UBL-TR DespatchAdvice): "
                                  "document \"despatch\"."),
}


class _RefinedSchema(GenerateJsonSchema):
    """pydantic's generator, with each field rule shown as what it accepts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules: dict[Callable[..., Any], dict[str, Any]] = {
            alias.__metadata__[0].func: fragment for alias, fragment in RULES.items()}
        #: The models' own "before" validator (the JSON-shape walk): no schema of its own.
        self.model_checks = {decorator.func for model, _ in MESSAGES.values()
                             for decorator in
                             model.__pydantic_decorators__.model_validators.values()}

    def union_schema(self, schema: core_schema.UnionSchema) -> JsonSchemaValue:
        # A field rule's two ways (fields.Rule) accept what the rule accepts: show the rule.
        choices = schema["choices"]
        if [choice[1] for choice in choices if isinstance(choice, tuple)] == [FAST, RULE]:
            rule = choices[1]
            assert isinstance(rule, tuple)
            return self.generate_inner(rule[0])
        return super().union_schema(schema)

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema
                               ) -> JsonSchemaValue:
        function = schema["function"]["function"]
        if function in self.model_checks:
            return super().function_before_schema(schema)
        fragment = self.rules.get(function)
        if fragment is None:
            raise UnknownRule(f"no JSON Schema for the rule {function.__qualname__}")
        return copy.deepcopy(fragment)  # the generator may change what it is given


def _accepts_null(schema: dict[str, Any]) -> bool:
    return (schema.get("type") == "null" or None in schema.get("enum", ())
            or any(_accepts_null(option) for option in schema.get("anyOf", ())))


def _walk_models(models: dict[str, Any]) -> None:
    """Descriptions in plain text, field notes added; no ``default: null`` on a field that
    refuses null (``series``: absent and null differ)."""
    for name, model in models.items():
        if name in PART_DESCRIPTIONS:
            model["description"] = PART_DESCRIPTIONS[name]
        elif "description" in model:
            model["description"] = " ".join(model["description"].replace("``", "`").split())
        for field, prop in model.get("properties", {}).items():
            if "default" in prop and prop["default"] is None and not _accepts_null(prop):
                del prop["default"]
            note = FIELD_NOTES.get((name, field))
            if note is not None:
                prop["description"] = (f"{prop['description']} {note}"
                                       if "description" in prop else note)


def _top_level(schema: dict[str, Any], model: type[BaseModel], document: str,
               description: str) -> None:
    """A message's own bounds: ``document`` (the invoice takes it as an optional field, so
    that exactly one message's schema matches any body), unknown fields' names and count."""
    schema["description"] = description
    if "document" not in schema["properties"]:
        schema["properties"] = {"document": {"const": document, "description": (
            "The document: absent or \"invoice\" for an invoice.")}, **schema["properties"]}
    # Every key, known or not, is 1 to MAX_EXTRA_KEY characters (the known ones are shorter).
    schema["propertyNames"] = {"minLength": 1, "maxLength": MAX_EXTRA_KEY}
    # An invoice's "document" is one of its kept unknown fields (the model has no such field).
    schema["maxProperties"] = len(model.model_fields) + MAX_EXTRA_FIELDS


def message_schema(ref_template: str = "#/$defs/{model}") -> dict[str, Any]:
    """The message's JSON Schema: one of :class:`InvoiceMessage` and :class:`DespatchMessage`
    (by ``document``), with each field rule shown as what it accepts (see the module's
    docstring). Deterministic: the same models give the same dict. ``ref_template`` places the
    models' and parts' definitions (an OpenAPI document's ``#/components/schemas/{model}``)."""
    _, generated = models_json_schema(
        [(model, "validation") for model, _ in MESSAGES.values()],
        ref_template=ref_template, schema_generator=_RefinedSchema)
    definitions: dict[str, Any] = generated["$defs"]
    _walk_models(definitions)
    for document, (model, description) in MESSAGES.items():
        _top_level(definitions[model.__name__], model, document, description)
    return {"$schema": DIALECT, "title": _TITLE, "description": _DESCRIPTION,
            "oneOf": [{"$ref": ref_template.format(model=model.__name__)}
                      for model, _ in MESSAGES.values()],
            "$defs": definitions}


def schema_text() -> str:
    """The committed file's text: the schema as indented JSON (keys in the generator's order,
    non-ASCII kept), with a final newline."""
    return json.dumps(message_schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(schema_text())


if __name__ == "__main__":
    main()
