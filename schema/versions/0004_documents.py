"""Legal documents: issuer profiles, the document's UUID and the bytes sent, seal times that never
go backwards along a counter, and the worker's intake (draft upsert + claim) in one statement.

Created 2026-11-22; the SQL is schema/sql/0004_documents.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0004", "0003"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0004_documents")
