"""The invoice message: the contract JSON as a typed, frozen model, and the one parser of bodies.

A package of three modules: :mod:`~gapless.message.fields` (each field's rule, and
:class:`InvalidMessage`), :mod:`~gapless.message.model` (the models) and
:mod:`~gapless.message.parse` (bodies in, one-line reasons out).

Every producer's body passes through :func:`parse_message` (the worker) or through
:class:`InvoiceMessage` validation (``publish_invoice``, ``gapless publish``, the API), so both
ends agree on what is valid. The parser's guarantee: whatever the bytes, it returns a valid
:class:`InvoiceMessage` or raises :class:`InvalidMessage` — never anything else — and the
reason it gives is one short line, safe to put in a dead-letter header (it names the field path
and the problem, never a tax id nor the payload).

Optional fields (a UBL-TR document needs them; a message for a tenant without an issuer profile
may omit them): ``customer.tax_office``, ``customer.address``, ``customer.person``,
``lines[].unit_code``, ``profile``, ``type``, ``note``, ``exchange_rate`` and the document
kinds' fields (``lines[].vat_exemption_code``, ``withholding_code``, ``discount``, ``gtip``…,
``billing_reference``, ``export``, ``payment``, ``earsiv``). Whether a message
has what its tenant's document needs is decided later, against the tenant's issuer profile
(:func:`gapless.documents.check_ubl_inputs`); here only their shapes are checked. A field the
producer did not send is not added to the payload.

Rules beyond the plain types, and why:

* **Money and quantities are decimal strings** (``"10.00"``), never JSON numbers: a float cannot
  carry ``0.10`` exactly, and the integrator receives the producer's digits as given. Plain
  notation only (no exponent, NaN or Infinity), bounded digits before and after the point.
* **Unknown top-level fields are kept** (producers of other document kinds add their own) and
  travel in the payload; unknown fields inside ``customer`` or a line are refused, so a typo
  there is a clear error rather than a silently dropped value.
* **Sizes are bounded**: the body (:data:`MAX_BODY_BYTES`, checked before JSON parsing), lines
  (1..1000), every text field, nesting depth and the number of extra fields. Text must be
  storable in PostgreSQL ``jsonb``: no NUL characters and no lone surrogates anywhere.
"""

from gapless.message.fields import (
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
    Payment,
    Person,
)
from gapless.message.parse import (
    check_content_type,
    decode_json,
    parse_message,
    priority_of,
    reason_of,
    validate_message,
)

__all__ = [
    "INVOICE_TYPES",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "MAX_EXTRA_FIELDS",
    "MAX_LINES",
    "MAX_REASON",
    "PAYMENT_METHODS",
    "PROFILES",
    "SEND_TYPES",
    "Address",
    "BillingReference",
    "Carrier",
    "Customer",
    "EArsiv",
    "Export",
    "InternetSale",
    "InvalidMessage",
    "InvoiceMessage",
    "Line",
    "Payment",
    "Person",
    "check_content_type",
    "decode_json",
    "parse_message",
    "priority_of",
    "reason_of",
    "validate_message",
]
