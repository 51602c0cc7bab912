"""UBL-TR checks shared by the tests: GİB's own XSD and schematron (efatura-kontrol, through the
benchmarks' harness, which has the one copy of that check), and reading the few fields the tests
compare."""

from __future__ import annotations

from bench.harness import UBL_NS, gib_findings, parse_ubl

NS = UBL_NS
findings = gib_findings


def assert_valid(document: bytes) -> None:
    problems = findings(document)
    assert problems == [], "\n".join(problems)


def field(document: bytes, path: str) -> str | None:
    """The text of the first element at ``path`` (``cbc:``/``cac:`` prefixes), or None."""
    text: str | None = parse_ubl(document).findtext(path, namespaces=NS)
    return text
