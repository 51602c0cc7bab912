"""What the database holds of the invoices of concurrent single POSTs, read together.

Every ``POST /v1/invoices`` asks the database whether its invoice exists (a duplicate is answered
without a second publish; an invoice_id of another series is a 409). Under load many POSTs ask at
once, and each question alone costs a pooled connection's checkout and a round trip. Here the
questions that arrive while one read is in flight go into the next read, one statement for all
of them (:func:`gapless.ledger.invoices.known_invoices`, the batch endpoint's read), as the
worker's group commit does for its outcomes (:mod:`gapless.issuing.issued`). No timer: a question
asked while nothing is being read is read at once (a read of one), so a quiet API adds no
latency. Each caller gets its own key's answer; a read that fails fails the questions it held
(the next question reads again).
"""

from __future__ import annotations

import asyncio

from gapless.ledger.database import Database
from gapless.ledger.invoices import KnownInvoice, known_invoices

#: At most this many keys in one read (the batch endpoint reads up to its 1,000 at once).
MAX_KEYS = 1000

_Key = tuple[str, str]
_Waiting = tuple[_Key, "asyncio.Future[KnownInvoice | None]"]


class KnownLookups:
    """Reads ``(tenant, invoice_id)`` keys for many concurrent requests in as few statements as
    they allow (one read in flight at a time)."""

    def __init__(self, db: Database, *, max_keys: int = MAX_KEYS) -> None:
        self._db = db
        self._max_keys = max_keys
        self._waiting: list[_Waiting] = []
        self._reader: asyncio.Task[None] | None = None

    async def known(self, tenant: str, invoice_id: str) -> KnownInvoice | None:
        """What the database holds of the tenant's ``invoice_id`` (None: nothing)."""
        future: asyncio.Future[KnownInvoice | None] = (
            asyncio.get_running_loop().create_future())
        self._waiting.append(((tenant, invoice_id), future))
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read())
        return await future

    async def aclose(self) -> None:
        """Wait for the read in flight, if any (its failure is its callers')."""
        if self._reader is not None:
            await asyncio.wait({self._reader})

    async def _read(self) -> None:
        while self._waiting:
            batch = self._waiting[:self._max_keys]
            del self._waiting[:self._max_keys]
            try:
                found = await known_invoices(self._db, {key for key, _ in batch})
            except asyncio.CancelledError:
                # Stopped (the API shuts down): no question is left waiting for an answer.
                for _, future in (*batch, *self._waiting):
                    future.cancel()
                self._waiting.clear()
                raise
            except Exception as exc:
                for _, future in batch:
                    if not future.done():  # a caller may have gone away meanwhile
                        future.set_exception(exc)
                continue
            for key, future in batch:
                if not future.done():
                    future.set_result(found.get(key))
