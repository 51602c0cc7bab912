"""Realistic sample invoices: ``gapless publish --demo``, ``gapless demo`` and the benchmarks.

Every sample is a valid contract message that also carries what a UBL-TR document needs
(customer tax office and address, a person's name for an 11-digit TCKN — with a valid checksum —,
unit codes, current VAT rates), so the same samples work for a tenant with or without an issuer
profile. Customers' tax ids never start with 0, so never the always-rejected ``0000000000`` unless
asked (``reject_every``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

#: The mock integrator always rejects this customer (contract): a forced rejection.
REJECTED_TAX_ID = "0000000000"
#: The time zone of the default series: samples are dated today there.
SAMPLE_TZ = "Europe/Istanbul"

_PRODUCTS = (
    ("Widget", "10.00", "C62"), ("Gadget, blue", "24.90", "C62"),
    ("Consulting hour", "850.00", "HUR"), ("Shipping", "45.50", "C62"),
    ("Cable", "3.75", "MTR"), ("Annual licence", "12000.00", "C62"),
    ("Paper A4, 500 sheets", "119.99", "C62"), ("Repair service", "1500", "C62"),
    ("Screws M4, box of 100", "35.00", "C62"), ("Olive oil", "189.90", "LTR"),
    ("Flour", "32.50", "KGM"),
)
_COMPANIES = ("Example Ltd", "Anadolu Gıda A.Ş.", "Bosphorus Logistics", "Kuzey Yazılım",
              "Ege Tekstil San. Tic.", "Acme Trading")
_PEOPLE = (("Ayşe", "Yılmaz"), ("Mehmet", "Kaya"), ("Zeynep", "Demir"), ("Ali", "Çelik"))
_PLACES = (("Kadıköy", "İstanbul", "34710"), ("Çankaya", "Ankara", "06690"),
           ("Konak", "İzmir", "35250"), ("Nilüfer", "Bursa", "16110"))
_VAT_RATES = ("20", "10", "1")


def tckn(rng: random.Random) -> str:
    """A random 11-digit Turkish identity number with valid check digits."""
    digits = [rng.randint(1, 9)] + [rng.randint(0, 9) for _ in range(8)]
    tenth = (7 * sum(digits[0:9:2]) - sum(digits[1:8:2])) % 10
    digits.append(tenth)
    digits.append(sum(digits) % 10)
    return "".join(map(str, digits))


def vkn(rng: random.Random) -> str:
    """A random 10-digit tax number (the integrator is the authority on registration)."""
    return str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(9))


def _customer(rng: random.Random, tax_id: str | None) -> dict[str, Any]:
    district, city, postal_zone = rng.choice(_PLACES)
    address = {"street": f"{rng.choice(('Atatürk', 'Cumhuriyet', 'İnönü'))} Cad. "
                         f"No:{rng.randint(1, 200)}",
               "district": district, "city": city, "postal_zone": postal_zone,
               "country": "Türkiye"}
    if tax_id is None and rng.random() < 0.25:
        first, family = rng.choice(_PEOPLE)
        return {"tax_id": tckn(rng), "name": f"{first} {family}", "address": address,
                "person": {"first_name": first, "family_name": family}}
    return {"tax_id": tax_id or vkn(rng), "name": rng.choice(_COMPANIES),
            "tax_office": district, "address": address}


def sample_messages(count: int, *, tenant: str, series: str, priority: str,
                    reject_every: int | None = None, seed: int | None = None,
                    run_id: str | None = None) -> Iterator[dict[str, Any]]:
    """``count`` valid, realistic messages with unique invoice ids ``demo-<run>-<n>``, dated
    today (in the default series' time zone).

    Every ``reject_every``-th message carries the tax id the mock integrator always rejects.
    """
    rng = random.Random(seed)
    run_id = run_id or uuid.uuid4().hex[:8]
    today = datetime.now(ZoneInfo(SAMPLE_TZ)).date().isoformat()
    for n in range(1, count + 1):
        rejected = bool(reject_every and n % reject_every == 0)
        lines = []
        for _ in range(rng.randint(1, 5)):
            description, unit_price, unit_code = rng.choice(_PRODUCTS)
            quantity = (str(rng.randint(1, 20)) if unit_code == "C62"
                        else f"{rng.randint(1, 40)}.{rng.randint(0, 9)}")
            lines.append({"description": description, "quantity": quantity,
                          "unit_price": unit_price, "vat_rate": rng.choice(_VAT_RATES),
                          "unit_code": unit_code})
        yield {"invoice_id": f"demo-{run_id}-{n}", "tenant": tenant, "series": series,
               "priority": priority, "issue_date": today, "currency": "TRY",
               "customer": _customer(rng, REJECTED_TAX_ID if rejected else None),
               "lines": lines}


def with_rejected_customer(message: dict[str, Any]) -> dict[str, Any]:
    """The message for a company customer whose tax id the mock integrator always rejects."""
    customer = {key: value for key, value in message["customer"].items() if key != "person"}
    customer.update(tax_id=REJECTED_TAX_ID, tax_office=customer.get("tax_office")
                    or customer["address"]["district"])
    return {**message, "customer": customer}
