"""Legal documents: issuer profiles, the document's UUID and the bytes sent, seal times that never
go backwards along a counter, and the worker's intake (draft upsert + claim) in one statement.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

from gapless.migrations import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), "0004_documents.up.sql")


def downgrade() -> None:
    run_sql_file(op.get_bind(), "0004_documents.down.sql")
