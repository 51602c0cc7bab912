"""Stored documents (``invoice_documents.body``) compressed with lz4 instead of pglz, where the
server has lz4 (about 80 µs of PostgreSQL's CPU less per UBL-TR document). Forward-only.

Created 2026-11-28; the SQL is schema/sql/0021_document_compression.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0021", "0020"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0021_document_compression")
