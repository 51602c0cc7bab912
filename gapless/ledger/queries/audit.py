"""The audit: set-based checks of I1–I3 over counters and invoices, and of I7 against a ledger.

Every statement reads only (no locks beyond MVCC snapshots) and takes the optional filters
``%(tenant)s`` and ``%(series)s`` (NULL: all). Run them in one snapshot
(``Database.snapshot()``: REPEATABLE READ, READ ONLY) so that they all see the same state. They
scale with the number of invoices, never with the size of a gap: holes are found as ranges
between neighbouring numbers (window functions over the unique index order), not by generating
every number.
"""


def _with_counters_in_scope(rest: str) -> str:
    """The statement ``rest`` after CTE ``c``: the counters in scope (``%(tenant)s`` /
    ``%(series)s``, NULL for all). Both parts are constants of this module, never built from
    input; the values stay bound parameters."""
    return """
    WITH c AS (
        SELECT tenant, series, period_key, last_no FROM number_counters
         WHERE (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
           AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
    ),""" + rest  # noqa: S608 - constant text only

#: Per counter (tenant, series, period): last_no next to what the invoices hold, by status.
#: A FULL JOIN so that invoice numbers of a period without a counter row show up too.
COUNTER_SUMMARY = _with_counters_in_scope("""
    n AS (
        SELECT tenant, series, period_key,
               count(*) AS numbered,
               max(reserved_no) AS max_no,
               count(*) FILTER (WHERE status = 'ISSUED') AS issued,
               count(*) FILTER (WHERE status = 'SENDING') AS sending,
               count(*) FILTER (WHERE status = 'ERROR') AS error,
               count(*) FILTER (WHERE status = 'REJECTED') AS rejected,
               count(*) FILTER (WHERE status = 'VOIDED') AS voided,
               count(*) FILTER (WHERE status NOT IN ('ISSUED', 'SENDING', 'ERROR', 'REJECTED',
                                                     'VOIDED')) AS other
          FROM invoices
         WHERE reserved_no IS NOT NULL
           AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
           AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
         GROUP BY tenant, series, period_key
    )
    SELECT tenant, series, period_key, c.last_no,
           coalesce(n.numbered, 0) AS numbered,
           n.max_no,
           coalesce(n.issued, 0) AS issued, coalesce(n.sending, 0) AS sending,
           coalesce(n.error, 0) AS error, coalesce(n.rejected, 0) AS rejected,
           coalesce(n.voided, 0) AS voided, coalesce(n.other, 0) AS other
      FROM c FULL JOIN n USING (tenant, series, period_key)
     ORDER BY tenant, series, period_key
""")

#: I1 + I2 in one walk over the unique index order of (tenant, series, period_key, reserved_no):
#: each pinned value is compared with the one before it (lag), so the cost is one ordered scan
#: of the numbers, whatever the size of a hole. Kinds:
#:   gap              — first_no..last_no reserved by the counter but on no invoice, below a
#:                      pinned value that is within the counter;
#:   counter_ahead    — the tail between the highest pinned value within the counter and last_no
#:                      (the counter advanced without pinning); one index probe per counter;
#:   duplicate_number — a value pinned on several invoices (``holders``, ``invoice_ids``).
NUMBER_WALK = _with_counters_in_scope("""
    walk AS (
        SELECT tenant, series, period_key, reserved_no,
               lag(reserved_no, 1, CAST(0 AS bigint)) OVER (
                   PARTITION BY tenant, series, period_key ORDER BY reserved_no) AS prev_no
          FROM invoices
         WHERE reserved_no IS NOT NULL
           AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
           AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
    ), odd AS MATERIALIZED (
        SELECT tenant, series, period_key, reserved_no, prev_no
          FROM walk WHERE reserved_no <> prev_no + 1
    )
    SELECT 'gap' AS kind, o.tenant, o.series, o.period_key, o.prev_no + 1 AS first_no,
           o.reserved_no - 1 AS last_no, CAST(NULL AS text) AS number,
           CAST(NULL AS bigint) AS holders, CAST(NULL AS text[]) AS invoice_ids
      FROM odd o JOIN c USING (tenant, series, period_key)
     WHERE o.reserved_no > o.prev_no + 1 AND o.reserved_no <= c.last_no
    UNION ALL
    SELECT 'counter_ahead', c.tenant, c.series, c.period_key, coalesce(t.top_no, 0) + 1,
           c.last_no, NULL, NULL, NULL
      FROM c CROSS JOIN LATERAL (
          SELECT max(i.reserved_no) AS top_no FROM invoices i
           WHERE i.tenant = c.tenant AND i.series = c.series AND i.period_key = c.period_key
             AND i.reserved_no <= c.last_no) t
     WHERE coalesce(t.top_no, 0) < c.last_no
    UNION ALL
    SELECT 'duplicate_number', d.tenant, d.series, d.period_key, d.reserved_no, d.reserved_no,
           h.number, h.holders, h.invoice_ids
      FROM (SELECT DISTINCT tenant, series, period_key, reserved_no FROM odd
             WHERE reserved_no = prev_no) d
      CROSS JOIN LATERAL (
          SELECT min(i.number) AS number, count(*) AS holders,
                 array_agg(i.invoice_id ORDER BY i.invoice_id) AS invoice_ids
            FROM invoices i
           WHERE i.tenant = d.tenant AND i.series = d.series AND i.period_key = d.period_key
             AND i.reserved_no = d.reserved_no) h
     ORDER BY tenant, series, period_key, first_no
""")

#: I2: invoices holding a counter value their counter never handed out (above last_no, or in a
#: period that has no counter row).
BEYOND_COUNTER = """
    SELECT i.tenant, i.series, i.period_key, i.reserved_no, i.number, i.invoice_id, i.status,
           c.last_no
      FROM invoices i
      LEFT JOIN number_counters c USING (tenant, series, period_key)
     WHERE i.reserved_no IS NOT NULL
       AND (c.last_no IS NULL OR i.reserved_no > c.last_no)
       AND (CAST(%(tenant)s AS text) IS NULL OR i.tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR i.series = %(series)s)
     ORDER BY i.tenant, i.series, i.period_key, i.reserved_no
"""

#: I1: a printed number held by more than one invoice of a tenant (across its series, for ever).
#: One walk over the (tenant, number) index order, neighbours compared; holders looked up only
#: for the duplicates found.
DUPLICATE_PRINTED = """
    WITH walk AS (
        SELECT tenant, number, lag(number) OVER (PARTITION BY tenant ORDER BY number) AS prev
          FROM invoices
         WHERE number IS NOT NULL
           AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
    )
    SELECT d.tenant, d.number, h.holders, h.invoice_ids, h.series
      FROM (SELECT DISTINCT tenant, number FROM walk WHERE number = prev) d
      CROSS JOIN LATERAL (
          SELECT count(*) AS holders, array_agg(i.invoice_id ORDER BY i.invoice_id) AS invoice_ids,
                 array_agg(DISTINCT i.series) AS series,
                 bool_or(i.series = %(series)s) AS in_series
            FROM invoices i WHERE i.tenant = d.tenant AND i.number = d.number) h
     WHERE CAST(%(series)s AS text) IS NULL OR h.in_series
     ORDER BY d.tenant, d.number
"""

#: I3/I2 (``--deep``): the printed number and the period must be what the series renders for
#: the pinned counter value at the reservation time (a number edited by hand no longer matches
#: its counter). Renders every number: the one check whose cost is per row of string work.
NUMBER_MISMATCH = """
    SELECT i.tenant, i.series, i.period_key, i.reserved_no, i.number, i.invoice_id,
           gapless_render(s.format, s.prefix, s.width, i.reserved_at AT TIME ZONE s.tz,
                          i.reserved_no) AS expected
      FROM invoices i
      JOIN series s ON s.tenant = i.tenant AND s.code = i.series
     WHERE i.reserved_no IS NOT NULL AND i.reserved_at IS NOT NULL
       AND (i.number <> gapless_render(s.format, s.prefix, s.width,
                                       i.reserved_at AT TIME ZONE s.tz, i.reserved_no)
            OR i.period_key <> gapless_period_key(s.reset, i.reserved_at AT TIME ZONE s.tz))
       AND (CAST(%(tenant)s AS text) IS NULL OR i.tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR i.series = %(series)s)
     ORDER BY i.tenant, i.series, i.period_key, i.reserved_no
"""

#: "Where did 1454 go?": every pinned number that is not ISSUED, with its state and reason.
#: ``stuck``: still SENDING (or pinned but never sent) longer than %(horizon_s)s — an I4 violation.
NOT_ISSUED = """
    SELECT tenant, series, period_key, reserved_no, number, invoice_id, status, attempts,
           last_error, next_attempt_at,
           extract(epoch FROM now() - coalesce(sending_since, reserved_at)) AS age_s,
           (status IN ('SENDING', 'RECEIVED')
            AND coalesce(sending_since, reserved_at)
                < now() - make_interval(secs => %(horizon_s)s)) AS stuck
      FROM invoices
     WHERE reserved_no IS NOT NULL AND status <> 'ISSUED'
       AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
     ORDER BY tenant, series, period_key, reserved_no
"""

#: Findings that are not violations: documents GİB refused after the integrator accepted them
#: (``gib_refused``; they stay ISSUED and their numbers accounted for) and documents recovery
#: stopped asking about while GİB's verdict was still pending (``gib_unresolved``).
GIB_FINDINGS = """
    SELECT CASE gib_status WHEN 'refused' THEN 'gib_refused' ELSE 'gib_unresolved' END AS kind,
           tenant, series, period_key, reserved_no, number, invoice_id, gib_detail,
           gib_checked_at
      FROM invoices
     WHERE status = 'ISSUED'
       AND (gib_status = 'refused' OR (gib_status = 'pending' AND gib_next_check_at IS NULL))
       AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
     ORDER BY kind, tenant, series, period_key, reserved_no
"""

#: Every pinned number with its holder (to ask the integrator about each one when it has no
#: ledger endpoint).
NUMBERED_INVOICES = """
    SELECT tenant, series, number, invoice_id, status, uuid
      FROM invoices
     WHERE number IS NOT NULL
       AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
     ORDER BY tenant, series, number
"""

#: The database's clock, read just before the integrator's side is read.
DB_NOW = "SELECT now()"

#: I7: the integrator's accepted documents (%(ledger)s, a JSON array of {tenant, number,
#: invoice_id}, read at %(read_at)s) against the ISSUED invoices. Invoices ISSUED after
#: %(read_at)s are not judged. ``in_flight``: the invoice is still SENDING within %(horizon_s)s
#: (the dual-write window recovery closes), so the caller reports it without calling it a
#: violation. Kinds:
#:   issued_unknown_to_integrator — ISSUED here, not accepted there;
#:   integrator_not_issued        — accepted there for the same invoice, not ISSUED here;
#:   invoice_id_mismatch          — accepted there for a different invoice than holds it here;
#:   integrator_unknown_number    — accepted there, no invoice here holds the number (reported
#:                                  only without a series filter: it belongs to no known series);
#:   integrator_duplicate         — the integrator accepted one number twice.
LEDGER_MISMATCH = """
    WITH ledger AS (
        SELECT l.tenant, l.number, l.invoice_id
          FROM jsonb_to_recordset(CAST(%(ledger)s AS jsonb))
               AS l(tenant text, number text, invoice_id text)
         WHERE CAST(%(tenant)s AS text) IS NULL OR l.tenant = %(tenant)s
    ), db AS (
        SELECT tenant, series, number, invoice_id, status, issued_at,
               (status = 'SENDING'
                AND sending_since >= now() - make_interval(secs => %(horizon_s)s)) AS in_flight
          FROM invoices
         WHERE number IS NOT NULL
           AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
    )
    SELECT 'issued_unknown_to_integrator' AS kind, d.tenant, d.series, d.number,
           d.invoice_id AS db_invoice_id, CAST(NULL AS text) AS integrator_invoice_id, d.status,
           false AS in_flight
      FROM db d
     WHERE d.status = 'ISSUED' AND (d.issued_at IS NULL OR d.issued_at <= %(read_at)s)
       AND (CAST(%(series)s AS text) IS NULL OR d.series = %(series)s)
       AND NOT EXISTS (SELECT 1 FROM ledger l
                        WHERE l.tenant = d.tenant AND l.number = d.number)
    UNION ALL
    SELECT CASE WHEN d.number IS NULL THEN 'integrator_unknown_number'
                WHEN d.invoice_id <> l.invoice_id THEN 'invoice_id_mismatch'
                ELSE 'integrator_not_issued' END AS kind,
           l.tenant, d.series, l.number, d.invoice_id AS db_invoice_id,
           l.invoice_id AS integrator_invoice_id, d.status,
           coalesce(d.in_flight AND d.invoice_id = l.invoice_id, false) AS in_flight
      FROM ledger l
      LEFT JOIN db d ON d.tenant = l.tenant AND d.number = l.number
     WHERE (d.number IS NULL AND CAST(%(series)s AS text) IS NULL)
        OR (d.number IS NOT NULL
            AND (d.invoice_id <> l.invoice_id OR d.status <> 'ISSUED')
            AND (CAST(%(series)s AS text) IS NULL OR d.series = %(series)s))
    UNION ALL
    SELECT 'integrator_duplicate' AS kind, x.tenant, d.series, x.number,
           d.invoice_id AS db_invoice_id, x.invoice_ids AS integrator_invoice_id, d.status,
           false AS in_flight
      FROM (SELECT tenant, number, string_agg(invoice_id, ', ' ORDER BY invoice_id) AS invoice_ids
              FROM ledger GROUP BY tenant, number HAVING count(*) > 1) x
      LEFT JOIN LATERAL (SELECT series, invoice_id, status FROM db
                          WHERE db.tenant = x.tenant AND db.number = x.number
                          ORDER BY invoice_id LIMIT 1) d ON true
     WHERE CAST(%(series)s AS text) IS NULL OR d.series = %(series)s
     ORDER BY kind, tenant, number
"""

#: Where the numbers the integrator holds and this database does not (lost seals, after a
#: failover to a standby that lacked them or a restore) belong: the tenants' series (to read a
#: printed number back to its counter), their counters, and the invoices the integrator holds them
#: for (%(ids)s), wherever those are here. Read in the same snapshot as LEDGER_MISMATCH.
SERIES_OF_TENANTS = """
    SELECT tenant, code, prefix, reset, tz, width, format, channel, is_default
      FROM series WHERE tenant = ANY(%(tenants)s) ORDER BY tenant, code
"""
COUNTERS_OF_TENANTS = """
    SELECT tenant, series, period_key, last_no FROM number_counters WHERE tenant = ANY(%(tenants)s)
"""
INVOICES_BY_ID = """
    SELECT invoice_id, tenant, series, number, status FROM invoices WHERE invoice_id = ANY(%(ids)s)
"""

#: I7 coverage: how many accepted documents of the ledger fall in the audited scope.
LEDGER_IN_SCOPE = """
    SELECT count(*) AS documents
      FROM jsonb_to_recordset(CAST(%(ledger)s AS jsonb)) AS l(tenant text, number text)
      LEFT JOIN invoices i ON i.tenant = l.tenant AND i.number = l.number
     WHERE (CAST(%(tenant)s AS text) IS NULL OR l.tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR i.series = %(series)s)
"""
