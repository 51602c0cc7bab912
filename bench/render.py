"""Benchmark: CPU time to render a UBL-TR invoice vs serialising the message as JSON.

    .venv/bin/python bench/render.py [--seconds 1] [--rounds 5] [--lines 5,50]
                                     [--kinds all] [--kind-lines 5] [--validate]

All in one process, no I/O: CPU time (``time.process_time``) per document, for each message
measured three ways:

* JSON document    — ``canonical_json(message.payload())``: the document of a tenant without an
                     issuer profile (the baseline);
* check_ubl_inputs — the gate a worker runs once before reserving a number, cold (it computes
                     the message's totals);
* render_ubl_tr    — the document, as bytes, after the check (the check is not part of it; the
                     totals the check computed are reused, as in a worker, which runs the check,
                     then the rendering: its cost per invoice is the sum).

Three tables:

* **by size** — a plain sale (``SATIS``, ``TICARIFATURA``) of ``--lines`` lines (mixed KDV
  rates, decimal quantities and prices, Turkish text, a company customer with its address);
* **dispatch note** — a dispatch note (e-İrsaliye, ``DespatchAdvice``) of ``--despatch-lines``
  lines: two drivers, the plate and a trailer, a carrier, an order, priced lines; measured the
  same three ways with ``check_despatch_inputs`` and ``render_despatch``;
* **by kind** — one message of ``--kind-lines`` lines for each document kind gapless renders
  (:data:`KINDS`: every invoice type, the IHRACAT, KAMU and EARSIVFATURA profiles, line
  discounts, withholding and exemption codes), each valid for GİB (``check_ubl_inputs`` passes;
  ``--validate`` also runs GİB's XSD and schematron on each, with efatura-kontrol,
  before measuring). ``--kinds`` picks some of them by label, ``none`` skips the table.

Each variant runs in batches until it has used ``--seconds`` of CPU; the variants take turns,
``--rounds`` times, so that outside load hits all of them alike. The tables show the best round
(the least disturbed) and the median round. Goal: render_ubl_tr under 1 ms of CPU for a 5-line
invoice, of every kind, and render_despatch under 1 ms for a 5-line dispatch note. The defaults
take about 4 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import gib_findings, machine, print_table
from gapless.documents import (
    Issuer,
    build_issuer,
    check_despatch_inputs,
    check_ubl_inputs,
    render_despatch,
    render_ubl_tr,
)
from gapless.documents.amounts import forget_totals
from gapless.issuing.render import canonical_json
from gapless.message import DespatchMessage, InvoiceMessage, validate_message

GOAL_MS = 1.0
BATCH = 20
RATES = ("20", "10", "1", "20", "10")
ISSUE_DATE = "2026-11-22"
NUMBER = "ABC2026000000001"
SEALED_AT = datetime(2026, 11, 22, 9, 30, tzinfo=UTC)
DOCUMENT_UUID = UUID("3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c")
TZ = "Europe/Istanbul"


def line_items(lines: int) -> list[dict[str, Any]]:
    """``lines`` realistic lines: mixed KDV rates, decimal quantities and prices, Turkish text."""
    items = []
    for index in range(lines):
        rate = RATES[index % len(RATES)]
        items.append({"description": f"Ürün {index + 1}: çay, şeker ve ığdır kayısısı",
                      "quantity": f"{1 + index % 7}.{index % 1000:03d}",
                      "unit_price": f"{12 + index * 3}.{(index * 37) % 100:02d}5",
                      "vat_rate": rate, "unit_code": ("C62", "KGM", "LTR")[index % 3]})
    return items


def sale(lines: int) -> dict[str, Any]:
    """A plain sale (SATIS under TICARIFATURA) to a company customer, as a contract dict."""
    return {
        "invoice_id": f"bench-{lines}", "tenant": "bench", "series": "ABC",
        "issue_date": ISSUE_DATE, "currency": "TRY", "profile": "TICARIFATURA",
        "note": "Ödeme vadesi 30 gündür.",
        "customer": {"tax_id": "1234567890", "name": "Ege Gıda Sanayi ve Ticaret Ltd. Şti.",
                     "tax_office": "Bornova",
                     "address": {"street": "Kazım Dirik Mah. 372 Sk. No: 4", "district": "Bornova",
                                 "city": "İzmir", "postal_zone": "35040"}},
        "lines": line_items(lines)}


def invoice(lines: int) -> InvoiceMessage:
    """A realistic plain sale of ``lines`` lines."""
    return as_invoice(sale(lines))


def as_invoice(data: dict[str, Any]) -> InvoiceMessage:
    message = validate_message(data)
    assert isinstance(message, InvoiceMessage)
    return message


DESPATCH_NUMBER = "IRS2026000000001"


def despatch_note(lines: int) -> DespatchMessage:
    """A realistic dispatch note of ``lines`` priced lines: two drivers, the truck's plate and
    its trailer, a carrier, the buyer's order."""
    data = sale(lines)
    for field in ("currency", "profile", "series"):
        data.pop(field)
    data.update(document="despatch", invoice_id=f"bench-despatch-{lines}", despatch={
        "despatch_date": ISSUE_DATE, "despatch_time": "08:45:00",
        "delivery_address": {"street": "Atatürk OSB 10003 Sk. No: 7", "district": "Çiğli",
                             "city": "İzmir", "postal_zone": "35620", "country": "Türkiye"},
        "drivers": [{"first_name": "Ali", "family_name": "Yılmaz", "tckn": "10000000078"},
                    {"first_name": "Hasan", "family_name": "Kaya", "tckn": "10000000146"}],
        "license_plate": "35ABC123", "trailer_plates": ["35DR4567"],
        "carrier": {"tax_id": "4560001234", "name": "Ege Lojistik A.Ş."},
        "order": {"number": "SIP-2026-0815", "issue_date": "2026-11-20"}},
        lines=[{key: item[key] for key in ("description", "quantity", "unit_price",
                                           "unit_code")} for item in data["lines"]])
    message = validate_message(data)
    assert isinstance(message, DespatchMessage)
    return message


# -- the document kinds ---------------------------------------------------------------------------

#: The invoices a return names (GİB numbers, dated before the return).
RETURNED = [{"number": "EGE2026000000417", "issue_date": "2026-11-02"},
            {"number": "EGE2026000000452", "issue_date": "2026-11-09"}]
#: Withholding (tevkifat) codes of services: consultancy, catering, cleaning, staff transport,
#: freight (GİB's 602, 604, 612, 614, 624).
WITHHOLDING = ("602", "604", "612", "614", "624")
ABROAD = {"street": "Friedrichstraße 68", "district": "Mitte", "city": "Berlin",
          "postal_zone": "10117", "country": "Almanya"}


def _with_lines(message: dict[str, Any], **fields: Any) -> None:
    for line in message["lines"]:
        line.update(fields)


def _discounts(message: dict[str, Any]) -> None:
    for index, line in enumerate(message["lines"]):
        line["discount"] = f"{index + 1}.{(index * 29) % 100:02d}"


def _return(message: dict[str, Any]) -> None:
    message.update(type="IADE", profile="TEMELFATURA", billing_reference=RETURNED)


def _withholding(message: dict[str, Any]) -> None:
    message["type"] = "TEVKIFAT"
    for index, line in enumerate(message["lines"]):
        line.update(vat_rate="20", withholding_code=WITHHOLDING[index % len(WITHHOLDING)])


def _withholding_return(message: dict[str, Any]) -> None:
    _withholding(message)
    message.update(type="TEVKIFATIADE", profile="TEMELFATURA", billing_reference=RETURNED)


def _exempt(message: dict[str, Any]) -> None:
    """Two of the lines exempt: 301 (export of goods) and 311 (international transport)."""
    message["type"] = "ISTISNA"
    message["lines"][0].update(vat_rate="0", vat_exemption_code="301")
    message["lines"][1].update(vat_rate="0", vat_exemption_code="311")


def _export_registered(code: str) -> Callable[[dict[str, Any]], None]:
    def build(message: dict[str, Any]) -> None:
        message["type"] = "IHRACKAYITLI"
        for index, line in enumerate(message["lines"]):
            line.update(vat_rate="0", vat_exemption_code=code)
            if code == "702":
                line.update(gtip=f"{847130000000 + index}", dib_line_code=f"D{1234567890 + index}")
    return build


def _special_base(message: dict[str, Any]) -> None:
    message["type"] = "OZELMATRAH"
    message["lines"][0].update(vat_rate="0", vat_exemption_code="806")


def _export(message: dict[str, Any]) -> None:
    message.update(profile="IHRACAT", type="ISTISNA", currency="EUR", exchange_rate="37.1234",
                   customer={"tax_id": "1460415308", "name": "Hansa Handel GmbH",
                             "address": ABROAD},
                   export={"incoterms": "CIF", "transport_mode": "1", "delivery_address": ABROAD})
    for index, line in enumerate(message["lines"]):
        line.update(vat_rate="0", vat_exemption_code="301", gtip=f"{200819990000 + index}")


def _public_sector(message: dict[str, Any]) -> None:
    message.update(profile="KAMU", payment={"iban": "TR330006100519786457841326"},
                   customer={"tax_id": "7330049315", "name": "Bornova Belediyesi",
                             "tax_office": "Bornova",
                             "address": {"street": "Fevzi Çakmak Mah. 1 Sk. No: 2",
                                         "district": "Bornova", "city": "İzmir",
                                         "postal_zone": "35030"}})


def _internet_sale(message: dict[str, Any]) -> None:
    """An e-Arşiv sale to a person through a web shop, shipped by a carrier."""
    message.update(profile="EARSIVFATURA", customer={
        "tax_id": "10000000146", "name": "Ayşe Yılmaz",
        "person": {"first_name": "Ayşe", "family_name": "Yılmaz"},
        "address": {"street": "Cumhuriyet Cad. No: 12", "district": "Kadıköy",
                    "city": "İstanbul", "postal_zone": "34710"}},
        earsiv={"send_type": "ELEKTRONIK", "internet_sale": {
            "website": "https://magaza.ege-gida.com.tr", "payment_method": "KREDIKARTI/BANKAKARTI",
            "payment_date": ISSUE_DATE, "shipment_date": ISSUE_DATE,
            "carrier": {"tax_id": "3880024350", "name": "Yurtiçi Kargo A.Ş."}}})


@dataclass(frozen=True)
class Kind:
    label: str                                   # for --kinds and the table
    build: Callable[[dict[str, Any]], None]      # turns a plain sale into this kind


#: One row per document kind (type and profile combination, and the parts it carries).
KINDS: tuple[Kind, ...] = (
    Kind("SATIS", lambda message: None),
    Kind("SATIS-discounts", _discounts),
    Kind("IADE", _return),
    Kind("TEVKIFAT", _withholding),
    Kind("TEVKIFATIADE", _withholding_return),
    Kind("ISTISNA", _exempt),
    Kind("IHRACKAYITLI-701", _export_registered("701")),
    Kind("IHRACKAYITLI-702", _export_registered("702")),
    Kind("OZELMATRAH", _special_base),
    Kind("IHRACAT", _export),
    Kind("KAMU", _public_sector),
    Kind("EARSIVFATURA-internet", _internet_sale),
)


def kind_message(kind: Kind, lines: int) -> InvoiceMessage:
    message = sale(lines)
    message["invoice_id"] = f"bench-{kind.label.lower()}"
    kind.build(message)
    return as_invoice(message)


def describe(message: InvoiceMessage) -> str:
    """What the document carries besides its lines, for the table."""
    parts = []
    if any(line.discount for line in message.lines):
        parts.append("line discounts")
    withholding = sorted({line.withholding_code for line in message.lines
                          if line.withholding_code})
    if withholding:
        parts.append("withholding " + ", ".join(withholding))
    exempt = sorted({line.vat_exemption_code for line in message.lines
                     if line.vat_exemption_code})
    if exempt:
        zero = sum(1 for line in message.lines if line.vat_exemption_code)
        parts.append(f"exemption {', '.join(exempt)} ({zero} of {len(message.lines)} lines)")
    if message.billing_reference:
        parts.append(f"{len(message.billing_reference)} returned invoices")
    if message.export is not None:
        parts.append(f"export {message.export.incoterms}, {message.currency}, GTİP per line")
    elif any(line.gtip for line in message.lines):
        parts.append("GTİP and DİİB line code per line")
    if message.payment is not None:
        parts.append("payee IBAN")
    if message.earsiv is not None and message.earsiv.internet_sale is not None:
        parts.append("internet sale, carrier, TCKN customer")
    return "; ".join(parts) or "-"


# -- measuring ------------------------------------------------------------------------------------


def issuer() -> Issuer:
    return build_issuer(tax_id="9876543210", name="Anadolu Yazılım A.Ş.", tax_office="Kadıköy",
                        street="Moda Caddesi No: 1", district="Kadıköy", city="İstanbul",
                        postal_zone="34710", email="efatura@anadolu.com.tr")


def cpu_per_call(call: Callable[[], object], seconds: float) -> float:
    """CPU seconds per call of ``call``, run in batches until ``seconds`` of CPU are used."""
    calls = 0
    started = time.process_time()
    while True:
        for _ in range(BATCH):
            call()
        calls += BATCH
        used = time.process_time() - started
        if used >= seconds:
            return used / calls


@dataclass(frozen=True)
class Measured:
    best: dict[str, float]      # ms per call, the least disturbed round
    middle: dict[str, float]    # ms per call, the median round
    xml_bytes: int
    json_bytes: int

    def cell(self, name: str) -> str:
        return f"{self.best[name]:.3f} / {self.middle[name]:.3f}"


def render(message: InvoiceMessage, the_issuer: Issuer) -> bytes:
    return render_ubl_tr(message, number=NUMBER, uuid=DOCUMENT_UUID, sealed_at=SEALED_AT, tz=TZ,
                         issuer=the_issuer)


def render_note(message: DespatchMessage, the_issuer: Issuer) -> bytes:
    return render_despatch(message, number=DESPATCH_NUMBER, uuid=DOCUMENT_UUID,
                           sealed_at=SEALED_AT, tz=TZ, issuer=the_issuer)


def measure(message: InvoiceMessage | DespatchMessage, the_issuer: Issuer, seconds: float,
            rounds: int) -> Measured:
    """JSON document, check and rendering of ``message``, interleaved ``rounds`` times."""
    variants: dict[str, Callable[[], object]] = {
        "json": lambda: canonical_json(message.payload())}
    if isinstance(message, DespatchMessage):
        variants["check"] = lambda: check_despatch_inputs(message, the_issuer)
        variants["render"] = lambda: render_note(message, the_issuer)
    else:
        # Cold, as a worker meets a new message: the check computes the totals, and the
        # rendering after it reuses them (gapless.documents.amounts caches them per message).
        variants["check"] = lambda: (forget_totals(), check_ubl_inputs(message, the_issuer))
        variants["render"] = lambda: render(message, the_issuer)
    for call in variants.values():  # warm up: imports, caches, the time-zone file
        call()
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, call in variants.items():
            runs[name].append(cpu_per_call(call, seconds) * 1000)
    document = variants["render"]()
    assert isinstance(document, bytes)
    return Measured({name: min(values) for name, values in runs.items()},
                    {name: statistics.median(values) for name, values in runs.items()},
                    len(document), len(canonical_json(message.payload())))


def by_size(messages: Mapping[int, InvoiceMessage | DespatchMessage], the_issuer: Issuer,
            args: argparse.Namespace, goal: str) -> tuple[list[list[object]], str | None]:
    """The rows of a table by number of lines, and the verdict on the 5-line document's goal
    (``goal`` names it, with ``{goal}`` for the milliseconds)."""
    rows: list[list[object]] = []
    verdict: str | None = None
    for size, message in messages.items():
        measured = measure(message, the_issuer, args.seconds, args.rounds)
        best, middle = measured.best, measured.middle
        rows.append([size, measured.cell("json"), measured.cell("check"),
                     measured.cell("render"), f"{best['render'] / best['json']:.1f}×",
                     f"{measured.xml_bytes:,} / {measured.json_bytes:,}"])
        if size == 5:
            met = "met" if best["render"] < GOAL_MS else "NOT met"
            verdict = (f"goal: {goal.format(goal=f'{GOAL_MS:g}')}: {met} "
                       f"({best['render']:.3f} ms best, {middle['render']:.3f} ms median)")
    return rows, verdict


def validate_documents(messages: dict[str, InvoiceMessage], the_issuer: Issuer) -> None:
    """GİB's XSD and schematron on each kind's document (efatura-kontrol, a dev dependency)."""
    try:
        import efatura_kontrol  # noqa: F401
    except ImportError as exc:  # pragma: no cover - needs the dev dependencies
        sys.exit(f"--validate needs efatura-kontrol (pip install -e '.[dev]'): {exc}")
    bad = {label: found for label, message in messages.items()
           if (found := gib_findings(render(message, the_issuer)))}
    if bad:
        sys.exit(f"documents GİB would refuse: {bad}")
    print(f"validated: {len(messages)} documents pass GİB's XSD and schematron "
          "(efatura-kontrol)", file=sys.stderr)


def pick_kinds(spec: str) -> list[Kind]:
    if spec == "all":
        return list(KINDS)
    if spec == "none":
        return []
    by_label = {kind.label: kind for kind in KINDS}
    wanted = [label.strip() for label in spec.split(",") if label.strip()]
    unknown = [label for label in wanted if label not in by_label]
    if unknown:
        sys.exit(f"--kinds: unknown {', '.join(unknown)} (have: {', '.join(by_label)})")
    return [by_label[label] for label in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="CPU seconds per variant, cell and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", default="5,50",
                        help="Sizes of the plain sale (comma-separated; empty: skip)")
    parser.add_argument("--kinds", default="all",
                        help="Document kinds by label, comma-separated, or all, or none")
    parser.add_argument("--kind-lines", type=int, default=5, help="Lines of each kind's message")
    parser.add_argument("--despatch-lines", default="5",
                        help="Sizes of the dispatch note (comma-separated; empty: skip)")
    parser.add_argument("--validate", action="store_true",
                        help="Check each kind's document with GİB's XSD and schematron first")
    args = parser.parse_args()
    sizes = [int(n) for n in args.lines.split(",") if n.strip()]
    kinds = pick_kinds(args.kinds)
    the_issuer = issuer()

    kind_messages = {kind.label: kind_message(kind, args.kind_lines) for kind in kinds}
    for message in kind_messages.values():  # every kind is a document GİB accepts
        check_ubl_inputs(message, the_issuer)
    notes = {size: despatch_note(size) for size in
             (int(n) for n in args.despatch_lines.split(",") if n.strip())}
    for note in notes.values():  # a dispatch note GİB accepts
        check_despatch_inputs(note, the_issuer)
    if args.validate and kind_messages:
        validate_documents(kind_messages, the_issuer)
    if args.validate:
        bad = {size: found for size, note in notes.items()
               if (found := gib_findings(render_note(note, the_issuer)))}
        if bad:
            sys.exit(f"dispatch notes GİB would refuse: {bad}")

    size_rows, size_goal = by_size(
        {size: invoice(size) for size in sizes}, the_issuer, args,
        "render_ubl_tr under {goal} ms of CPU for a 5-line invoice")
    note_rows, note_goal = by_size(
        notes, the_issuer, args,
        "render_despatch under {goal} ms of CPU for a 5-line dispatch note")

    kind_rows = []
    kind_results: dict[str, Measured] = {}
    for label, message in kind_messages.items():
        measured = kind_results[label] = measure(message, the_issuer, args.seconds, args.rounds)
        best = measured.best
        kind_rows.append([label, message.invoice_type, message.profile or "TEMELFATURA",
                          describe(message), measured.cell("json"), measured.cell("check"),
                          measured.cell("render"), f"{best['check'] + best['render']:.3f}",
                          f"{best['render'] / best['json']:.1f}×",
                          f"{measured.xml_bytes:,} / {measured.json_bytes:,}"])

    print(f"machine: {machine()}; {args.seconds:g} s of CPU per variant, cell and round; "
          f"{args.rounds} interleaved rounds")
    if size_rows:
        print_table("CPU ms per document, best / median round (lower is better)",
                    ["lines", "JSON document", "check_ubl_inputs", "render_ubl_tr",
                     "render ÷ JSON (best)", "bytes: XML / JSON"], size_rows)
        if size_goal:
            print(size_goal)
            print()
    if note_rows:
        print_table("Dispatch note (DespatchAdvice): CPU ms per document, best / median round "
                    "(lower is better)",
                    ["lines", "JSON document", "check_despatch_inputs", "render_despatch",
                     "render ÷ JSON (best)", "bytes: XML / JSON"], note_rows)
        if note_goal:
            print(note_goal)
            print()
    if kind_results:
        print_table(f"CPU ms per document by kind, {args.kind_lines} lines each, best / median "
                    "round (lower is better)",
                    ["kind", "type", "profile", "carries", "JSON document", "check_ubl_inputs",
                     "render_ubl_tr", "check + render (best)", "render ÷ JSON (best)",
                     "bytes: XML / JSON"], kind_rows)
        label = max(kind_results, key=lambda name: kind_results[name].middle["render"])
        slowest = kind_results[label]
        over = [name for name, measured in kind_results.items()
                if max(measured.best["render"], measured.middle["render"]) > GOAL_MS]
        verdict = f"NOT met ({', '.join(over)} over)" if over else "met"
        print(f"goal: render_ubl_tr at most {GOAL_MS:g} ms of CPU for {args.kind_lines} lines, "
              f"every kind (best and median round): {verdict}; slowest {label}, "
              f"{slowest.best['render']:.3f} ms best, {slowest.middle['render']:.3f} ms median")


if __name__ == "__main__":
    main()
