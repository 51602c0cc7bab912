"""GİB's verdict after acceptance: the invoice's gib_status, gib_detail, gib_checked_at and
gib_next_check_at, the partial indexes of due questions, and a history trigger that records each
verdict (gib_accepted, gib_refused, gib_unresolved) as an invoice event.

Created 2026-11-25; the SQL is schema/sql/0008_gib_status.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0008", "0007"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0008_gib_status")
