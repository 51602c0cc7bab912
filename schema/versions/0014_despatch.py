"""Dispatch notes: series of channel edespatch, invoices.document (invoice or despatch, from the
payload), and the integrator's e-İrsaliye answer in the recipient cache. Forward-only.

Created 2026-11-27; the SQL is schema/sql/0014_despatch.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0014", "0013"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0014_despatch")
