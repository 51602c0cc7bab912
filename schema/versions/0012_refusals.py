"""What the worker refused before any number: the refusals table (the newest reason per tenant
and invoice_id) and its ``refused`` feed events (invoice_events.invoice_pk and .series may be
NULL). Forward-only.

Created 2026-11-26; the SQL is schema/sql/0012_refusals.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0012", "0011"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0012_refusals")
