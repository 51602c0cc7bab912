"""The XML vocabulary of UBL-TR 2.1 documents: namespaces and the two element makers every part
of a document is built with (lxml)."""

from __future__ import annotations

from typing import Any

from lxml import etree

INV = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
EXT = "urn:oasis:names:specification:ubl:schema:xsd:CommonExtensionComponents-2"
#: The default namespace is the Invoice's (lxml's stubs do not know a None prefix: hence Any).
NSMAP: Any = {None: INV, "cac": CAC, "cbc": CBC, "ext": EXT}
#: Prefixes for reading a document back (XPath).
NS = {"cac": CAC, "cbc": CBC}

Element = etree._Element


def cbc(parent: Element, name: str, text: str, **attrib: str) -> Element:
    """A basic component (``cbc:name``) with its text, appended to ``parent``."""
    element = etree.SubElement(parent, f"{{{CBC}}}{name}", attrib)
    element.text = text
    return element


def cac(parent: Element, name: str) -> Element:
    """An aggregate component (``cac:name``), appended to ``parent``."""
    return etree.SubElement(parent, f"{{{CAC}}}{name}")
