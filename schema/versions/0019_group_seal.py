"""The group seal: intake_invoices, the intake of many drafts of one series in one statement and
one commit; a draft's two steps in gapless_store_draft and gapless_claim_draft, which
intake_invoice and intake_invoices both call. Forward-only.

Created 2026-11-28; the SQL is schema/sql/0019_group_seal.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0019", "0018"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0019_group_seal")
