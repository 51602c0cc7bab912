"""UBL-TR checks shared by the tests: GİB's own XSD and schematron (efatura-kontrol), and reading
the few fields the tests compare."""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from lxml import etree

NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
      "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)


@functools.cache
def _validator() -> Any:
    """efatura-kontrol's validator, its XSD and schematron compiled once per process.

    GİB's schematron refuses an IssueDate after the validator's own today (``current-date()``),
    and GİB validates on Turkish time: on a host running on UTC, a document dated today in
    Istanbul would be "in the future" from 21:00 to midnight UTC. So the validating process runs
    on Istanbul's clock, as GİB's does (set before the XSLT engine starts).
    """
    os.environ["TZ"] = "Europe/Istanbul"
    time.tzset()
    from efatura_kontrol import kontrol

    kontrol.hazirla()
    return kontrol.kontrol_et


def findings(document: bytes) -> list[str]:
    """Every error GİB's XSD and schematron find in the document, and every inconsistency of its
    amounts ("hesap" warnings), one line each; empty when it passes."""
    report = _validator()(document)
    return [f"{f.kaynak}/{f.kod}: {f.mesaj}" for f in report.bulgular
            if f.seviye == "hata" or f.kaynak == "hesap"]


def assert_valid(document: bytes) -> None:
    problems = findings(document)
    assert problems == [], "\n".join(problems)


def field(document: bytes, path: str) -> str | None:
    """The text of the first element at ``path`` (``cbc:``/``cac:`` prefixes), or None."""
    root = etree.fromstring(document, _PARSER)
    return root.findtext(path, namespaces=NS)
