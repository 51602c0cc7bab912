"""The XML vocabulary of UBL-TR 2.1 documents: namespaces, the element makers every part of a
document is built with, and the writer that turns the tree into bytes.

A document is built once, in schema order, and written out: nothing reads it back while it is
being made. So the tree is a plain one (an :class:`Element` is a tag, a text, attributes and
children), written with the fixed prefixes below, about twice as fast as building an lxml tree
(lxml looks each namespace up again for every element). A basic component (``cbc:``) never has
children, so it is written out as it is made: a child may be text that is XML already. The
bytes are exactly what lxml writes for the same tree — the same declaration, the same escapes
(text: ``& < >`` and carriage return; attributes: also ``"`` and tab, line feed and carriage
return as character references) and ``<tag/>`` for an element with neither text nor children;
a test holds the writer to lxml's parse-and-write of its own output. Documents are read back
with lxml (:data:`NS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

INV = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"
EXT = "urn:oasis:names:specification:ubl:schema:xsd:CommonExtensionComponents-2"
#: The prefixes a document declares on its root, in this order (the default one first).
NSMAP: dict[str | None, str] = {None: INV, "cac": CAC, "cbc": CBC, "ext": EXT}
#: Prefixes for reading a document back (XPath).
NS = {"cac": CAC, "cbc": CBC}

DECLARATION = "<?xml version='1.0' encoding='UTF-8'?>\n"


class Element:
    """One element: its qualified tag (``cbc:Name``), text, attributes and children, in order;
    a child is an element, or a part written out already (XML text, placed as it is).

    Its start tag (without the closing ``>``) is written when it is made: the attributes are
    given then and never change."""

    __slots__ = ("attrib", "children", "start", "tag", "text")

    def __init__(self, tag: str, text: str | None = None,
                 attrib: dict[str, str] | None = None) -> None:
        self.tag = tag
        self.text = text
        self.attrib = attrib
        self.start = _start(tag, attrib)
        self.children: list[Element | str] = []

    def append(self, child: Element | str) -> None:
        self.children.append(child)

    def __iter__(self) -> Iterator[Element | str]:
        return iter(self.children)

    def __len__(self) -> int:
        return len(self.children)


def root(tag: str, namespaces: dict[str | None, str]) -> Element:
    """A document's root element, declaring ``namespaces`` (prefix None: the default one)."""
    return Element(tag, attrib={("xmlns" if prefix is None else f"xmlns:{prefix}"): uri
                                for prefix, uri in namespaces.items()})


def child(parent: Element, tag: str, text: str | None = None, **attrib: str) -> Element:
    """An element of any prefix (``ext:UBLExtensions``), appended to ``parent``."""
    element = Element(tag, text, attrib or None)
    parent.children.append(element)
    return element


def cbc(parent: Element, name: str, text: str, **attrib: str) -> None:
    """A basic component (``cbc:name``) with its text, written out and appended to ``parent``
    (a basic component has no children)."""
    if attrib:
        parent.children.append(f"<cbc:{name}{_attributes(attrib)}>{_text(text)}</cbc:{name}>")
    else:
        parent.children.append(f"<cbc:{name}>{_text(text)}</cbc:{name}>")


def cac(parent: Element, name: str) -> Element:
    """An aggregate component (``cac:name``), appended to ``parent``."""
    element = Element("cac:" + name)
    parent.children.append(element)
    return element


def written(make: Callable[[Element], None]) -> list[str]:
    """The parts ``make`` appends to a parent, each written out once: a part the same in many
    documents (the issuer's parties, the same in every document of a tenant) is then placed as
    it is (``parent.append(part)``)."""
    holder = Element("holder")
    make(holder)
    return [item if isinstance(item, str) else _xml(item) for item in holder.children]


def tostring(element: Element) -> bytes:
    """The document rooted at ``element``: UTF-8 with the XML declaration, as lxml writes it."""
    parts = [DECLARATION]
    _write(element, parts)
    return "".join(parts).encode()


def _xml(element: Element) -> str:
    parts: list[str] = []
    _write(element, parts)
    return "".join(parts)


def _write(element: Element, out: list[str]) -> None:
    """Append the parts of ``element``'s XML to ``out`` (one list for the whole document: no
    string is joined twice)."""
    text = element.text
    if element.children:
        out.append(element.start + ">" if text is None else f"{element.start}>{_text(text)}")
        for item in element.children:
            if type(item) is str:
                out.append(item)
            else:
                _write(item, out)  # type: ignore[arg-type]
        out.append(f"</{element.tag}>")
    elif text is None:
        out.append(element.start + "/>")
    else:
        out.append(f"{element.start}>{_text(text)}</{element.tag}>")


def _start(tag: str, attrib: dict[str, str] | None) -> str:
    """An element's start tag without its closing ``>`` (an empty element ends it ``/>``)."""
    if not attrib:
        return "<" + tag
    return "<" + tag + _attributes(attrib)


#: Attributes written before (a few distinct ones recur in every document: currencies, unit
#: codes, scheme names), by their (name, value) pairs; bounded, for values that come from
#: messages.
_WRITTEN_ATTRIBUTES: dict[tuple[tuple[str, str], ...], str] = {}
_WRITTEN_ATTRIBUTES_MAX = 4096


def _attributes(attrib: dict[str, str]) -> str:
    """The attributes as written in a start tag, each after a space."""
    key = tuple(attrib.items())
    written_before = _WRITTEN_ATTRIBUTES.get(key)
    if written_before is not None:
        return written_before
    text = "".join([f' {name}="{_attribute(value)}"' for name, value in key])
    if len(_WRITTEN_ATTRIBUTES) < _WRITTEN_ATTRIBUTES_MAX:
        _WRITTEN_ATTRIBUTES[key] = text
    return text


def _text(value: str) -> str:
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
    value = _text(value)
    if '"' in value:
        value = value.replace('"', "&quot;")
    if "\n" in value:
        value = value.replace("\n", "&#10;")
    if "\t" in value:
        value = value.replace("\t", "&#9;")
    return value
