"""The receiver's answer: invoices.answer and answer_status, their history events, and the
verdict's event written once while the questions go on for an answer. Forward-only.

Created 2026-11-27; the SQL is schema/sql/0015_answers.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0015", "0014"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0015_answers")
