"""Routing before the seal: a series' channel and the tenant's default series per channel, and
the recipient answers of the integrator, cached for every worker.

Created 2026-11-25; the SQL is schema/sql/0007_routing.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0007", "0006"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0007_routing")
