"""The XML vocabulary of UBL-TR 2.1 documents: namespaces, and the element makers every part of a
document is written with.

A document is written once, in schema order, and nothing reads it back while it is being made.
So there is no tree: each maker returns its element as XML text, made of its children's text,
and a part of a document is an expression shaped like the XML it writes::

    cac("TaxCategory",
        cbc("TaxExemptionReasonCode", code) if code else "",
        scheme)

A part that is absent is the empty string, which adds nothing; an aggregate left with no
content is written ``<cac:Name/>``. A part the same in many documents (the issuer's parties,
the same in every document of a tenant; a tax scheme) is written once and placed as it is.

The parts every invoice has, many times and always in the same shape — an invoice line, a tax
subtotal, the totals, the header — are templates instead: one f-string shaped like the XML,
whose slots are numbers written by :mod:`gapless.documents.amounts`, attributes written by
:func:`attribute`, texts passed through :func:`escape`, or parts made by the makers (optional
ones are the empty string). Check and rendering of a 5-line invoice take 1.04 M instructions
(1.35 M with makers only, 1.94 M with a tree of element objects; docs/benchmarks.md,
"Documents written as text" and "Templates for the parts every invoice repeats").

The bytes are exactly what lxml writes for the same tree — the same declaration, the same
escapes (text: ``& < >`` and carriage return; attributes: also ``"`` and tab, line feed and
carriage return as character references) and ``<tag/>`` for an element with neither text nor
children; a test holds the writer to lxml's parse-and-write of its own output, another to the
recorded digest of a fixture's documents. Documents are read back with lxml (:data:`NS`).
"""

from __future__ import annotations

from collections.abc import Iterable

INV = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
EXT = "urn:oasis:names:specification:ubl:schema:xsd:CommonExtensionComponents-2"
#: The prefixes a document declares on its root, in this order (the default one first).
NSMAP: dict[str | None, str] = {None: INV, "cac": CAC, "cbc": CBC, "ext": EXT}
#: Prefixes for reading a document back (XPath).
NS = {"cac": CAC, "cbc": CBC}

DECLARATION = "<?xml version='1.0' encoding='UTF-8'?>\n"


def cbc(name: str, text: str, **attrib: str) -> str:
    """A basic component (``cbc:name``) with its text (a basic component has no children)."""
    if attrib:
        return f"<cbc:{name}{_attributes(attrib)}>{escape(text)}</cbc:{name}>"
    return f"<cbc:{name}>{escape(text)}</cbc:{name}>"


def amount(name: str, text: str, currency: str) -> str:
    """A basic component with a ``currencyID`` (an amount): ``cbc(name, text,
    currencyID=currency)``, the most frequent element of a document, made without the keyword
    arguments' dict. ``text`` is a number as :mod:`gapless.documents.amounts` writes it (digits,
    a point, a sign), never a message's text: it has nothing to escape."""
    return f"<cbc:{name}{attribute('currencyID', currency)}>{text}</cbc:{name}>"


def attribute(name: str, value: str) -> str:
    """One attribute as a start tag writes it, after a space (`` currencyID="TRY"``): for the
    templates of the parts every document has in the same shape (an invoice line, a tax
    subtotal), which write their elements as one text with slots."""
    written = _ATTRIBUTE.get((name, value))
    if written is None:
        written = f' {name}="{_attribute(value)}"'
        if len(_ATTRIBUTE) < _ATTRIBUTE_MAX:
            _ATTRIBUTE[(name, value)] = written
    return written


def cac(name: str, *parts: str) -> str:
    """An aggregate component (``cac:name``) holding ``parts`` (elements as written; an empty
    part adds nothing)."""
    inner = "".join(parts)
    if inner:
        return f"<cac:{name}>{inner}</cac:{name}>"
    return f"<cac:{name}/>"


def element(tag: str, *parts: str, **attrib: str) -> str:
    """An element of any prefix (``ext:UBLExtensions``) holding ``parts`` (elements as written,
    or text escaped with :func:`escape`), with attributes."""
    start = f"<{tag}{_attributes(attrib)}" if attrib else f"<{tag}"
    inner = "".join(parts)
    if inner:
        return f"{start}>{inner}</{tag}>"
    return start + "/>"


def document(tag: str, namespaces: dict[str | None, str], parts: Iterable[str]) -> bytes:
    """The document whose root ``tag`` declares ``namespaces`` (prefix None: the default one) and
    holds ``parts``: UTF-8 with the XML declaration, as lxml writes it."""
    inner = "".join(parts)
    key = (tag, tuple(namespaces.items()))
    start = _ROOTS.get(key)
    if start is None:
        start = _ROOTS[key] = f"<{tag}" + _attributes({
            ("xmlns" if prefix is None else f"xmlns:{prefix}"): uri
            for prefix, uri in namespaces.items()})
    if not inner:
        return f"{DECLARATION}{start}/>".encode()
    return f"{DECLARATION}{start}>{inner}</{tag}>".encode()


#: The start of a root element with its namespace declarations, as written (``<Invoice
#: xmlns=…``, without its closing ``>``), by tag and namespaces: a few per process.
_ROOTS: dict[tuple[str, tuple[tuple[str | None, str], ...]], str] = {}
#: Attributes written before (a few distinct ones recur in every document: currencies, unit
#: codes, scheme names), by name and value; bounded, for values that come from messages.
_ATTRIBUTE: dict[tuple[str, str], str] = {}
_ATTRIBUTE_MAX = 4096


def _attributes(attrib: dict[str, str]) -> str:
    """The attributes as written in a start tag, each after a space (:func:`attribute`)."""
    return "".join([attribute(name, value) for name, value in attrib.items()])


def escape(value: str) -> str:
    """``value`` as the text of an element."""
    if "&" in value:
        value = value.replace("&", "&amp;")
    if "<" in value:
        value = value.replace("<", "&lt;")
    if ">" in value:
        value = value.replace(">", "&gt;")
    if "\r" in value:
        value = value.replace("\r", "&#13;")
    return value


def _attribute(value: str) -> str:
    value = escape(value)
    if '"' in value:
        value = value.replace('"', "&quot;")
    if "\n" in value:
        value = value.replace("\n", "&#10;")
    if "\t" in value:
        value = value.replace("\t", "&#9;")
    return value
