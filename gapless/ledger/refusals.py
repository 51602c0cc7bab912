"""What the worker refused before any number: kept so that ``GET /v1/invoices/{id}`` answers
``REFUSED`` with the reason and the feed carries a ``refused`` event (the dead-letter queue stays
the operator's view). A refusal never reads or writes a counter or an invoice; when the same
``invoice_id`` later gets an invoice, the invoice's own state is what is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gapless.ledger.database import Database
from gapless.ledger.invoices import error_text
from gapless.ledger.queries import refusals as q


@dataclass(frozen=True)
class Refusal:
    """The newest refusal of one tenant's invoice_id."""

    tenant: str
    invoice_id: str
    series: str | None
    reason: str
    refused_at: datetime


async def record_refusal(db: Database, tenant: str, invoice_id: str, series: str | None,
                         reason: str, *, actor: str = "worker") -> None:
    """Keep the refusal (the reason bounded as ``last_error`` is) and write its ``refused``
    event; one statement, committed on return."""
    await db.one(q.RECORD_REFUSAL, {"tenant": tenant, "invoice_id": invoice_id,
                                    "series": series, "reason": error_text(reason),
                                    "actor": actor})


async def get_refusal(db: Database, tenant: str, invoice_id: str) -> Refusal | None:
    """The tenant's refusal of ``invoice_id`` (None: none recorded)."""
    row = await db.one(q.GET_REFUSAL, {"tenant": tenant, "invoice_id": invoice_id})
    if row is None:
        return None
    return Refusal(row.tenant, row.invoice_id, row.series, row.reason, row.refused_at)


async def refusal_tenants(db: Database, invoice_id: str) -> list[str]:
    """The tenants holding a refusal of ``invoice_id``, sorted (no lock)."""
    return [row.tenant for row in await db.all(q.REFUSAL_TENANTS, {"invoice_id": invoice_id})]
