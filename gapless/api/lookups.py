"""What the database holds of the invoices of concurrent single POSTs, read together.

Every ``POST /v1/invoices`` asks the database whether its invoice exists (a duplicate is answered
without a second publish; an invoice_id of another series is a 409). Under load many POSTs ask at
once, and each question alone costs a pooled connection's checkout and a round trip. Here the
questions that arrive while one read is in flight go into the next read, one statement for all
of them (:func:`gapless.ledger.invoices.known_invoices`, the batch endpoint's read), as the
worker's group commit does for its outcomes (:mod:`gapless.issuing.issued`; both are
:class:`gapless.ledger.grouped.Grouped`). No timer: a question asked while nothing is being read
is read at once (a read of one), so a quiet API adds no latency. Each caller gets its own key's
answer; a read that fails fails the questions it held (the next question reads again).
"""

from __future__ import annotations

from gapless.ledger.database import Database
from gapless.ledger.grouped import Grouped
from gapless.ledger.invoices import KnownInvoice, known_invoices

#: At most this many keys in one read (the batch endpoint reads up to its 1,000 at once).
MAX_KEYS = 1000

_Key = tuple[str, str]


class KnownLookups:
    """Reads ``(tenant, invoice_id)`` keys for many concurrent requests in as few statements as
    they allow (one read in flight at a time)."""

    def __init__(self, db: Database, *, max_keys: int = MAX_KEYS) -> None:
        self._db = db
        self._grouped: Grouped[_Key, KnownInvoice | None] = Grouped(
            self._read, max_batch=max_keys)

    async def known(self, tenant: str, invoice_id: str) -> KnownInvoice | None:
        """What the database holds of the tenant's ``invoice_id`` (None: nothing)."""
        return await self._grouped((tenant, invoice_id))

    async def aclose(self) -> None:
        """Wait for the read in flight, if any (its failure is its callers')."""
        await self._grouped.aclose()

    async def _read(self, keys: list[_Key]) -> list[KnownInvoice | None]:
        found = await known_invoices(self._db, set(keys))
        return [found.get(key) for key in keys]
