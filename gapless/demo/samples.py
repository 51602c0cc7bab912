"""Realistic sample invoices: ``gapless publish --demo``, ``gapless demo`` and the benchmarks.

Every sample is a valid contract message that also carries what a UBL-TR document needs
(customer tax office and address, a person's name for an 11-digit TCKN — with a valid checksum —,
unit codes, current VAT rates), so the same samples work for a tenant with or without an issuer
profile. Customers' tax ids never start with 0, so never the always-rejected ``0000000000`` unless
asked (``reject_every``; those are plain sales, so the rejection reaches the integrator).

The samples are a business's mix of documents (:data:`KIND_WEIGHTS`): sales (some lines
discounted, some at 0 % VAT), returns of earlier invoices, services with VAT withholding, exempt
and export-registered sales, special-base sales, exports and public-sector invoices.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
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


def _lines(rng: random.Random, **fields: Any) -> list[dict[str, Any]]:
    lines = []
    for _ in range(rng.randint(1, 5)):
        description, unit_price, unit_code = rng.choice(_PRODUCTS)
        quantity = (str(rng.randint(1, 20)) if unit_code == "C62"
                    else f"{rng.randint(1, 40)}.{rng.randint(0, 9)}")
        lines.append({"description": description, "quantity": quantity,
                      "unit_price": unit_price, "vat_rate": rng.choice(_VAT_RATES),
                      "unit_code": unit_code, **fields})
    return lines


Kind = Callable[[random.Random, dict[str, Any], date], None]


def _sale(rng: random.Random, message: dict[str, Any], today: date) -> None:
    """A sale: now and then a discounted line, or a line at 0 % VAT (GİB's 351)."""
    for line in message["lines"]:
        if rng.random() < 0.3:
            line["discount"] = f"{rng.randint(1, 5)}.{rng.randint(0, 99):02d}"
            gross = float(line["quantity"]) * float(line["unit_price"])
            if float(line["discount"]) > gross:
                del line["discount"]
        elif rng.random() < 0.1:
            line["vat_rate"] = "0"


def _return(rng: random.Random, message: dict[str, Any], today: date) -> None:
    """Goods sent back to the supplier: a return naming the supplier's invoices."""
    message["type"] = "IADE"
    message["billing_reference"] = [
        {"number": f"SUP{today.year}{rng.randint(1, 999_999_999):09d}",
         "issue_date": (today - timedelta(days=rng.randint(0, 30))).isoformat()}
        for _ in range(rng.randint(1, 2))]


def _withholding(rng: random.Random, message: dict[str, Any], today: date) -> None:
    """Services whose VAT the buyer partly withholds (cleaning, catering, freight…)."""
    message["type"] = "TEVKIFAT"
    code = rng.choice(("602", "604", "612", "614", "624", "625"))
    for line in message["lines"]:
        line.update(withholding_code=code, vat_rate="20", unit_code="C62")


def _withholding_return(rng: random.Random, message: dict[str, Any], today: date) -> None:
    _withholding(rng, message, today)
    _return(rng, message, today)
    message["type"] = "TEVKIFATIADE"


def _exempt(rng: random.Random, message: dict[str, Any], today: date) -> None:
    message["type"] = "ISTISNA"
    message["lines"][0].update(vat_rate="0", vat_exemption_code=rng.choice(("301", "302",
                                                                            "311", "350")))


def _export_registered(rng: random.Random, message: dict[str, Any], today: date) -> None:
    """A sale to an exporter (ihraç kayıtlı): 701, or 702 with the customs facts per line."""
    message["type"] = "IHRACKAYITLI"
    code = rng.choice(("701", "702"))
    for line in message["lines"]:
        line.update(vat_rate="0", vat_exemption_code=code)
        if code == "702":
            line.update(gtip=f"{rng.randint(10**11, 10**12 - 1)}",
                        dib_line_code=f"D{rng.randint(10**9, 10**10 - 1)}")


def _special_base(rng: random.Random, message: dict[str, Any], today: date) -> None:
    message["type"] = "OZELMATRAH"
    message["lines"][0].update(vat_rate="0", vat_exemption_code=rng.choice(("805", "806")))


def _export(rng: random.Random, message: dict[str, Any], today: date) -> None:
    """An export: the foreign buyer, delivery terms, a customs tariff number per line."""
    message.update(profile="IHRACAT", type="ISTISNA", currency=rng.choice(("EUR", "USD")),
                   exchange_rate=f"{rng.randint(34, 44)}.{rng.randint(0, 9999):04d}")
    abroad = rng.choice((("Mitte", "Berlin", "Almanya"), ("Westminster", "London", "Birleşik "
                                                          "Krallık")))
    address = {"district": abroad[0], "city": abroad[1], "country": abroad[2]}
    message["customer"] = {"tax_id": "1460415308", "name": rng.choice(("Hansa Handel GmbH",
                                                                        "Thames Imports Ltd")),
                           "address": address}
    message["export"] = {"incoterms": rng.choice(("FOB", "CIF", "EXW", "DAP")),
                         "transport_mode": rng.choice(("1", "3", "4")),
                         "delivery_address": address}
    for line in message["lines"]:
        line.update(vat_rate="0", vat_exemption_code="301",
                    gtip=f"{rng.randint(10**11, 10**12 - 1)}")


def _public_sector(rng: random.Random, message: dict[str, Any], today: date) -> None:
    message["profile"] = "KAMU"
    message["payment"] = {"iban": "TR330006100519786457841326"}


#: The mix of document kinds a sample run publishes (relative weights).
KIND_WEIGHTS: tuple[tuple[str, Kind, int], ...] = (
    ("SATIS", _sale, 50), ("IADE", _return, 10), ("TEVKIFAT", _withholding, 12),
    ("TEVKIFATIADE", _withholding_return, 3), ("ISTISNA", _exempt, 8),
    ("IHRACKAYITLI", _export_registered, 5), ("OZELMATRAH", _special_base, 2),
    ("IHRACAT", _export, 6), ("KAMU", _public_sector, 4))


def sample_messages(count: int, *, tenant: str, series: str, priority: str,
                    reject_every: int | None = None, seed: int | None = None,
                    run_id: str | None = None, kinds: bool = True) -> Iterator[dict[str, Any]]:
    """``count`` valid, realistic messages with unique invoice ids ``demo-<run>-<n>``, dated
    today (in the default series' time zone): the mix of :data:`KIND_WEIGHTS`, or only plain
    sales when ``kinds`` is false.

    Every ``reject_every``-th message is a plain sale to the tax id the mock integrator always
    rejects.
    """
    rng = random.Random(seed)
    run_id = run_id or uuid.uuid4().hex[:8]
    today = datetime.now(ZoneInfo(SAMPLE_TZ)).date()
    builders = [kind for _, kind, _ in KIND_WEIGHTS]
    weights = [weight for _, _, weight in KIND_WEIGHTS]
    for n in range(1, count + 1):
        rejected = bool(reject_every and n % reject_every == 0)
        message: dict[str, Any] = {
            "invoice_id": f"demo-{run_id}-{n}", "tenant": tenant, "series": series,
            "priority": priority, "issue_date": today.isoformat(), "currency": "TRY",
            "customer": _customer(rng, REJECTED_TAX_ID if rejected else None),
            "lines": _lines(rng)}
        kind = rng.choices(builders, weights)[0] if kinds and not rejected else None
        if kind is not None:
            kind(rng, message, today)
        yield message


def with_rejected_customer(message: dict[str, Any]) -> dict[str, Any]:
    """The message for a company customer whose tax id the mock integrator always rejects."""
    customer = {key: value for key, value in message["customer"].items() if key != "person"}
    customer.update(tax_id=REJECTED_TAX_ID, tax_office=customer.get("tax_office")
                    or customer["address"]["district"])
    return {**message, "customer": customer}


#: The demo's e-İrsaliye users (registered at the mock by ``gapless demo``) with their
#: dispatch-note aliases: one alias, or two (a note may name the second).
DESPATCH_USERS: dict[str, tuple[str, ...]] = {
    "4840847211": ("urn:mail:irsaliyepk@anadolu.example",),
    "5950193314": ("urn:mail:irsaliyepk@bosphorus.example", "urn:mail:depo@bosphorus.example"),
    "6061204425": ("urn:mail:irsaliyepk@kuzey.example",),
}
_PLATES = ("34ABC123", "06DEF45", "35GH678", "16JK901")
_TRAILERS = ("34TR001", "06TR002")


def sample_note(rng: random.Random, invoice: dict[str, Any]) -> dict[str, Any]:
    """A realistic dispatch note in ``invoice``'s place (its key, tenant, priority and date):
    to one of :data:`DESPATCH_USERS` (now and then naming the second alias) or to anyone else
    (GİB's box); SEVK or, now and then, MATBUDAN; drivers with a plate (and a trailer) or a
    carrier; lines with or without prices; sometimes the buyer's order."""
    today = invoice["issue_date"]
    customer = _customer(rng, None)
    customer.pop("person", None)
    if customer["tax_id"] and len(customer["tax_id"]) != 10:
        customer["tax_id"] = vkn(rng)
    customer.setdefault("tax_office", customer["address"]["district"])
    if rng.random() < 0.6:
        customer["tax_id"] = rng.choice(list(DESPATCH_USERS))
        aliases = DESPATCH_USERS[customer["tax_id"]]
        if len(aliases) > 1 and rng.random() < 0.5:
            customer["alias"] = aliases[1]
    district, city, postal_zone = rng.choice(_PLACES)
    despatch: dict[str, Any] = {
        "type": "SEVK", "despatch_date": today,
        "despatch_time": f"{rng.randint(7, 18):02d}:{rng.choice(('00', '15', '30', '45'))}:00",
        "delivery_address": {"street": f"Depo Sk. No:{rng.randint(1, 99)}",
                             "district": district, "city": city, "postal_zone": postal_zone,
                             "country": "Türkiye"}}
    if rng.random() < 0.15:
        despatch["type"] = "MATBUDAN"
        despatch["printed"] = {"number": f"MTB{today[:4]}{rng.randint(1, 999999):09d}",
                               "issue_date": today}
    if rng.random() < 0.7:
        first, family = rng.choice(_PEOPLE)
        despatch["drivers"] = [{"first_name": first, "family_name": family,
                                "tckn": tckn(rng)}]
        despatch["license_plate"] = rng.choice(_PLATES)
        if rng.random() < 0.3:
            despatch["trailer_plates"] = [rng.choice(_TRAILERS)]
    else:
        despatch["carrier"] = {"tax_id": vkn(rng), "name": "Bosphorus Logistics"}
    if rng.random() < 0.3:
        despatch["order"] = {"number": f"PO-{rng.randint(1000, 9999)}", "issue_date": today}
    priced = rng.random() < 0.5
    lines = []
    for _ in range(rng.randint(1, 5)):
        description, unit_price, unit_code = rng.choice(_PRODUCTS)
        quantity = (str(rng.randint(1, 20)) if unit_code == "C62"
                    else f"{rng.randint(1, 40)}.{rng.randint(0, 9)}")
        line = {"description": description, "quantity": quantity, "unit_code": unit_code}
        if priced:
            line["unit_price"] = unit_price
        lines.append(line)
    return {"document": "despatch", "invoice_id": invoice["invoice_id"],
            "tenant": invoice["tenant"], "priority": invoice["priority"], "issue_date": today,
            "customer": customer, "despatch": despatch, "lines": lines}
