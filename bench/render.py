"""Benchmark: CPU time to render a UBL-TR invoice vs serialising the message as JSON.

    .venv/bin/python bench/render.py [--seconds 1] [--rounds 5] [--lines 5,50]

All in one process, no I/O: CPU time (``time.process_time``) per document, for invoices of
``--lines`` lines (mixed KDV rates, decimal quantities and prices, Turkish text, a company
customer with its address):

* JSON body        — ``canonical_json(message.payload())``: the document of a tenant without an
                     issuer profile (the baseline);
* check_ubl_inputs — the gate a worker runs before reserving a number;
* render_ubl_tr    — the whole document (the check included), as bytes.

Each variant runs in batches until it has used ``--seconds`` of CPU; the variants take turns,
``--rounds`` times, so that outside load hits all of them alike. The table shows the best round
(the least disturbed) and the median round. Goal: under 1 ms of CPU for a 5-line invoice.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, print_table
from gapless.documents import (
    Issuer,
    build_issuer,
    check_ubl_inputs,
    render_ubl_tr,
)
from gapless.message import InvoiceMessage, validate_message
from gapless.render import canonical_json

GOAL_MS = 1.0
BATCH = 20
RATES = ("20", "10", "1", "20", "10")


def invoice(lines: int) -> InvoiceMessage:
    """A realistic message of ``lines`` lines."""
    items = []
    for index in range(lines):
        rate = RATES[index % len(RATES)]
        items.append({"description": f"Ürün {index + 1}: çay, şeker ve ığdır kayısısı",
                      "quantity": f"{1 + index % 7}.{index % 1000:03d}",
                      "unit_price": f"{12 + index * 3}.{(index * 37) % 100:02d}5",
                      "vat_rate": rate, "unit_code": ("C62", "KGM", "LTR")[index % 3]})
    return validate_message({
        "invoice_id": f"bench-{lines}", "tenant": "bench", "series": "ABC",
        "issue_date": "2026-11-22", "currency": "TRY", "profile": "TICARIFATURA",
        "note": "Ödeme vadesi 30 gündür.",
        "customer": {"tax_id": "1234567890", "name": "Ege Gıda Sanayi ve Ticaret Ltd. Şti.",
                     "tax_office": "Bornova",
                     "address": {"street": "Kazım Dirik Mah. 372 Sk. No: 4", "district": "Bornova",
                                 "city": "İzmir", "postal_zone": "35040"}},
        "lines": items})


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="CPU seconds per variant, cell and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", default="5,50")
    args = parser.parse_args()
    sizes = [int(n) for n in args.lines.split(",")]
    the_issuer = issuer()
    sealed_at = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
    document_uuid = UUID("3f2a8c1e-5b7d-4e9a-8c6f-1d2e3f4a5b6c")

    rows = []
    for size in sizes:
        message = invoice(size)

        def render(message: InvoiceMessage = message) -> bytes:
            return render_ubl_tr(message, number="ABC2026000000001", uuid=document_uuid,
                                 sealed_at=sealed_at, tz="Europe/Istanbul", issuer=the_issuer)

        def check(message: InvoiceMessage = message) -> None:
            check_ubl_inputs(message, the_issuer)

        def json_body(message: InvoiceMessage = message) -> bytes:
            return canonical_json(message.payload())

        variants: dict[str, Callable[[], object]] = {
            "json": json_body, "check": check, "render": render}
        for call in variants.values():  # warm up: imports, caches, the time-zone file
            call()
        runs: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, call in variants.items():
                runs[name].append(cpu_per_call(call, args.seconds) * 1000)
        best = {name: min(values) for name, values in runs.items()}
        middle = {name: statistics.median(values) for name, values in runs.items()}
        rows.append([size, f"{best['json']:.3f} / {middle['json']:.3f}",
                     f"{best['check']:.3f} / {middle['check']:.3f}",
                     f"{best['render']:.3f} / {middle['render']:.3f}",
                     f"{best['render'] / best['json']:.1f}×",
                     f"{len(render()):,} / {len(json_body()):,}"])
        if size == 5:
            verdict = "met" if best["render"] < GOAL_MS else "NOT met"
            goal = (f"goal: render_ubl_tr under {GOAL_MS:g} ms of CPU for a 5-line invoice: "
                    f"{verdict} ({best['render']:.3f} ms best, {middle['render']:.3f} ms "
                    "median)")

    print(f"machine: {machine()}; {args.seconds:g} s of CPU per variant, cell and round; "
          f"{args.rounds} interleaved rounds")
    print_table("CPU ms per document, best / median round (lower is better)",
                ["lines", "JSON document", "check_ubl_inputs", "render_ubl_tr",
                 "render ÷ JSON (best)", "bytes: XML / JSON"], rows)
    if 5 in sizes:
        print(goal)


if __name__ == "__main__":
    main()
