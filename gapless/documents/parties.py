"""Parties of a document: the issuer profile (the supplier) and the shape of Turkish tax ids.

A VKN (vergi kimlik numarası, 10 digits) identifies a company, a TCKN (T.C. kimlik numarası, 11
digits with two check digits) a person. gapless checks their shape and the TCKN's check digits;
whether a number is registered is the integrator's (and GİB's) to say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gapless.errors import GaplessError

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
