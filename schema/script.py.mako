"""${message}

Created ${create_date}; the SQL is schema/sql/<this file's name>.up.sql (forward-only: no down
file), and the same change is in schema/current/ (schema/README.md).
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = ${repr(up_revision)}, ${repr(down_revision)}
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("${up_revision}_<name>")  # the SQL files' common stem
