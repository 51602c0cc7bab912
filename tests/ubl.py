"""UBL-TR checks shared by the tests: GİB's own XSD and schematron (efatura-kontrol, through the
benchmarks' harness, which has the one copy of that check), and reading the few fields the tests
compare."""

from __future__ import annotations

from bench.harness import UBL_NS, gib_findings, parse_ubl

NS = UBL_NS
findings = gib_findings
__all__ = ["NS", "assert_valid", "assert_valid_despatch", "field", "findings", "parse_ubl"]
#: The root of a dispatch note: efatura-kontrol checks it with GİB's DespatchAdvice XSD and the
#: schematron's `despatchadvice` pattern.
DESPATCH_ROOT = "{urn:oasis:names:specification:ubl:schema:xsd:DespatchAdvice-2}DespatchAdvice"


def assert_valid(document: bytes) -> None:
    problems = findings(document)
    assert problems == [], "\n".join(problems)


def assert_valid_despatch(document: bytes) -> None:
    """A DespatchAdvice (so GİB's DespatchAdvice XSD and `despatchadvice` schematron judge it)
    with no error."""
    assert parse_ubl(document).tag == DESPATCH_ROOT
    assert_valid(document)


def field(document: bytes, path: str) -> str | None:
    """The text of the first element at ``path`` (``cbc:``/``cac:`` prefixes), or None."""
    text: str | None = parse_ubl(document).findtext(path, namespaces=NS)
    return text
