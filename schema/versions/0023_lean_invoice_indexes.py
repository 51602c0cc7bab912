"""One index fewer on invoices: invoices_tenant_series_status_idx, which no query needs since
recovery's partial indexes, dropped (an entry less at every insert and status change).
Forward-only.

Created 2026-11-29; the SQL is schema/sql/0023_lean_invoice_indexes.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0023", "0022"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0023_lean_invoice_indexes")
