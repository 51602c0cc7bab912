"""gapless.message and gapless.documents are pure: a process that parses a message and renders its
UBL-TR document loads no database driver, broker client, HTTP client or web server.

`make lint`'s import contract (pyproject.toml, [tool.importlinter]) checks the imports gapless
writes; this checks what a real import loads, third parties' own imports included, in a fresh
interpreter (this process has loaded everything already).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

#: The I/O libraries the pure packages must not load, even indirectly.
IO_MODULES = ("sqlalchemy", "psycopg", "psycopg_pool", "aio_pika", "aiormq", "aiohttp", "httpx",
              "uvicorn", "fastapi")

SCRIPT = """
import json, sys, uuid
from datetime import UTC, datetime

import gapless.documents, gapless.message
from gapless.documents import build_issuer, check_ubl_inputs, render_ubl_tr, summarize
from gapless.message import parse_message

message = parse_message(json.dumps({
    "invoice_id": "inv-1", "tenant": "acme", "series": "ABC", "issue_date": "2025-12-31",
    "currency": "TRY",
    "customer": {"tax_id": "9876543210", "name": "Example Ltd", "tax_office": "Çankaya",
                 "address": {"district": "Çankaya", "city": "Ankara"}},
    "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
               "vat_rate": "20"}]}).encode(), "application/json")
issuer = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul")
check_ubl_inputs(message, issuer)
body = render_ubl_tr(message, number="ABC2025000000001", uuid=uuid.uuid4(),
                     sealed_at=datetime(2025, 12, 31, 9, tzinfo=UTC), tz="Europe/Istanbul",
                     issuer=issuer)
json.dump({"summary": summarize(body), "loaded": sorted(m.split(".")[0] for m in sys.modules)},
          sys.stdout, default=str)
"""


def test_message_and_documents_load_no_io_library() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["summary"]["number"] == "ABC2025000000001"  # something was really rendered
    leaked = sorted(set(result["loaded"]) & set(IO_MODULES))
    assert leaked == []
