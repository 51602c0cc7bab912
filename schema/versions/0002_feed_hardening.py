"""Feed hardening: event-writing commits are always flushed (visible means durable, so a crash
can never re-issue a sequence_id a poller has passed); TRUNCATE of invoice_events is refused.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

from gapless.migrations import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), "0002_feed_hardening.up.sql")


def downgrade() -> None:
    run_sql_file(op.get_bind(), "0002_feed_hardening.down.sql")
