"""UBL-TR checks shared by the tests: GİB's own XSD and schematron (efatura-kontrol), and reading
the few fields the tests compare."""

from __future__ import annotations

import functools
import os
import time
from decimal import Decimal
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


#: The two "hesap" (arithmetic) warnings that line discounts raise, because efatura-kontrol reads
#: LegalMonetaryTotal the EN 16931 way (LineExtensionAmount = Σ line net amounts,
#: AllowanceTotalAmount = document-level allowances only) while gapless writes it the way Turkish
#: invoices show it: goods before discounts, the line discounts' total, then the VAT base
#: (TaxExclusiveAmount = LineExtensionAmount − AllowanceTotalAmount, which efatura-kontrol checks
#: and which holds). :func:`_discount_convention_holds` accepts them only when the document's
#: numbers are exactly that convention's.
_DISCOUNT_CONVENTION = frozenset({"hesap-dip-satir", "hesap-dip-indirim"})


def _amount(element: Any, path: str) -> Decimal:
    return Decimal(element.findtext(path, namespaces=NS) or "0")


def _discount_convention_holds(document: bytes) -> bool:
    """LineExtensionAmount = Σ line net + Σ line discounts, AllowanceTotalAmount = Σ line
    discounts, and no document-level allowance or charge."""
    root = etree.fromstring(document, _PARSER)
    if root.find("cac:AllowanceCharge", NS) is not None:
        return False
    lines = root.findall("cac:InvoiceLine", NS)
    nets = sum((_amount(line, "cbc:LineExtensionAmount") for line in lines), Decimal(0))
    discounts = sum((_amount(charge, "cbc:Amount") for line in lines
                     for charge in line.findall("cac:AllowanceCharge", NS)
                     if charge.findtext("cbc:ChargeIndicator", namespaces=NS) == "false"),
                    Decimal(0))
    total = "cac:LegalMonetaryTotal/cbc:"
    return (_amount(root, total + "LineExtensionAmount") == nets + discounts
            and _amount(root, total + "AllowanceTotalAmount") == discounts)


def findings(document: bytes) -> list[str]:
    """Every error GİB's XSD and schematron find in the document, and every inconsistency of its
    amounts ("hesap" warnings), one line each; empty when it passes."""
    report = _validator()(document)
    problems = [f for f in report.bulgular if f.seviye == "hata" or f.kaynak == "hesap"]
    if {f.kod for f in problems} & _DISCOUNT_CONVENTION and _discount_convention_holds(document):
        problems = [f for f in problems if f.kod not in _DISCOUNT_CONVENTION]
    return [f"{f.kaynak}/{f.kod}: {f.mesaj}" for f in problems]


def assert_valid(document: bytes) -> None:
    problems = findings(document)
    assert problems == [], "\n".join(problems)


def field(document: bytes, path: str) -> str | None:
    """The text of the first element at ``path`` (``cbc:``/``cac:`` prefixes), or None."""
    root = etree.fromstring(document, _PARSER)
    return root.findtext(path, namespaces=NS)
