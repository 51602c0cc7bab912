"""Code lists of GİB's UBL-TR rules that gapless checks a message against before a number is
sealed, so that a document it renders is one GİB accepts.

Generated once from the e-Fatura schematron of GİB's UBL-TR package (UBL-TR 1.2.1, e-Fatura paket
29, schematron of 2026-07-01, as shipped in the ``efatura-kontrol`` distribution): the values of
its ``UnitCodeList`` and ``CurrencyCodeList`` variables, split at the commas, kept in
``unit_codes.txt`` and ``currency_codes.txt`` beside this module. To refresh after a new
GİB package, extract the same two variables again and compare; never read the schematron at run
time (it is a test dependency only).
"""

from __future__ import annotations

from importlib.resources import files


def _code_list(name: str) -> frozenset[str]:
    """The codes of a list shipped next to this module: whitespace-separated, ``#`` comments."""
    text = files("gapless.documents").joinpath(name).read_text(encoding="utf-8")
    return frozenset(code for line in text.splitlines()
                     for code in line.partition("#")[0].split())


#: UN/ECE Rec. 20 unit codes GİB accepts in cbc:InvoicedQuantity/@unitCode.
UNIT_CODES: frozenset[str] = _code_list("unit_codes.txt")

#: ISO 4217 currency codes GİB accepts in cbc:DocumentCurrencyCode.
CURRENCY_CODES: frozenset[str] = _code_list("currency_codes.txt")
