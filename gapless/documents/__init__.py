"""Legal documents: UBL-TR 2.1 e-Fatura / e-Arşiv invoices and e-İrsaliye dispatch notes, pure
functions (no I/O).

A tenant with an issuer profile (:class:`Issuer`, set with ``gapless tenant set``) gets UBL-TR
documents; one without keeps the message's JSON (:mod:`gapless.issuing.render`). The issuing flow
calls:

* :func:`check_ubl_inputs` — before a number is sealed: does the message have everything its
  document needs (the customer's address, tax office or name, known unit codes, currency and VAT
  rates, a type its profile allows, GİB's exemption and withholding codes, the returned
  invoices…)? A refusal is a one-line reason naming the field; the message is dead-lettered.
* :func:`render_ubl_tr` — once the number, the UUID (ETTN) and the seal moment are fixed: the
  document's bytes, the same in every process (:data:`FORMAT` names the rendering).
* :func:`check_despatch_inputs` and :func:`render_despatch` — the same two steps for a dispatch
  note (``DespatchAdvice``, :mod:`gapless.documents.despatch`; :data:`DESPATCH_FORMAT`).
* :func:`check_inputs` and :func:`render` — either, by the message's model (an invoice's or a
  dispatch note's), for callers that hold a message of any kind.
* :func:`build_issuer` — validates a profile (``gapless tenant set``).
* :func:`summarize` — a few facts of a rendered document, for people.
* :func:`is_gib_number` — whether a number has GİB's layout (``ABC2026000000001``).

Amounts: :mod:`gapless.documents.amounts` (one rounding rule); code lists and what each invoice
type and profile allows: :mod:`gapless.documents.codes` (data files beside it); the checks:
:mod:`gapless.documents.checks`; the parts of a document: ``parties``, ``taxes``, ``lines``,
``references`` and ``words`` (the amount in Turkish words).
"""

from gapless.documents.checks import VAT_RATES, check_ubl_inputs, is_gib_number
from gapless.documents.despatch import DESPATCH_FORMAT, check_despatch_inputs, render_despatch
from gapless.documents.document import check_inputs, render
from gapless.documents.parties import Issuer, IssuerError, build_issuer, valid_tckn
from gapless.documents.ubl_tr import FORMAT, PLACEHOLDER_NS, render_ubl_tr, summarize

__all__ = [
    "DESPATCH_FORMAT",
    "FORMAT",
    "PLACEHOLDER_NS",
    "VAT_RATES",
    "Issuer",
    "IssuerError",
    "build_issuer",
    "check_despatch_inputs",
    "check_inputs",
    "check_ubl_inputs",
    "is_gib_number",
    "render",
    "render_despatch",
    "render_ubl_tr",
    "summarize",
    "valid_tckn",
]
