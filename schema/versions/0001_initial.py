"""Initial schema: cluster ids, series, counters, invoices, commit-ordered events.

Created 2026-11-22; the SQL is schema/sql/0001_initial.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0001", None
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0001_initial")
