"""The group seal takes drafts of several series: intake_drafts (one statement and one commit
for a tenant's drafts whatever their series; counters locked in key order); intake_invoices
becomes intake_drafts with one series for all. Forward-only.

Created 2026-11-28; the SQL is schema/sql/0022_group_seal_of_series.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0022", "0021"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0022_group_seal_of_series")
