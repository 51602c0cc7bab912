"""The tamper-evident chain per counter (docs/chain.md): chain_records (append-only), the head on
number_counters, the seal record appended by gapless_seal, final and correction records by a
trigger, and chains built for the rows of an existing database (marked migrated).

Created 2026-11-25; the SQL is schema/sql/0009_chain.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0009", "0008"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0009_chain")
