"""The message: the contract JSON as typed, frozen models (an invoice, or a dispatch note with
``"document": "despatch"``), and the one parser of bodies.

A package of five modules: :mod:`~gapless.message.fields` (each field's rule, and
:class:`InvalidMessage`), :mod:`~gapless.message.model` (the invoice and the parts every
document shares), :mod:`~gapless.message.despatch` (the dispatch note and GİB's rules of it),
:mod:`~gapless.message.parse` (bodies in, one-line reasons out) and
:mod:`~gapless.message.jsontext` (JSON text with exact numbers and bounded nesting: how bodies,
stored payloads and integrator answers are read and written).

Every producer's body passes through :func:`parse_message` (the worker) or through
:class:`InvoiceMessage` validation (``publish_invoice``, ``gapless publish``, the API), so both
ends agree on what is valid. The parser's guarantee: whatever the bytes, it returns a valid
:class:`InvoiceMessage` or :class:`DespatchMessage` (by ``document``) or raises
:class:`InvalidMessage` — never anything else — and the reason it gives is one short line,
safe to put in a dead-letter header (it names the field path and the problem, never a tax id nor
the payload).

One rule covers every text of every field, whatever the document kind: a character XML 1.0
cannot carry (a C0 control but tab, line feed and carriage return; a surrogate; U+FFFE, U+FFFF)
is refused before any number is sealed, naming the field — ``note: holds a character XML cannot
carry (U+0001)``. Numbers in unknown fields keep their exact decimal text (never a binary float).

Which fields are optional, and the rules beyond the plain types (decimal strings for money,
unknown fields kept at the top level and refused inside, bounded sizes, text storable in
``jsonb``), with the reasons: docs/message.md.
"""

from gapless.message.despatch import (
    DESPATCH_PROFILES,
    DESPATCH_TYPES,
    GIB_DESPATCH_BOX,
    IDENTIFIERS,
    PLATE_SCHEMES,
    Despatch,
    DespatchLine,
    DespatchMessage,
    Driver,
    OrderReference,
    Printed,
)
from gapless.message.fields import (
    DOCUMENTS,
    INVOICE_TYPES,
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_EXTRA_FIELDS,
    MAX_LINES,
    MAX_REASON,
    PAYMENT_METHODS,
    PROFILES,
    SEND_TYPES,
    InvalidMessage,
)
from gapless.message.model import (
    Address,
    BillingReference,
    Carrier,
    Customer,
    EArsiv,
    Export,
    InternetSale,
    InvoiceMessage,
    Line,
    Message,
    Payment,
    Person,
)
from gapless.message.parse import (
    AnyMessage,
    Decoded,
    check_content_type,
    decode_body,
    decode_json,
    parse_message,
    priority_of,
    reason_of,
    validate_message,
)

__all__ = [
    "DESPATCH_PROFILES",
    "DESPATCH_TYPES",
    "DOCUMENTS",
    "GIB_DESPATCH_BOX",
    "IDENTIFIERS",
    "INVOICE_TYPES",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "MAX_EXTRA_FIELDS",
    "MAX_LINES",
    "MAX_REASON",
    "PAYMENT_METHODS",
    "PLATE_SCHEMES",
    "PROFILES",
    "SEND_TYPES",
    "Address",
    "AnyMessage",
    "BillingReference",
    "Carrier",
    "Customer",
    "Decoded",
    "Despatch",
    "DespatchLine",
    "DespatchMessage",
    "Driver",
    "EArsiv",
    "Export",
    "InternetSale",
    "InvalidMessage",
    "InvoiceMessage",
    "Line",
    "Message",
    "OrderReference",
    "Payment",
    "Person",
    "Printed",
    "check_content_type",
    "decode_body",
    "decode_json",
    "parse_message",
    "priority_of",
    "reason_of",
    "validate_message",
]
