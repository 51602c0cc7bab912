"""The helpers on the intake's path (the claim row, the profile in force, the period key, the
printed number, the message hash) in PL/pgSQL: planned once per session instead of at every call.
Forward-only.

Created 2026-11-27; the SQL is schema/sql/0016_plpgsql_helpers.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0016", "0015"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0016_plpgsql_helpers")
