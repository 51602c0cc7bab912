"""Initial schema: cluster ids, series, counters, invoices, commit-ordered events.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

from gapless.migrations import run_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), "0001_initial.up.sql")


def downgrade() -> None:
    run_sql_file(op.get_bind(), "0001_initial.down.sql")
