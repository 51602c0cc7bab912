"""The issuing lifecycle: draft, claim for sending, outcome, recovery claims, operator actions.

Every state change fires the history trigger (an ``invoice_events`` row, commit-ordered).
"""

from sqlalchemy import text

#: Create the draft for a producer key; a duplicate key inserts nothing (no lock on conflict).
INSERT_DRAFT = text("""
    INSERT INTO invoices (invoice_id, tenant, series, priority, payload)
    VALUES (:invoice_id, :tenant, :series, :priority, CAST(:payload AS jsonb))
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING id, status
""")

#: One invoice by producer key (no lock).
GET_INVOICE = text("""
    SELECT id, invoice_id, tenant, series, status, priority, period_key, reserved_no, number,
           reserved_at, payload, attempts, sending_since, next_attempt_at, last_error,
           integrator_ref, created_at, updated_at, issued_at
      FROM invoices WHERE invoice_id = :invoice_id
""")

#: Lock one invoice row for a state decision; the lease is fresh while sending_since is recent.
#: (claim_invoice does this server-side; bench/issue.py uses it for the naive design.)
LOCK_INVOICE = text("""
    SELECT id, status, reserved_no, number, attempts,
           (sending_since > now() - make_interval(secs => :lease_s)) AS lease_fresh
      FROM invoices WHERE invoice_id = :invoice_id
       FOR UPDATE
""")

#: Step 2 in one statement (claim_invoice in schema/sql/0003): lock the invoice, decide (send,
#: final, busy, parked), pin a number if it has none and take the sending lease. Locks the invoice
#: row and, for a fresh reservation, the counter row until the caller commits. No row: unknown.
CLAIM_INVOICE = text("""
    SELECT kind, status, id, invoice_id, tenant, series, number, reserved_no, payload, attempts,
           fresh
      FROM claim_invoice(:invoice_id, :lease_s, :lock_timeout_ms,
                         coalesce(CAST(:at AS timestamptz), now()))
""")

#: Take the sending lease (row already locked by LOCK_INVOICE or a recovery claim).
START_SENDING = text("""
    UPDATE invoices
       SET status = 'SENDING', sending_since = now(), attempts = attempts + 1,
           next_attempt_at = NULL
     WHERE id = :pk
    RETURNING id, invoice_id, tenant, series, number, reserved_no, payload, attempts
""")

#: Outcome: accepted. Unfenced on purpose — acceptance is the integrator's truth whoever saw it.
MARK_ISSUED = text("""
    UPDATE invoices
       SET status = 'ISSUED', integrator_ref = :ref, issued_at = now(), last_error = NULL,
           next_attempt_at = NULL, sending_since = NULL
     WHERE id = :pk AND status IN ('SENDING', 'ERROR')
    RETURNING id
""")

#: Outcome: accepted, for many invoices in one statement (group commit: one transaction, one
#: commit-lock turn, one WAL flush for all). Rows are locked in id order. Unfenced like MARK_ISSUED.
MARK_ISSUED_MANY = text("""
    WITH v AS (
        SELECT v.id, v.ref
          FROM unnest(CAST(:pks AS bigint[]), CAST(:refs AS text[])) AS v(id, ref)
    ), locked AS (
        SELECT i.id FROM invoices i JOIN v ON v.id = i.id
         WHERE i.status IN ('SENDING', 'ERROR')
         ORDER BY i.id
           FOR UPDATE OF i
    )
    UPDATE invoices i
       SET status = 'ISSUED', integrator_ref = v.ref, issued_at = now(), last_error = NULL,
           next_attempt_at = NULL, sending_since = NULL
      FROM v JOIN locked USING (id)
     WHERE i.id = v.id AND i.status IN ('SENDING', 'ERROR')
    RETURNING i.id
""")

#: Outcome: transient failure, retry at :retry_at (NULL parks it for an operator). Fenced by the
#: attempt that sent it, so a stale sender never overwrites a newer attempt's state.
MARK_ERROR = text("""
    UPDATE invoices
       SET status = 'ERROR', last_error = :error, next_attempt_at = :retry_at,
           sending_since = NULL
     WHERE id = :pk AND status = 'SENDING' AND attempts = :attempt
    RETURNING id
""")

#: Outcome: permanent rejection; the number stays pinned. Fenced like MARK_ERROR.
MARK_REJECTED = text("""
    UPDATE invoices
       SET status = 'REJECTED', last_error = :reason, next_attempt_at = NULL, sending_since = NULL
     WHERE id = :pk AND status = 'SENDING' AND attempts = :attempt
    RETURNING id
""")

#: Recovery: claim stuck SENDING invoices and ERROR invoices that are due (and below
#: :max_attempts, NULL: no limit), skipping rows another process holds, and take their lease in
#: the same statement. Two partial indexes keep it cheap. Returns the pre-claim lease and due time
#: so that a claim the caller cannot work on can be put back exactly (RELEASE_ORPHAN).
CLAIM_ORPHANS = text("""
    WITH stuck AS (
        SELECT id, sending_since AS prev_since, next_attempt_at AS prev_due FROM invoices
         WHERE status = 'SENDING' AND sending_since < now() - make_interval(secs => :stuck_after_s)
         ORDER BY sending_since
         LIMIT :batch
         FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT id, sending_since AS prev_since, next_attempt_at AS prev_due FROM invoices
         WHERE status = 'ERROR' AND next_attempt_at <= now()
           AND (CAST(:max_attempts AS integer) IS NULL OR attempts < :max_attempts)
         ORDER BY next_attempt_at
         LIMIT :batch
         FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id, 'SENDING' AS was, prev_since, prev_due FROM stuck
        UNION ALL
        SELECT id, 'ERROR' AS was, prev_since, prev_due FROM due
    )
    UPDATE invoices i
       SET status = 'SENDING', sending_since = now(), attempts = i.attempts + 1,
           next_attempt_at = NULL
      FROM picked
     WHERE i.id = picked.id
    RETURNING i.id, i.invoice_id, i.tenant, i.series, i.number, i.reserved_no, i.payload,
              i.attempts, picked.was, picked.prev_since, picked.prev_due
""")

#: Recovery: put a claimed orphan back exactly as it was before CLAIM_ORPHANS (status, attempts,
#: lease, due time), when no integrator call was made for it. Fenced by the claim's attempt.
RELEASE_ORPHAN = text("""
    UPDATE invoices
       SET status = :was, attempts = attempts - 1, sending_since = :prev_since,
           next_attempt_at = :prev_due
     WHERE id = :pk AND status = 'SENDING' AND attempts = :attempt
    RETURNING id
""")

#: Operator: cancel before a number is reserved.
CANCEL = text("""
    UPDATE invoices SET status = 'CANCELLED', last_error = :reason
     WHERE invoice_id = :invoice_id AND status = 'RECEIVED' AND reserved_no IS NULL
    RETURNING id
""")

#: Operator: void an ERROR/REJECTED invoice; its number stays accounted for.
VOID = text("""
    UPDATE invoices SET status = 'VOIDED', last_error = :reason, next_attempt_at = NULL
     WHERE invoice_id = :invoice_id AND status IN ('ERROR', 'REJECTED')
    RETURNING id
""")

#: Operator: take an ERROR/REJECTED invoice back to SENDING for a resend under the same number,
#: optionally with a corrected payload. The caller then sends it (recovery does if the caller dies).
RETRY = text("""
    UPDATE invoices
       SET status = 'SENDING', sending_since = now(), attempts = attempts + 1,
           next_attempt_at = NULL, payload = coalesce(CAST(:payload AS jsonb), payload)
     WHERE invoice_id = :invoice_id AND status IN ('ERROR', 'REJECTED')
    RETURNING id, invoice_id, tenant, series, number, reserved_no, payload, attempts
""")

#: History of one invoice, oldest first (events without sequence_id are uncommitted elsewhere).
INVOICE_EVENTS = text("""
    SELECT sequence_id, kind, from_status, to_status, number, attempts, detail, actor, created_at
      FROM invoice_events WHERE invoice_pk = :pk
     ORDER BY sequence_id
""")
