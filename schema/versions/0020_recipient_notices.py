"""The recipient cache announces its changes: every insert, update or delete of a row of
``recipients`` notifies channel ``gapless_recipients`` (a TRUNCATE notifies ``*``), so that a
worker's answers kept in memory are dropped when they change. Forward-only.

Created 2026-11-28; the SQL is schema/sql/0020_recipient_notices.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0020", "0019"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0020_recipient_notices")
