"""What ``gapless status`` and ``gapless demo`` read: counts per series, the system's totals.

Read-only statements: no row locks, one snapshot per statement (READ COMMITTED), so a table
printed while workers run is consistent within itself but may lag a running system by a moment.
"""

#: Per series: the newest counter period with its last number, invoices per status, GİB's
#: verdicts after acceptance (refused; pending and still asked; given up while pending), and when
#: the oldest SENDING lease began. One statement (one snapshot), no locks; the per-status counts use
#: the (tenant, series, status) index.
SERIES_STATUS = """
    WITH counts AS (
        SELECT tenant, series,
               count(*) FILTER (WHERE status = 'RECEIVED')  AS received,
               count(*) FILTER (WHERE status = 'SENDING')   AS sending,
               count(*) FILTER (WHERE status = 'ISSUED')    AS issued,
               count(*) FILTER (WHERE status = 'ERROR')     AS error,
               count(*) FILTER (WHERE status = 'REJECTED')  AS rejected,
               count(*) FILTER (WHERE status = 'CANCELLED') AS cancelled,
               count(*) FILTER (WHERE status = 'VOIDED')    AS voided,
               count(*) FILTER (WHERE status = 'ERROR' AND last_error LIKE %(alarm_pattern)s)
                                                            AS alarms,
               count(*) FILTER (WHERE gib_status = 'refused') AS gib_refused,
               count(*) FILTER (WHERE gib_status = 'pending' AND gib_next_check_at IS NOT NULL)
                                                            AS gib_pending,
               count(*) FILTER (WHERE gib_status = 'pending' AND gib_next_check_at IS NULL)
                                                            AS gib_unresolved,
               count(*) FILTER (WHERE answer->>'code' = 'RED'
                                   OR (answer->>'code' = 'KISMIKABUL' AND EXISTS (
                   SELECT FROM jsonb_array_elements(answer->'lines') AS l
                    WHERE (l->>'rejected')::numeric > 0)))
                                                            AS answers_rejected,
               count(*) FILTER (WHERE answer_status = 'unanswered') AS unanswered,
               min(sending_since) FILTER (WHERE status = 'SENDING') AS oldest_sending_since
          FROM invoices
         WHERE (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
           AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
         GROUP BY tenant, series
    )
    SELECT s.tenant, s.code AS series, latest.period_key, latest.last_no,
           (SELECT i.number FROM invoices i
             WHERE i.tenant = s.tenant AND i.series = s.code
               AND i.period_key = latest.period_key AND i.reserved_no = latest.last_no)
               AS last_number,
           coalesce(c.received, 0) AS received, coalesce(c.sending, 0) AS sending,
           coalesce(c.issued, 0) AS issued, coalesce(c.error, 0) AS error,
           coalesce(c.rejected, 0) AS rejected, coalesce(c.cancelled, 0) AS cancelled,
           coalesce(c.voided, 0) AS voided, coalesce(c.alarms, 0) AS alarms,
           coalesce(c.gib_refused, 0) AS gib_refused, coalesce(c.gib_pending, 0) AS gib_pending,
           coalesce(c.gib_unresolved, 0) AS gib_unresolved,
           coalesce(c.answers_rejected, 0) AS answers_rejected,
           coalesce(c.unanswered, 0) AS unanswered,
           extract(epoch FROM now() - c.oldest_sending_since)::float8 AS oldest_sending_age_s
      FROM series s
      LEFT JOIN counts c ON c.tenant = s.tenant AND c.series = s.code
      LEFT JOIN LATERAL (
          SELECT n.period_key, n.last_no FROM number_counters n
           WHERE n.tenant = s.tenant AND n.series = s.code
           ORDER BY n.updated_at DESC, n.period_key DESC
           LIMIT 1
      ) latest ON true
     WHERE (CAST(%(tenant)s AS text) IS NULL OR s.tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR s.code = %(series)s)
     ORDER BY s.tenant, s.code
"""

#: Documents GİB refused after the integrator accepted them (still ISSUED: their numbers stay
#: accounted for), newest verdict first, at most %(limit)s. One snapshot, no locks.
GIB_REFUSED = """
    SELECT tenant, series, number, invoice_id, gib_detail AS detail, gib_checked_at
      FROM invoices
     WHERE gib_status = 'refused'
       AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
     ORDER BY gib_checked_at DESC, id DESC
     LIMIT %(limit)s
"""

#: Documents whose receiver rejected them (RED), or rejected some quantity of a line
#: (KISMIKABUL), newest answer first, at most %(limit)s: still ISSUED, numbers accounted for; an
#: operator settles them with the customer (a return, a new document). One snapshot, no locks.
ANSWERS_REJECTED = """
    SELECT tenant, series, number, invoice_id, document, answer::text AS answer
      FROM invoices
     WHERE answer_status = 'answered'
       AND (answer->>'code' = 'RED' OR (answer->>'code' = 'KISMIKABUL' AND EXISTS (
               SELECT FROM jsonb_array_elements(answer->'lines') AS l
                WHERE (l->>'rejected')::numeric > 0)))
       AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(series)s AS text) IS NULL OR series = %(series)s)
     ORDER BY answer->>'at' DESC, id DESC
     LIMIT %(limit)s
"""

#: The whole system at a glance: invoices per status, retryable ERRORs (not alarms), and orphans
#: repaired (invoices recovery brought to ISSUED, counted from their history). One snapshot, no
#: locks; the event count scans invoice_events, so poll it every second or so, not in a loop.
TOTALS = """
    SELECT count(*) AS invoices,
           count(*) FILTER (WHERE status = 'RECEIVED') AS received,
           count(*) FILTER (WHERE status = 'SENDING')  AS sending,
           count(*) FILTER (WHERE status = 'ISSUED')   AS issued,
           count(*) FILTER (WHERE status = 'ERROR')    AS error,
           count(*) FILTER (WHERE status = 'ERROR'
                                         AND coalesce(last_error, '') NOT LIKE %(alarm_pattern)s)
                                                       AS retryable,
           count(*) FILTER (WHERE status = 'REJECTED') AS rejected,
           (SELECT count(DISTINCT e.invoice_pk) FROM invoice_events e
             WHERE e.kind = 'recovered') AS recovered
      FROM invoices
"""

#: The stored document of one ISSUED invoice of a tenant with the given media type (the first
#: issued), for the demo's closing summary. No lock.
FIRST_ISSUED_DOCUMENT = """
    SELECT i.invoice_id, d.sha256, d.body
      FROM invoices i
      JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
     WHERE i.tenant = %(tenant)s AND i.status = 'ISSUED' AND d.media_type = %(media_type)s
     ORDER BY i.issued_at, i.id
     LIMIT 1
"""

#: ISSUED invoices counted by document kind, read from the payload: its type (a message without
#: one is a %(default_type)s) and profile (without one, %(default_profile)s), for the demo's closing
#: summary. One snapshot, no lock; scans the invoices.
ISSUED_BY_KIND = """
    SELECT CASE WHEN document = 'despatch'
                THEN coalesce(payload->'despatch'->>'type',
                              CAST(%(despatch_type)s AS text))
                ELSE coalesce(payload->>'type', CAST(%(default_type)s AS text)) END AS type,
           CASE WHEN document = 'despatch'
                THEN coalesce(payload->'despatch'->>'profile',
                              CAST(%(despatch_profile)s AS text))
                ELSE coalesce(payload->>'profile', CAST(%(default_profile)s AS text)) END
               AS profile,
           count(*) AS issued
      FROM invoices
     WHERE status = 'ISSUED'
     GROUP BY 1, 2
"""

#: Per series, the ERROR invoices that are not alarms, split by who acts next: recovery (due at
#: next_attempt_at, attempts below %(max_attempts)s: CLAIM_ORPHANS will take it) or an operator
#: (parked: no retry time, or at the attempts limit). One snapshot, no locks; reads ERROR rows.
ERRORS_BY_ACTOR = """
    SELECT tenant, series,
           count(*) FILTER (WHERE next_attempt_at IS NOT NULL
                              AND attempts < %(max_attempts)s)  AS awaiting_retry,
           count(*) FILTER (WHERE next_attempt_at IS NULL
                               OR attempts >= %(max_attempts)s) AS awaiting_operator
      FROM invoices
     WHERE status = 'ERROR' AND coalesce(last_error, '') NOT LIKE %(alarm_pattern)s
     GROUP BY tenant, series
"""
