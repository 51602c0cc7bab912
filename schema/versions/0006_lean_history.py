"""The same history for less: ids by plain nextval from sequences rebased on the cluster id,
an update's event written BEFORE UPDATE, the append-only guard asked only in a WHEN clause.

Created 2026-11-23; the SQL is schema/sql/0006_lean_history.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0006", "0005"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0006_lean_history")
