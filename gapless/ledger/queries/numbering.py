"""Series, counters and the reservation."""

from sqlalchemy import text

#: Define a series. Fails on (tenant, code) or (tenant, prefix) conflicts; caller checks first.
INSERT_SERIES = text("""
    INSERT INTO series (tenant, code, prefix, reset, tz, width, format, channel, is_default)
    VALUES (:tenant, :code, :prefix, :reset, :tz, :width, :format, :channel, :is_default)
    ON CONFLICT DO NOTHING
    RETURNING tenant
""")

#: The tenant's default series of a channel stops being the default unless it is :code (row
#: locks on the series rows it changes, until the caller commits).
UNSET_DEFAULT_SERIES = text("""
    UPDATE series SET is_default = false
     WHERE tenant = :tenant AND channel = :channel AND is_default AND code <> :code
""")

#: An existing series becomes its tenant's default for its channel (after UNSET_DEFAULT_SERIES).
SET_DEFAULT_SERIES = text("""
    UPDATE series SET is_default = true
     WHERE tenant = :tenant AND code = :code AND channel = :channel
""")

#: One series by key (no lock). A driver-level statement (psycopg parameters): the issuing path
#: reads it through gapless.ledger.database.Database, operator code through ``exec_driver_sql``.
GET_SERIES = """
    SELECT tenant, code, prefix, reset, tz, width, format, channel, is_default, created_at
      FROM series WHERE tenant = %(tenant)s AND code = %(code)s
"""

#: Raise a counter to at least :last_no, never lower it (``gapless series bump``, after a database
#: lost seals the integrator holds). One statement: the counter row is locked for it (a seal
#: waiting on it then continues past :last_no); a period without a row gets one. ``before`` is
#: the value the statement's snapshot saw (NULL: no row).
BUMP_COUNTER = text("""
    WITH before AS (
        SELECT last_no FROM number_counters
         WHERE tenant = :tenant AND series = :series AND period_key = :period_key
    )
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no)
    VALUES (:tenant, :series, :period_key, :last_no)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = greatest(c.last_no, EXCLUDED.last_no)
    RETURNING (SELECT last_no FROM before) AS before, c.last_no AS after
""")

#: The series of a tenant that already uses a prefix (no lock).
GET_SERIES_BY_PREFIX = text("SELECT code FROM series WHERE tenant = :tenant AND prefix = :prefix")

#: Every series with every counter period (no lock); series without counters have NULL periods.
LIST_SERIES = text("""
    SELECT s.tenant, s.code, s.prefix, s.reset, s.tz, s.width, s.format, s.channel,
           s.is_default, c.period_key, c.last_no, c.updated_at,
           CASE WHEN c.last_no IS NOT NULL THEN
               (SELECT i.number FROM invoices i
                 WHERE i.tenant = s.tenant AND i.series = s.code
                   AND i.period_key = c.period_key AND i.reserved_no = c.last_no)
           END AS last_number
      FROM series s
      LEFT JOIN number_counters c ON c.tenant = s.tenant AND c.series = s.code
     WHERE (CAST(:tenant AS text) IS NULL OR s.tenant = :tenant)
       AND (CAST(:code AS text) IS NULL OR s.code = :code)
     ORDER BY s.tenant, s.code, c.period_key
""")

#: What the next reservation at :at would print. Reads the counter without locking or consuming.
PREVIEW_NUMBER = text("SELECT period_key, next_no, number FROM preview_number(:tenant, :code, :at)")

#: Does PostgreSQL know this time zone name?
CHECK_TIME_ZONE = text("SELECT count(*) FROM pg_timezone_names WHERE name = :tz")

#: Pin a number on the invoice (reserve_number in schema/current/numbering.sql; not the worker's
#: path, which is intake_invoice). Locks the invoice row and, for a fresh reservation, the counter
#: row, until the caller's transaction ends.
RESERVE_NUMBER = text("""
    SELECT invoice_pk, reserved_no, number, period_key, fresh
      FROM reserve_number(:invoice_id, coalesce(CAST(:at AS timestamptz), now()), :lock_timeout_ms)
""")
