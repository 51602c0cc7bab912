"""The documents' XML writer (gapless.documents.xml) writes exactly what lxml writes.

Documents are hashed into the chain and resent byte for byte, so the writer must never drift:
for any tree (texts and attribute values of any character XML can carry) its bytes are lxml's
for the same tree, and a rendered document is a fixed point of lxml's parse and write.
"""

from __future__ import annotations

import random
import re
import uuid
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from gapless.demo.samples import sample_messages, sample_note
from gapless.documents import (
    build_issuer,
    check_despatch_inputs,
    check_ubl_inputs,
    render_despatch,
    render_ubl_tr,
)
from gapless.documents import xml as writer
from gapless.documents.xml import CAC, CBC, EXT, INV, NSMAP
from gapless.message import DespatchMessage, validate_message

#: Text XML 1.0 can carry (the message refuses the rest before any document is made).
XML_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=[
    *(chr(code) for code in range(0x20) if chr(code) not in "\t\n\r"), "\ufffe", "\uffff"]),
    max_size=40)

NAMESPACES = {"cbc": CBC, "cac": CAC, "ext": EXT}

#: What :func:`gapless.documents.xml.amount` is given as text: a plain decimal number.
AMOUNT_TEXT = re.compile(r"-?[0-9]+(\.[0-9]+)?")

#: A tree as nested tuples: (prefix, name, text or None, attributes, children).
Tree = st.deferred(lambda: st.tuples(
    st.sampled_from(("cbc", "cac", "ext")),
    st.sampled_from(("Name", "ID", "Note", "Party")),
    st.none() | XML_TEXT | st.from_regex(AMOUNT_TEXT, fullmatch=True),
    st.dictionaries(st.sampled_from(("schemeID", "currencyID", "unitCode")), XML_TEXT,
                    max_size=2),
    st.lists(Tree, max_size=3)))


def ours(tree: tuple) -> str:  # type: ignore[type-arg]
    prefix, name, text, attrib, children = tree
    if prefix == "cbc" and text is not None and not children:
        if list(attrib) == ["currencyID"] and AMOUNT_TEXT.fullmatch(text):
            # An amount: its text is a number as the amounts module writes it, never a message's
            # text (writer.amount writes it unescaped); any other text goes through cbc.
            return writer.amount(name, text, attrib["currencyID"])
        return writer.cbc(name, text, **attrib)  # a basic component
    parts = [writer.escape(text or ""), *(ours(item) for item in children)]
    if prefix == "cac" and not attrib:
        return writer.cac(name, *parts)
    return writer.element(f"{prefix}:{name}", *parts, **attrib)


def lxml_tree(tree: tuple, parent: etree._Element) -> None:  # type: ignore[type-arg]
    prefix, name, text, attrib, children = tree
    element = etree.SubElement(parent, f"{{{NAMESPACES[prefix]}}}{name}", attrib)
    if prefix == "cbc" and text is not None and not children:
        element.text = text  # a basic component: even an empty text is written (``<a></a>``)
    elif text:  # an aggregate's empty text is no text (``<tag/>``), as the writer writes it
        element.text = text
    for item in children:
        lxml_tree(item, element)


@settings(max_examples=100, deadline=None)
@given(st.lists(Tree, max_size=4), st.none() | XML_TEXT)
def test_the_writer_writes_what_lxml_writes(trees: list, root_text: str | None) -> None:  # type: ignore[type-arg]
    mine = writer.document("Invoice", NSMAP,
                           [writer.escape(root_text or ""), *(ours(tree) for tree in trees)])
    theirs = etree.Element(f"{{{INV}}}Invoice", nsmap=NSMAP)  # type: ignore[arg-type]
    if root_text:
        theirs.text = root_text
    for tree in trees:
        lxml_tree(tree, theirs)
    assert mine == etree.tostring(theirs, xml_declaration=True, encoding="UTF-8")


def test_texts_and_attributes_are_escaped_as_lxml_escapes_them() -> None:
    party = writer.cac("Party", writer.cbc("Name", 'A & B "<x>"\r\n', schemeID="a\tb\n\""))
    assert party == ('<cac:Party><cbc:Name schemeID="a&#9;b&#10;&quot;">A &amp; B "&lt;x&gt;"'
                     "&#13;\n</cbc:Name></cac:Party>")


def test_an_aggregate_without_content_is_empty() -> None:
    assert writer.cac("Delivery", "", "") == "<cac:Delivery/>"
    assert writer.element("ext:UBLExtensions", "", schemeID='"') == \
        '<ext:UBLExtensions schemeID="&quot;"/>'


HOSTILE = "a < b & c > d \"q\" 'r'\r\n\t]]> &amp;"


def test_an_attribute_is_written_once_as_the_writer_writes_it() -> None:
    assert writer.attribute("unitCode", 'K&"\t<') == ' unitCode="K&amp;&quot;&#9;&lt;"'
    assert writer.attribute("unitCode", 'K&"\t<') is writer.attribute("unitCode", 'K&"\t<')
    assert writer.amount("PriceAmount", "1.50", "TRY") == \
        writer.cbc("PriceAmount", "1.50", currencyID="TRY")


def test_rendered_documents_are_a_fixed_point_of_lxml() -> None:
    """Every kind of document the demo makes, with text that needs escaping, parsed by lxml and
    written again, is the same bytes."""
    issuer = build_issuer(tax_id="1234567890", name='Ada & "Bros" <Ltd>', tax_office="Kadıköy",
                          street="Rıhtım Cad.\tNo: 1 > 0", district="Kadıköy", city="İstanbul",
                          postal_zone="34716", email="a&b@example.com")
    checked = 0
    for data in sample_messages(120, tenant="acme", series="ABC", priority="batch", seed=11,
                                kinds=True):
        data["note"] = HOSTILE
        for line in data["lines"]:  # a line is a template with slots: its text escaped too
            line["description"] = HOSTILE.replace("\r\n\t", " ")  # one line of text
        message = validate_message(data)
        check_ubl_inputs(message, issuer)
        body = render_ubl_tr(message, number="ABC2026000000001", uuid=uuid.UUID(int=7),
                             sealed_at=datetime(2026, 11, 26, 12, tzinfo=UTC),
                             tz="Europe/Istanbul", issuer=issuer)
        again = etree.tostring(etree.fromstring(body), xml_declaration=True, encoding="UTF-8")
        assert again == body
        checked += 1
    assert checked == 120


def test_rendered_dispatch_notes_are_a_fixed_point_of_lxml() -> None:
    """The same for dispatch notes, whose header and lines are templates too: texts that need
    escaping in the note and in every line's description."""
    issuer = build_issuer(tax_id="1234567890", name='Ada & "Bros" <Ltd>', tax_office="Kadıköy",
                          street="Rıhtım Cad.\tNo: 1 > 0", district="Kadıköy", city="İstanbul",
                          postal_zone="34716", email="a&b@example.com")
    rng = random.Random(5)
    checked = 0
    for data in sample_messages(60, tenant="acme", series="IRS", priority="batch", seed=5,
                                kinds=False):
        note = sample_note(rng, data)
        note["note"] = HOSTILE
        for line in note["lines"]:
            line["description"] = HOSTILE.replace("\r\n\t", " ")
        message = validate_message(note)
        assert isinstance(message, DespatchMessage)
        check_despatch_inputs(message, issuer)
        body = render_despatch(message, number="IRS2026000000001", uuid=uuid.UUID(int=9),
                               sealed_at=datetime(2026, 11, 26, 12, tzinfo=UTC),
                               tz="Europe/Istanbul", issuer=issuer)
        assert b"a &lt; b &amp; c &gt; d" in body
        again = etree.tostring(etree.fromstring(body), xml_declaration=True, encoding="UTF-8")
        assert again == body
        checked += 1
    assert checked == 60
