"""The claim as one SQL function (claim_invoice): lock, decide, reserve and take the lease in one
statement, so the counter row is never locked across a client round trip.

Created 2026-11-22; the SQL is schema/sql/0003_claim_invoice.up.sql (and .down.sql).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0003", "0002"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0003_claim_invoice")
