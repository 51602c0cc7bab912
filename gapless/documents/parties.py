"""Parties of a document: the issuer profile (the supplier), the shape of Turkish tax ids, and
each party's UBL-TR element (supplier, customer, signatory; for an export the customs office as
the customer and the foreign buyer).

A VKN (vergi kimlik numarası, 10 digits) identifies a company, a TCKN (T.C. kimlik numarası, 11
digits with two check digits) a person. gapless checks their shape and the TCKN's check digits;
whether a number is registered is the integrator's (and GİB's) to say.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gapless.documents.xml import Element, cac, cbc, written
from gapless.errors import GaplessError
from gapless.message import Address, Customer

VKN_RE = re.compile(r"[0-9]{10}")
TCKN_RE = re.compile(r"[1-9][0-9]{10}")
_EMAIL_RE = re.compile(r"[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+")
MAX_FIELD = 256


def valid_tckn(value: str) -> bool:
    """An 11-digit TCKN whose two check digits agree with the first nine (and no leading 0)."""
    if not TCKN_RE.fullmatch(value):
        return False
    digits = [int(char) for char in value]
    tenth = (7 * sum(digits[0:9:2]) - sum(digits[1:8:2])) % 10
    return digits[9] == tenth and digits[10] == sum(digits[:10]) % 10


def split_person_name(name: str) -> tuple[str, str]:
    """First and family name of a person known by one string: the family name is the last word."""
    first, _, family = name.strip().rpartition(" ")
    return first.strip(), family.strip()


class IssuerError(GaplessError):
    """An issuer profile field is not usable; the message names the ``gapless tenant set`` flag."""


@dataclass(frozen=True)
class Issuer:
    """A tenant's issuer profile: the supplier party of every document it issues (the field
    names are the columns of ``tenant_profiles``)."""

    tax_id: str
    name: str
    tax_office: str
    street: str
    district: str
    city: str
    country: str = "Türkiye"
    postal_zone: str | None = None
    email: str | None = None

    @property
    def is_person(self) -> bool:
        """A TCKN issuer (a sole proprietor) is a person: its name is split into first and family
        name in the document."""
        return len(self.tax_id) == 11


def _text(flag: str, value: str | None, *, required: bool) -> str | None:
    if value is None or not value.strip():
        if required:
            raise IssuerError(f"{flag}: must not be empty")
        return None
    text = " ".join(value.split())
    if len(text) > MAX_FIELD or not text.isprintable():
        raise IssuerError(f"{flag}: must be 1 to {MAX_FIELD} printable characters")
    return text


def build_issuer(*, tax_id: str, name: str, tax_office: str, street: str, district: str,
                 city: str, country: str = "Türkiye", postal_zone: str | None = None,
                 email: str | None = None) -> Issuer:
    """A validated issuer profile; raises IssuerError naming the flag (the tax id is never
    echoed)."""
    tax_id = tax_id.strip()
    if len(tax_id) == 11:
        if not valid_tckn(tax_id):
            raise IssuerError("--tax-id: an 11-digit TCKN whose check digits do not match")
    elif not VKN_RE.fullmatch(tax_id):
        raise IssuerError("--tax-id: must be a 10-digit VKN or an 11-digit TCKN")
    clean_name = _text("--name", name, required=True)
    assert clean_name is not None
    if len(tax_id) == 11 and not all(split_person_name(clean_name)):
        raise IssuerError("--name: a TCKN issuer is a person: give first and family name")
    mail = _text("--email", email, required=False)
    if mail is not None and not _EMAIL_RE.fullmatch(mail):
        raise IssuerError("--email: not an e-mail address")
    return Issuer(
        tax_id=tax_id, name=clean_name,
        tax_office=_text("--tax-office", tax_office, required=True) or "",
        street=_text("--street", street, required=True) or "",
        district=_text("--district", district, required=True) or "",
        city=_text("--city", city, required=True) or "",
        country=_text("--country", country, required=True) or "",
        postal_zone=_text("--postal-zone", postal_zone, required=False), email=mail)


# --- rendering --------------------------------------------------------------------------------

DEFAULT_COUNTRY = "Türkiye"


@dataclass(frozen=True)
class CustomsOffice:
    """The customer party of every export (IHRACAT) invoice: GİB routes it to the customs
    administration's e-invoice account; the foreign buyer goes in cac:BuyerCustomerParty."""

    tax_id: str = "1460415308"
    name: str = ("Gümrük ve Ticaret Bakanlığı Gümrükler Genel Müdürlüğü - Bilgi İşlem Dairesi "
                 "Başkanlığı")
    tax_office: str = "Ulus"
    district: str = "Ulus"
    city: str = "Ankara"


CUSTOMS_OFFICE = CustomsOffice()


def address(parent: Element, *, street: str | None, district: str, city: str,
            postal_zone: str | None, country: str | None, tag: str = "PostalAddress") -> None:
    element = cac(parent, tag)
    if street:
        cbc(element, "StreetName", street)
    cbc(element, "CitySubdivisionName", district)
    cbc(element, "CityName", city)
    if postal_zone:
        cbc(element, "PostalZone", postal_zone)
    cbc(cac(element, "Country"), "Name", country or DEFAULT_COUNTRY)


def message_address(parent: Element, value: Address | None, *,
                    tag: str = "PostalAddress") -> None:
    """An address of the message (the checks made sure it has a district and a city)."""
    assert value is not None
    assert value.district is not None
    assert value.city is not None
    address(parent, street=value.street, district=value.district, city=value.city,
            postal_zone=value.postal_zone, country=value.country, tag=tag)


def issuer_address(parent: Element, issuer: Issuer) -> None:
    address(parent, street=issuer.street, district=issuer.district, city=issuer.city,
            postal_zone=issuer.postal_zone, country=issuer.country)


def _identification(parent: Element, tax_id: str) -> None:
    cbc(cac(parent, "PartyIdentification"), "ID", tax_id,
        schemeID="TCKN" if len(tax_id) == 11 else "VKN")


def _tax_scheme(parent: Element, tax_office: str | None) -> None:
    if tax_office:
        cbc(cac(cac(parent, "PartyTaxScheme"), "TaxScheme"), "Name", tax_office)


def _person(parent: Element, first: str, family: str) -> None:
    person = cac(parent, "Person")
    cbc(person, "FirstName", first)
    cbc(person, "FamilyName", family)


def supplier(root: Element, issuer: Issuer, *, tag: str = "AccountingSupplierParty",
             identifications: tuple[tuple[str, str], ...] = ()) -> None:
    """The issuer as the supplier party under ``tag`` (an invoice's AccountingSupplierParty, a
    dispatch note's DespatchSupplierParty), with further ``(schemeID, ID)`` identifications
    after its tax id (an IDIS dispatch note's SEVKIYATNO)."""
    party = cac(cac(root, tag), "Party")
    _identification(party, issuer.tax_id)
    for scheme, value in identifications:
        cbc(cac(party, "PartyIdentification"), "ID", value, schemeID=scheme)
    if not issuer.is_person:
        cbc(cac(party, "PartyName"), "Name", issuer.name)
    issuer_address(party, issuer)
    _tax_scheme(party, issuer.tax_office)
    if issuer.email:
        cbc(cac(party, "Contact"), "ElectronicMail", issuer.email)
    if issuer.is_person:
        _person(party, *split_person_name(issuer.name))


def customer(root: Element, buyer: Customer, *, tag: str = "AccountingCustomerParty") -> None:
    """The buyer as the customer party under ``tag`` (an invoice's AccountingCustomerParty, a
    dispatch note's DeliveryCustomerParty): a company (VKN, name, tax office) or a person
    (TCKN)."""
    party = cac(cac(root, tag), "Party")
    person = len(buyer.tax_id) == 11
    _identification(party, buyer.tax_id)
    if not person:
        cbc(cac(party, "PartyName"), "Name", buyer.name)
    message_address(party, buyer.address)
    _tax_scheme(party, buyer.tax_office)
    if person:
        assert buyer.person is not None  # check_ubl_inputs
        _person(party, buyer.person.first_name, buyer.person.family_name)


def export_parties(root: Element, buyer: Customer) -> None:
    """An export: the customs office is the customer party, the foreign buyer the buyer party
    (identified by PARTYTYPE ``EXPORT``, with its registered name), as GİB wants."""
    office = cac(cac(root, "AccountingCustomerParty"), "Party")
    _identification(office, CUSTOMS_OFFICE.tax_id)
    cbc(cac(office, "PartyName"), "Name", CUSTOMS_OFFICE.name)
    address(office, street=None, district=CUSTOMS_OFFICE.district, city=CUSTOMS_OFFICE.city,
            postal_zone=None, country=None)
    _tax_scheme(office, CUSTOMS_OFFICE.tax_office)
    party = cac(cac(root, "BuyerCustomerParty"), "Party")
    cbc(cac(party, "PartyIdentification"), "ID", "EXPORT", schemeID="PARTYTYPE")
    cbc(cac(party, "PartyName"), "Name", buyer.name)
    message_address(party, buyer.address)
    cbc(cac(party, "PartyLegalEntity"), "RegistrationName", buyer.name)


def signature(root: Element, issuer: Issuer) -> None:
    """Who signs the document (the issuer), and where the XAdES signature will be."""
    element = cac(root, "Signature")
    cbc(element, "ID", issuer.tax_id, schemeID="VKN_TCKN")
    signatory = cac(element, "SignatoryParty")
    _identification(signatory, issuer.tax_id)
    issuer_address(signatory, issuer)
    cbc(cac(cac(element, "DigitalSignatureAttachment"), "ExternalReference"), "URI", "#Signature")


def party(parent: Element, tag: str, *, tax_id: str, name: str,
          postal: Address | None, fallback: Issuer) -> None:
    """A party known by tax id and name (e.g. an internet sale's carrier); without an address of
    its own it is given ``fallback``'s (where the goods leave)."""
    element = cac(parent, tag)
    _identification(element, tax_id)
    cbc(cac(element, "PartyName"), "Name", name)
    if postal is not None and postal.district and postal.city:
        message_address(element, postal)
    else:
        issuer_address(element, fallback)
    if len(tax_id) == 11:
        _person(element, *(split_person_name(name) if all(split_person_name(name))
                           else (name, name)))


def driver(parent: Element, first: str, family: str, tckn: str) -> None:
    """A driver of the vehicle (cac:DriverPerson): names, and the TCKN as NationalityID."""
    person = cac(parent, "DriverPerson")
    cbc(person, "FirstName", first)
    cbc(person, "FamilyName", family)
    cbc(person, "NationalityID", tckn)


@functools.lru_cache(maxsize=1024)
def issuer_parts(issuer: Issuer, tag: str = "AccountingSupplierParty") -> tuple[str, ...]:
    """The signature and the supplier party (under ``tag``) of ``issuer``'s documents, written
    out once: every document of a profile has the same (a profile never changes; a new one is a
    new Issuer)."""

    def make(holder: Element) -> None:
        signature(holder, issuer)
        supplier(holder, issuer, tag=tag)

    return tuple(written(make))
