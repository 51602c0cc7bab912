"""Series, counters and the reservation."""

#: Define a series. Fails on (tenant, code) or (tenant, prefix) conflicts; caller checks first.
INSERT_SERIES = """
    INSERT INTO series (tenant, code, prefix, reset, tz, width, format, channel, is_default)
    VALUES (%(tenant)s, %(code)s, %(prefix)s, %(reset)s, %(tz)s, %(width)s, %(format)s,
            %(channel)s, %(is_default)s)
    ON CONFLICT DO NOTHING
    RETURNING tenant
"""

#: The tenant's default series of a channel stops being the default unless it is %(code)s (row
#: locks on the series rows it changes, until the caller commits).
UNSET_DEFAULT_SERIES = """
    UPDATE series SET is_default = false
     WHERE tenant = %(tenant)s AND channel = %(channel)s AND is_default AND code <> %(code)s
"""

#: An existing series becomes its tenant's default for its channel (after UNSET_DEFAULT_SERIES).
SET_DEFAULT_SERIES = """
    UPDATE series SET is_default = true
     WHERE tenant = %(tenant)s AND code = %(code)s AND channel = %(channel)s
"""

#: One series by key (no lock).
GET_SERIES = """
    SELECT tenant, code, prefix, reset, tz, width, format, channel, is_default, created_at
      FROM series WHERE tenant = %(tenant)s AND code = %(code)s
"""

#: Raise a counter to at least %(last_no)s, never lower it (``gapless series bump``, after a
#: database lost seals the integrator holds). One statement: the counter row is locked for it (a
#: seal waiting on it then continues past %(last_no)s); a period without a row gets one.
#: ``before`` is the value the statement's snapshot saw (NULL: no row).
BUMP_COUNTER = """
    WITH before AS (
        SELECT last_no FROM number_counters
         WHERE tenant = %(tenant)s AND series = %(series)s AND period_key = %(period_key)s
    )
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no)
    VALUES (%(tenant)s, %(series)s, %(period_key)s, %(last_no)s)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = greatest(c.last_no, EXCLUDED.last_no)
    RETURNING (SELECT last_no FROM before) AS before, c.last_no AS after
"""

#: The series of a tenant that already uses a prefix (no lock).
GET_SERIES_BY_PREFIX = "SELECT code FROM series WHERE tenant = %(tenant)s AND prefix = %(prefix)s"

#: Every series with every counter period (no lock); series without counters have NULL periods.
LIST_SERIES = """
    SELECT s.tenant, s.code, s.prefix, s.reset, s.tz, s.width, s.format, s.channel,
           s.is_default, c.period_key, c.last_no, c.updated_at,
           CASE WHEN c.last_no IS NOT NULL THEN
               (SELECT i.number FROM invoices i
                 WHERE i.tenant = s.tenant AND i.series = s.code
                   AND i.period_key = c.period_key AND i.reserved_no = c.last_no)
           END AS last_number
      FROM series s
      LEFT JOIN number_counters c ON c.tenant = s.tenant AND c.series = s.code
     WHERE (CAST(%(tenant)s AS text) IS NULL OR s.tenant = %(tenant)s)
       AND (CAST(%(code)s AS text) IS NULL OR s.code = %(code)s)
     ORDER BY s.tenant, s.code, c.period_key
"""

#: What the next reservation at %(at)s would print. Reads the counter without locking or consuming.
PREVIEW_NUMBER = """
    SELECT period_key, next_no, number FROM preview_number(%(tenant)s, %(code)s, %(at)s)
"""

#: Does PostgreSQL know this time zone name?
CHECK_TIME_ZONE = "SELECT count(*) FROM pg_timezone_names WHERE name = %(tz)s"

#: Pin a number on the invoice of (tenant, invoice_id) (reserve_tenant_number in
#: schema/current/numbering.sql; not the worker's path, which is intake_invoice). Locks the invoice
#: row and, for a fresh reservation, the counter row, until the caller's transaction ends.
RESERVE_NUMBER = """
    SELECT invoice_pk, reserved_no, number, period_key, fresh
      FROM reserve_tenant_number(%(tenant)s, %(invoice_id)s,
                                 coalesce(CAST(%(at)s AS timestamptz), now()),
                                 %(lock_timeout_ms)s)
"""
