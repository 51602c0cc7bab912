"""The ISSUED outcomes of a group commit in one call (``gapless_mark_issued_many``): the locks,
the documents and the update in one statement instead of a transaction of four round trips.
Forward-only.

Created 2026-11-27; the SQL is schema/sql/0017_settle_in_one_call.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0017", "0016"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0017_settle_in_one_call")
