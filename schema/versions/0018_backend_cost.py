"""The backend's own cost of a seal and of an ISSUED outcome: the invoice row's CHECK constraints
as one PL/pgSQL call (read once per session, not at every statement), a seal that returns one
row, reads of the columns a decision needs, and generic plans for the group commit of ISSUED
outcomes. Forward-only.

Created 2026-11-28; the SQL is schema/sql/0018_backend_cost.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0018", "0017"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0018_backend_cost")
