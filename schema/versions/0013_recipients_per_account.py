"""Recipient answers cached per integrator account: ``recipients`` keyed by (account, tax_id),
'' the global account's. Forward-only.

Created 2026-11-26; the SQL is schema/sql/0013_recipients_per_account.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0013", "0012"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0013_recipients_per_account")
