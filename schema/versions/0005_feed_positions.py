"""A feed that never makes writers wait: events are committed without a position and numbered
afterwards, in batches, by gapless_feed_assign(); counters keep their durable commits.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

from gapless.migrations import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), "0005_feed_positions.up.sql")


def downgrade() -> None:
    run_sql_file(op.get_bind(), "0005_feed_positions.down.sql")
