"""Feed hardening: event-writing commits are always flushed (visible means durable, so a crash
can never re-issue a sequence_id a poller has passed); TRUNCATE of invoice_events is refused.

Created 2026-11-22; the SQL is schema/sql/0002_feed_hardening.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0002", "0001"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0002_feed_hardening")
