"""A feed that never makes writers wait: events are committed without a position and numbered
afterwards, in batches, by gapless_feed_assign(); counters keep their durable commits.

Created 2026-11-22; the SQL is schema/sql/0005_feed_positions.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0005", "0004"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0005_feed_positions")
