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

from gapless.documents.xml import cac, cbc
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


def address(*, street: str | None, district: str, city: str, postal_zone: str | None,
            country: str | None, tag: str = "PostalAddress") -> str:
    return cac(tag,
               cbc("StreetName", street) if street else "",
               cbc("CitySubdivisionName", district),
               cbc("CityName", city),
               cbc("PostalZone", postal_zone) if postal_zone else "",
               cac("Country", cbc("Name", country or DEFAULT_COUNTRY)))


def message_address(value: Address | None, *, tag: str = "PostalAddress") -> str:
    """An address of the message (the checks made sure it has a district and a city)."""
    assert value is not None
    assert value.district is not None
    assert value.city is not None
    return address(street=value.street, district=value.district, city=value.city,
                   postal_zone=value.postal_zone, country=value.country, tag=tag)


def issuer_address(issuer: Issuer) -> str:
    return address(street=issuer.street, district=issuer.district, city=issuer.city,
                   postal_zone=issuer.postal_zone, country=issuer.country)


def _identification(tax_id: str) -> str:
    return cac("PartyIdentification",
               cbc("ID", tax_id, schemeID="TCKN" if len(tax_id) == 11 else "VKN"))


def _tax_scheme(tax_office: str | None) -> str:
    if not tax_office:
        return ""
    return cac("PartyTaxScheme", cac("TaxScheme", cbc("Name", tax_office)))


def _person(first: str, family: str) -> str:
    return cac("Person", cbc("FirstName", first), cbc("FamilyName", family))


def supplier(issuer: Issuer, *, tag: str = "AccountingSupplierParty",
             identifications: tuple[tuple[str, str], ...] = ()) -> str:
    """The issuer as the supplier party under ``tag`` (an invoice's AccountingSupplierParty, a
    dispatch note's DespatchSupplierParty), with further ``(schemeID, ID)`` identifications
    after its tax id (an IDIS dispatch note's SEVKIYATNO)."""
    person = issuer.is_person
    return cac(tag, cac(
        "Party",
        _identification(issuer.tax_id),
        *[cac("PartyIdentification", cbc("ID", value, schemeID=scheme))
          for scheme, value in identifications],
        "" if person else cac("PartyName", cbc("Name", issuer.name)),
        issuer_address(issuer),
        _tax_scheme(issuer.tax_office),
        cac("Contact", cbc("ElectronicMail", issuer.email)) if issuer.email else "",
        _person(*split_person_name(issuer.name)) if person else ""))


def customer(buyer: Customer, *, tag: str = "AccountingCustomerParty") -> str:
    """The buyer as the customer party under ``tag`` (an invoice's AccountingCustomerParty, a
    dispatch note's DeliveryCustomerParty): a company (VKN, name, tax office) or a person
    (TCKN)."""
    if len(buyer.tax_id) == 11:
        assert buyer.person is not None  # check_ubl_inputs
        name = ""
        person = _person(buyer.person.first_name, buyer.person.family_name)
    else:
        name = cac("PartyName", cbc("Name", buyer.name))
        person = ""
    return cac(tag, cac("Party",
                        _identification(buyer.tax_id),
                        name,
                        message_address(buyer.address),
                        _tax_scheme(buyer.tax_office),
                        person))


def export_parties(buyer: Customer) -> str:
    """An export: the customs office is the customer party, the foreign buyer the buyer party
    (identified by PARTYTYPE ``EXPORT``, with its registered name), as GİB wants."""
    return _CUSTOMS_PARTY + cac("BuyerCustomerParty", cac(
        "Party",
        cac("PartyIdentification", cbc("ID", "EXPORT", schemeID="PARTYTYPE")),
        cac("PartyName", cbc("Name", buyer.name)),
        message_address(buyer.address),
        cac("PartyLegalEntity", cbc("RegistrationName", buyer.name))))


#: The customs office as the customer party of every export.
_CUSTOMS_PARTY = cac("AccountingCustomerParty", cac(
    "Party",
    _identification(CUSTOMS_OFFICE.tax_id),
    cac("PartyName", cbc("Name", CUSTOMS_OFFICE.name)),
    address(street=None, district=CUSTOMS_OFFICE.district, city=CUSTOMS_OFFICE.city,
            postal_zone=None, country=None),
    _tax_scheme(CUSTOMS_OFFICE.tax_office)))


def signature(issuer: Issuer) -> str:
    """Who signs the document (the issuer), and where the XAdES signature will be."""
    return cac("Signature",
               cbc("ID", issuer.tax_id, schemeID="VKN_TCKN"),
               cac("SignatoryParty", _identification(issuer.tax_id), issuer_address(issuer)),
               cac("DigitalSignatureAttachment",
                   cac("ExternalReference", cbc("URI", "#Signature"))))


def party(tag: str, *, tax_id: str, name: str, postal: Address | None,
          fallback: Issuer) -> str:
    """A party known by tax id and name (e.g. an internet sale's carrier); without an address of
    its own it is given ``fallback``'s (where the goods leave)."""
    if postal is not None and postal.district and postal.city:
        where = message_address(postal)
    else:
        where = issuer_address(fallback)
    person = ""
    if len(tax_id) == 11:
        person = _person(*(split_person_name(name) if all(split_person_name(name))
                           else (name, name)))
    return cac(tag,
               _identification(tax_id),
               cac("PartyName", cbc("Name", name)),
               where,
               person)


def driver(first: str, family: str, tckn: str) -> str:
    """A driver of the vehicle (cac:DriverPerson): names, and the TCKN as NationalityID."""
    return cac("DriverPerson",
               cbc("FirstName", first),
               cbc("FamilyName", family),
               cbc("NationalityID", tckn))


@functools.lru_cache(maxsize=1024)
def issuer_parts(issuer: Issuer, tag: str = "AccountingSupplierParty") -> str:
    """The signature and the supplier party (under ``tag``) of ``issuer``'s documents, written
    once: every document of a profile has the same (a profile never changes; a new one is a
    new Issuer)."""
    return signature(issuer) + supplier(issuer, tag=tag)
