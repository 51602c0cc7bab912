"""The claim as one SQL function (claim_invoice): lock, decide, reserve and take the lease in one
statement, so the counter row is never locked across a client round trip.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

from gapless.migrations import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file(op.get_bind(), "0003_claim_invoice.up.sql")


def downgrade() -> None:
    run_sql_file(op.get_bind(), "0003_claim_invoice.down.sql")
