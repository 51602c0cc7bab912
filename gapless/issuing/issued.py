"""Group commit of ISSUED outcomes.

Every state change of an invoice is a commit, and with ``synchronous_commit = on`` each commit
waits for its WAL flush, so one transaction per orphan spends a flush per orphan. The writer folds
the ISSUED outcomes that arrive while a commit is in flight into the next transaction: each caller
still learns whether *its* invoice became ISSUED, only after that commit, and nothing is
acknowledged before it is durable. No timer: an outcome arriving while no commit is running is
written at once (a batch of one), so a quiet system adds no latency.

A batch that fails as a whole (a deadlock with another writer, say) is retried one invoice per
transaction, so one bad row cannot fail its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib

from gapless.integrator.base import Document, Receipt
from gapless.ledger.database import Database
from gapless.ledger.invoices import Sending, mark_issued, mark_issued_many
from gapless.logging import get_logger

log = get_logger("gapless.issuing")

MAX_BATCH = 200

#: An ISSUED outcome waiting for the next commit: (pk, receipt, document, the caller's future).
_Pending = tuple[int, Receipt, Document, "asyncio.Future[bool]"]


class IssuedWriter:
    """Records ISSUED outcomes of many concurrent tasks in as few transactions as possible."""

    def __init__(self, db: Database, *, max_batch: int = MAX_BATCH) -> None:
        self._db = db
        self._max_batch = max_batch
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None

    async def issued(self, sending: Sending, receipt: Receipt, document: Document) -> bool:
        """ISSUED with the receipt's reference and the document stored, committed; False if it
        was settled already."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((sending.pk, receipt, document, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def aclose(self) -> None:
        """Wait for the commit in flight, if any."""
        if self._flusher is not None:
            with contextlib.suppress(Exception):
                await self._flusher

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[:self._max_batch]
            del self._pending[:self._max_batch]
            try:
                updated = await mark_issued_many(
                    self._db, {pk: (receipt.ref, document)
                               for pk, receipt, document, _ in batch})
            except Exception as exc:
                if len(batch) == 1:
                    _fail(batch[0][3], exc)
                    continue
                log.warning("issued_batch_failed", size=len(batch), error=type(exc).__name__)
                await self._one_by_one(batch)
                continue
            for pk, _, _, future in batch:
                if not future.done():  # the caller may have been cancelled meanwhile
                    future.set_result(pk in updated)

    async def _one_by_one(self, batch: list[_Pending]) -> None:
        for pk, receipt, document, future in batch:
            try:
                done = await mark_issued(self._db, pk, receipt, document)
            except Exception as exc:
                _fail(future, exc)
            else:
                if not future.done():
                    future.set_result(done)


def _fail(future: asyncio.Future[bool], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)
