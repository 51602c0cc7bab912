"""GİB's verdict after acceptance: recovery's questions about ISSUED documents, and the answers.

Driver-level statements (psycopg parameters), run by :class:`gapless.ledger.database.Database` in
autocommit: each is its own short transaction, and none is open while the integrator is asked
(I5). The history event of a verdict is written by the trigger ``invoices_history_verdict``
(schema/current/gib.sql) in the statement that records it.
"""

#: Claim up to %(batch)s due questions (and as many never asked), skipping rows another process
#: holds: ISSUED documents never asked whose acceptance is at least %(first_s)s old and younger
#: than %(give_up_s)s, and those whose next question is due. Takes each row's lease in the same
#: statement (gib_next_check_at = now() + %(lease_s)s, returned as ``claimed_until``, the fence
#: of the answer's write) and commits at once: a claimer that dies is asked again after the
#: lease. Returns the due time each had before (``prev_due``, NULL: never asked) so that a claim
#: nobody asked about can be put back exactly (RELEASE_GIB_CHECK). No event (the status is
#: unchanged). Two partial indexes keep it cheap.
CLAIM_GIB_CHECKS = """
    WITH due AS (
        SELECT id, gib_next_check_at AS prev_due FROM invoices
         WHERE status = 'ISSUED' AND gib_next_check_at IS NOT NULL
           AND gib_next_check_at <= now()
         ORDER BY gib_next_check_at
         LIMIT %(batch)s
         FOR UPDATE SKIP LOCKED
    ), unasked AS (
        SELECT id, CAST(NULL AS timestamptz) AS prev_due FROM invoices
         WHERE status = 'ISSUED' AND gib_status IS NULL AND gib_next_check_at IS NULL
           AND issued_at <= now() - make_interval(secs => %(first_s)s)
           AND issued_at > now() - make_interval(secs => %(give_up_s)s)
         ORDER BY issued_at
         LIMIT %(batch)s
         FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id, prev_due FROM due UNION ALL SELECT id, prev_due FROM unasked
    ), claimed AS (
        UPDATE invoices i
           SET gib_next_check_at = now() + make_interval(secs => %(lease_s)s)
          FROM picked
         WHERE i.id = picked.id
        RETURNING i.id, i.invoice_id, i.tenant, i.series, i.number, i.uuid, i.gib_status,
                  i.gib_next_check_at AS claimed_until, picked.prev_due, i.issued_at,
                  i.payload->>'profile' AS profile, i.document, i.answer_status
    )
    SELECT c.id, c.invoice_id, c.tenant, c.series, c.number, c.uuid, c.gib_status,
           c.claimed_until, c.prev_due, extract(epoch FROM now() - c.issued_at)::float8 AS age_s,
           CASE WHEN c.document = 'despatch' THEN 'edespatch'
                WHEN s.channel = 'earsiv' OR c.profile = 'EARSIVFATURA' THEN 'earsiv'
                ELSE 'efatura' END AS channel,
           c.document, c.profile, c.answer_status
      FROM claimed c
      JOIN series s ON s.tenant = c.tenant AND s.code = c.series
"""

#: Record one answer: the state, the integrator's detail, when it was asked, the next question
#: in %(next_s)s seconds (NULL: none — a final verdict and no receiver's answer awaited, or
#: recovery gives up), and the receiver's %(answer)s with %(answer_status)s (``answered``;
#: ``unanswered`` when its window closed; NULL: unchanged — a recorded answer is never replaced).
#: Fenced by the claim (``claimed_until``), so an answer whose lease was taken over by another
#: claimer is not written twice; no row: superseded. A final verdict, giving up, an answer or its
#: absence writes its history event (triggers ``invoices_history_verdict`` and
#: ``invoices_history_verdict_answer``) in this statement. One row lock, this statement only.
RECORD_GIB_STATUS = """
    UPDATE invoices
       SET gib_status = %(state)s, gib_detail = %(detail)s, gib_checked_at = now(),
           gib_next_check_at = now() + make_interval(secs => %(next_s)s::float8),
           answer = CASE WHEN answer_status IS NULL THEN coalesce(%(answer)s::jsonb, answer)
                         ELSE answer END,
           answer_status = coalesce(answer_status, %(answer_status)s::text)
     WHERE id = %(pk)s AND status = 'ISSUED' AND gib_next_check_at = %(claimed_until)s
    RETURNING id
"""

#: Put a claimed question back exactly as it was (due at %(prev_due)s; NULL: never asked) when
#: nobody asked (the breaker refused the call, or a stop came first). Fenced like
#: RECORD_GIB_STATUS; never an event.
RELEASE_GIB_CHECK = """
    UPDATE invoices SET gib_next_check_at = %(prev_due)s::timestamptz
     WHERE id = %(pk)s AND status = 'ISSUED' AND gib_next_check_at = %(claimed_until)s
    RETURNING id
"""
