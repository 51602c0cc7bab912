"""Group commit of ISSUED outcomes.

Every state change of an invoice is a commit, and with ``synchronous_commit = on`` each commit
waits for its WAL flush, so one transaction per invoice spends a flush per invoice. The writer
folds the ISSUED outcomes that arrive while a commit is in flight into the next transaction
(:class:`gapless.ledger.grouped.Grouped`): each caller still learns whether *its* invoice became
ISSUED, only after that commit, and nothing is acknowledged before it is durable. An outcome
arriving while no commit is running is written at once (a batch of one) — unless the writer
lingers (``linger_s``, the worker's ``GAPLESS_GROUP_LINGER_MS``): then a commit about to start
with fewer than ``enough`` outcomes waits that long at most for company.

A batch that fails as a whole (a deadlock with another writer, say) is retried one invoice per
transaction, so one bad row cannot fail its neighbours.
"""

from __future__ import annotations

from gapless.integrator.base import Document, Receipt
from gapless.ledger.database import Database
from gapless.ledger.grouped import Grouped
from gapless.ledger.invoices import Sending, mark_issued, mark_issued_many

MAX_BATCH = 200

#: An ISSUED outcome waiting for the next commit: (pk, receipt, document).
_Outcome = tuple[int, Receipt, Document]


class IssuedWriter:
    """Records ISSUED outcomes of many concurrent tasks in as few transactions as possible."""

    def __init__(self, db: Database, *, max_batch: int = MAX_BATCH, linger_s: float = 0.0,
                 enough: int = 1) -> None:
        self._db = db
        self._grouped: Grouped[_Outcome, bool] = Grouped(
            self._write_many, one=self._write_one, max_batch=max_batch,
            event="issued_batch_failed", linger_s=linger_s, enough=enough)

    async def issued(self, sending: Sending, receipt: Receipt, document: Document) -> bool:
        """ISSUED with the receipt's reference and the document stored, committed; False if it
        was settled already."""
        return await self._grouped((sending.pk, receipt, document))

    async def aclose(self) -> None:
        """Wait for the commit in flight, if any."""
        await self._grouped.aclose()

    async def _write_many(self, outcomes: list[_Outcome]) -> list[bool]:
        updated = await mark_issued_many(
            self._db, {pk: (receipt.ref, document) for pk, receipt, document in outcomes})
        return [pk in updated for pk, _, _ in outcomes]

    async def _write_one(self, outcome: _Outcome) -> bool:
        pk, receipt, document = outcome
        return await mark_issued(self._db, pk, receipt, document)
