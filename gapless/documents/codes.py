"""Code lists of GİB's UBL-TR rules that gapless checks a message against before a number is
sealed, so that a document it renders is one GİB accepts — read once, at import, from data files
beside this module (each names its source in its header):

* ``unit_codes.txt``, ``currency_codes.txt`` — units and currencies;
* ``exemption_codes.tsv`` — VAT exemption reason codes, their group and GİB's name;
* ``withholding_codes.tsv`` — VAT withholding codes and the rate each fixes;
* ``kinds.toml`` — what each invoice type and profile allows and needs.

Generated once from the e-Fatura schematron of GİB's UBL-TR package (UBL-TR 1.2.1, e-Fatura paket
29, schematron of 2026-07-01, as shipped in the ``efatura-kontrol`` distribution): the values of
its ``UnitCodeList`` and ``CurrencyCodeList`` variables, split at the commas, kept in
``unit_codes.txt`` and ``currency_codes.txt`` beside this module. To refresh after a new
GİB package, extract the same two variables again and compare; never read the schematron at run
time (it is a test dependency only).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from decimal import Decimal
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


# --- GİB's tax code lists (with what each code means) and the document kinds --------------------


def _rows(name: str) -> list[list[str]]:
    """The tab-separated rows of a file shipped next to this module (``#`` lines are comments)."""
    text = files("gapless.documents").joinpath(name).read_text(encoding="utf-8")
    return [line.split("\t") for line in text.splitlines()
            if line.strip() and not line.startswith("#")]


@dataclass(frozen=True)
class ExemptionCode:
    """A VAT exemption reason code (cbc:TaxExemptionReasonCode): its group decides which invoice
    types may carry it (``kinds.toml``), its name is the default cbc:TaxExemptionReason."""

    code: str
    group: str
    name: str


@dataclass(frozen=True)
class WithholdingCode:
    """A VAT withholding code: the code fixes the share of the VAT withheld (``percent``)."""

    code: str
    percent: Decimal
    name: str


@dataclass(frozen=True)
class TypeRule:
    """What an invoice type allows and needs (``[types.X]`` of ``kinds.toml``)."""

    name: str
    exemption_groups: frozenset[str]
    requires_group: str | None
    returns: bool
    withholding: str  # "required" | "optional" | "forbidden"
    document_withholding: bool


@dataclass(frozen=True)
class ProfileRule:
    """What a profile (GİB scenario) allows and needs (``[profiles.X]`` of ``kinds.toml``)."""

    name: str
    types: frozenset[str]
    needs: frozenset[str]
    earsiv: bool


#: GİB's name for VAT in a TaxScheme, and its tax type code.
VAT_NAME, VAT_CODE = "KDV", "0015"
#: The code a zero VAT amount gets when the message names none ("KDV - İstisna Olmayan Diğer").
NOT_EXEMPT_CODE = "351"

EXEMPTION_CODES: dict[str, ExemptionCode] = {
    code: ExemptionCode(code, group, name) for code, group, name in _rows("exemption_codes.tsv")}
WITHHOLDING_CODES: dict[str, WithholdingCode] = {
    code: WithholdingCode(code, Decimal(percent), name)
    for code, percent, name in _rows("withholding_codes.tsv")}

_KINDS = tomllib.loads(files("gapless.documents").joinpath("kinds.toml").read_text("utf-8"))
TYPE_RULES: dict[str, TypeRule] = {
    name: TypeRule(name, frozenset(rule["exemption_groups"]), rule.get("requires_group"),
                   bool(rule.get("returns", False)), rule["withholding"],
                   bool(rule.get("document_withholding", False)))
    for name, rule in _KINDS["types"].items()}
PROFILE_RULES: dict[str, ProfileRule] = {
    name: ProfileRule(name, frozenset(rule["types"]), frozenset(rule.get("needs", ())),
                      bool(rule.get("earsiv", False)))
    for name, rule in _KINDS["profiles"].items()}
INCOTERMS: frozenset[str] = frozenset(_KINDS["codes"]["incoterms"])
TRANSPORT_MODES: frozenset[str] = frozenset(_KINDS["codes"]["transport_modes"])
