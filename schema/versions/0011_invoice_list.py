"""The index of ``gapless invoice list``: invoices_created_idx on invoices (created_at, id), so
that the newest documents are read in order, never sorted. Forward-only.

Created 2026-11-26; the SQL is schema/sql/0011_invoice_list.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0011", "0010"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0011_invoice_list")
