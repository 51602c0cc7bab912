"""The issuing lifecycle: intake, claim, outcome, recovery claims, operator actions.

Every state change fires the history trigger (an ``invoice_events`` row). The statements of the
issuing path run on their own, one statement per transaction in autocommit mode, by
:class:`gapless.ledger.database.Database`; the reads of one invoice that the API and the CLI show
together (``GET_INVOICE``, ``INVOICE_EVENTS``, ``STORED_DOCUMENT``) run in one snapshot
(``Database.snapshot()``).

Recording an outcome also stores the document that was sent, the first time (``_DOCUMENT``):
an ``invoice_documents`` row, and ``invoices.document_sha256`` naming it — in the same statement,
so the bytes sent and the state they led to commit together.
"""

#: Store the draft for a producer key, (tenant, invoice_id), without claiming it; a duplicate key
#: changes nothing (no lock on conflict). Returns the row's id, status and whether it was created.
UPSERT_DRAFT = """
    WITH new AS (
        INSERT INTO invoices (invoice_id, tenant, series, priority, payload)
        VALUES (%(invoice_id)s, %(tenant)s, %(series)s, %(priority)s::smallint,
                %(payload)s::jsonb)
        ON CONFLICT (invoice_id, tenant) DO NOTHING
        RETURNING id, status
    )
    SELECT id, status, true AS created FROM new
    UNION ALL
    SELECT id, status, false FROM invoices
     WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s AND NOT EXISTS (SELECT FROM new)
"""

#: Columns of a claim (the composite type ``gapless_claim`` of schema/current/intake.sql).
_CLAIM_COLUMNS = """kind, created, id, invoice_id, tenant, series, status, number, reserved_no,
           attempts, uuid, reserved_at, profile_version, payload::text AS payload,
           document_sha256,
           document_media_type, document_format, document"""

#: Steps 1 and 2 in one statement (``intake_invoice``): store the draft for the producer key
#: (tenant, invoice_id), lock it, and decide (sealed, send, final, busy, parked, stale,
#: conflict). Locks the invoice row and, for a fresh seal, the counter row, until the statement
#: commits. The payload comes back only for a row that existed before.
INTAKE = f"""
    SELECT {_CLAIM_COLUMNS}
      FROM intake_invoice(%(invoice_id)s, %(tenant)s, %(series)s, %(priority)s::smallint,
                          %(payload)s::jsonb, %(lease_s)s, %(lock_timeout_ms)s,
                          %(profile_version)s::integer, %(at)s::timestamptz)
"""  # noqa: S608 - constant column list, values are bound

#: Steps 1 and 2 for many drafts of a tenant, of any of its series, in one statement and one
#: commit (``intake_drafts``, the group seal): the n-th claim is the n-th draft's. All or
#: nothing.
#: The arrays go in binary: a text-format array escapes every element in Python (for a batch of
#: UBL-TR messages, ~60 µs of the worker's CPU a payload against ~2).
INTAKE_MANY = f"""
    SELECT {_CLAIM_COLUMNS}
      FROM intake_drafts(%(invoice_ids)b::text[], %(tenant)s, %(series)b::text[],
                         %(priorities)b::smallint[], %(payloads)b::jsonb[], %(lease_s)s,
                         %(lock_timeout_ms)s, %(profile_versions)b::integer[],
                         %(at)s::timestamptz) WITH ORDINALITY
     ORDER BY ordinality
"""  # noqa: S608 - constant column list, values are bound

#: Step 2 for a stored draft (``claim_tenant_invoice``), by producer key (tenant, invoice_id):
#: lock, decide, seal if needed (pinning whichever issuer profile is in force), take the lease.
#: No row: unknown invoice.
CLAIM = f"""
    SELECT {_CLAIM_COLUMNS}
      FROM claim_tenant_invoice(%(tenant)s, %(invoice_id)s, %(lease_s)s, %(lock_timeout_ms)s,
                                coalesce(%(at)s::timestamptz, now()))
"""  # noqa: S608 - constant column list, values are bound

#: Store the document an outcome concerns, unless it is stored already (%(sha256)s NULL: it is).
_DOCUMENT = """
    doc AS (
        INSERT INTO invoice_documents (invoice_pk, sha256, media_type, format, body)
        SELECT %(pk)s, %(sha256)s, %(media_type)s, %(format)s, %(body)s
         WHERE %(sha256)s::text IS NOT NULL
        ON CONFLICT DO NOTHING
    )"""

#: Outcome: accepted, with the integrator's reference. Unfenced on purpose — acceptance is the
#: integrator's truth whoever saw it. No row: it was settled already.
MARK_ISSUED = f"""
    WITH {_DOCUMENT}
    UPDATE invoices
       SET status = 'ISSUED', integrator_ref = %(ref)s, issued_at = now(), last_error = NULL,
           next_attempt_at = NULL, sending_since = NULL,
           document_sha256 = coalesce(%(sha256)s, document_sha256)
     WHERE id = %(pk)s AND status IN ('SENDING', 'ERROR')
    RETURNING id
"""  # noqa: S608 - constant fragment, values are bound

#: Outcome: accepted, for many invoices in one call (group commit: one statement, its own
#: transaction, one WAL flush for all), storing each one's document unless it is stored already
#: (sha256 NULL). ``gapless_mark_issued_many`` (schema/current/outcomes.sql) locks the rows in id
#: order and the counters their chain records extend in key order before it settles them, so
#: writers settling invoices of several series never deadlock. Unfenced like MARK_ISSUED.
#: The arrays travel in binary (``%(…)b``): psycopg's text form of an array quotes every
#: element in Python, which for a document's bytes cost ~150 µs per 10 kB body.
MARK_ISSUED_MANY = """
    SELECT id FROM gapless_mark_issued_many(
        %(pks)b::bigint[], %(refs)b::text[], %(shas)b::text[], %(media_types)b::text[],
        %(formats)b::text[], %(bodies)b::bytea[]) AS settled(id)
"""

#: Outcome: transient failure, retry at %(retry_at)s (NULL parks it for an operator). Fenced by
#: the attempt that sent it, so a stale sender never overwrites a newer attempt's state.
MARK_ERROR = f"""
    WITH {_DOCUMENT}
    UPDATE invoices
       SET status = 'ERROR', last_error = %(error)s, next_attempt_at = %(retry_at)s,
           sending_since = NULL, document_sha256 = coalesce(%(sha256)s, document_sha256)
     WHERE id = %(pk)s AND status = 'SENDING' AND attempts = %(attempt)s
    RETURNING id
"""  # noqa: S608 - constant fragment, values are bound

#: Outcome: permanent rejection; the number stays pinned. Fenced like MARK_ERROR.
MARK_REJECTED = f"""
    WITH {_DOCUMENT}
    UPDATE invoices
       SET status = 'REJECTED', last_error = %(reason)s, next_attempt_at = NULL,
           sending_since = NULL, document_sha256 = coalesce(%(sha256)s, document_sha256)
     WHERE id = %(pk)s AND status = 'SENDING' AND attempts = %(attempt)s
    RETURNING id
"""  # noqa: S608 - constant fragment, values are bound

#: Columns of an invoice under a sending lease, with its stored document (if any).
_SENDING_COLUMNS = """i.id, i.invoice_id, i.tenant, i.series, i.number, i.reserved_no,
              i.attempts, i.uuid, i.reserved_at, i.profile_version, i.payload::text AS payload,
              i.document_sha256,
              d.media_type AS document_media_type, d.format AS document_format,
              d.body AS document"""

#: Recovery: claim stuck SENDING invoices and ERROR invoices that are due (and below
#: %(max_attempts)s, NULL: no limit), skipping rows another process holds, and take their lease
#: in the same statement, only of the tenants %(only)s (NULL: any) and none of %(excluded)s
#: (the tenants whose integrator account is not answering). Two partial indexes keep it cheap.
#: Returns the pre-claim lease and due time so that a claim the caller cannot work on can be put
#: back exactly (RELEASE_ORPHAN).
CLAIM_ORPHANS = f"""
    WITH stuck AS (
        SELECT id, sending_since AS prev_since, next_attempt_at AS prev_due FROM invoices
         WHERE status = 'SENDING'
           AND sending_since < now() - make_interval(secs => %(stuck_after_s)s)
           AND (%(only)s::text[] IS NULL OR tenant = ANY(%(only)s::text[]))
           AND tenant <> ALL(%(excluded)s::text[])
         ORDER BY sending_since
         LIMIT %(batch)s
         FOR UPDATE SKIP LOCKED
    ), due AS (
        SELECT id, sending_since AS prev_since, next_attempt_at AS prev_due FROM invoices
         WHERE status = 'ERROR' AND next_attempt_at <= now()
           AND (%(max_attempts)s::integer IS NULL OR attempts < %(max_attempts)s)
           AND (%(only)s::text[] IS NULL OR tenant = ANY(%(only)s::text[]))
           AND tenant <> ALL(%(excluded)s::text[])
         ORDER BY next_attempt_at
         LIMIT %(batch)s
         FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT id, 'SENDING' AS was, prev_since, prev_due FROM stuck
        UNION ALL
        SELECT id, 'ERROR' AS was, prev_since, prev_due FROM due
    ), claimed AS (
        UPDATE invoices i
           SET status = 'SENDING', sending_since = now(), attempts = i.attempts + 1,
               next_attempt_at = NULL
          FROM picked
         WHERE i.id = picked.id
        RETURNING i.*, picked.was, picked.prev_since, picked.prev_due
    )
    SELECT {_SENDING_COLUMNS}, i.was, i.prev_since, i.prev_due
      FROM claimed i
      LEFT JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
"""  # noqa: S608 - constant column list, values are bound

#: Recovery: put a claimed orphan back exactly as it was before CLAIM_ORPHANS (status, attempts,
#: lease, due time), when no integrator call was made for it. Fenced by the claim's attempt. The
#: history records it as 'released'.
RELEASE_ORPHAN = """
    UPDATE invoices
       SET status = %(was)s, attempts = attempts - 1, sending_since = %(prev_since)s,
           next_attempt_at = %(prev_due)s
     WHERE id = %(pk)s AND status = 'SENDING' AND attempts = %(attempt)s
    RETURNING id
"""

#: Operator: cancel before a number is reserved.
CANCEL = """
    UPDATE invoices SET status = 'CANCELLED', last_error = %(reason)s
     WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
       AND status = 'RECEIVED' AND reserved_no IS NULL
    RETURNING id
"""

#: Operator: void an ERROR/REJECTED invoice; its number stays accounted for.
VOID = """
    UPDATE invoices SET status = 'VOIDED', last_error = %(reason)s, next_attempt_at = NULL
     WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
       AND status IN ('ERROR', 'REJECTED')
    RETURNING id
"""

#: Operator: take an ERROR/REJECTED invoice back to SENDING for a resend under the same number
#: and UUID. With a corrected payload the document in force is cleared (the next send renders
#: the corrected one; the documents sent before stay in invoice_documents). The caller then sends
#: it (recovery does if the caller dies).
RETRY = f"""
    WITH claimed AS (
        UPDATE invoices
           SET status = 'SENDING', sending_since = now(), attempts = attempts + 1,
               next_attempt_at = NULL, payload = coalesce(%(payload)s::jsonb, payload),
               document_sha256 = CASE WHEN %(payload)s::jsonb IS NULL THEN document_sha256 END
         WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
           AND status IN ('ERROR', 'REJECTED')
        RETURNING *
    )
    SELECT {_SENDING_COLUMNS}
      FROM claimed i
      LEFT JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
"""  # noqa: S608 - constant column list, values are bound

#: The status and number of one invoice (no lock): what an operator action found instead.
INVOICE_STATE = """
    SELECT status, number, series FROM invoices
     WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
"""

#: The tenants that hold an invoice of this invoice_id (no lock), for a command that names the
#: id alone: an id is unique per tenant, so two tenants may each hold one. Uses the unique index
#: invoices_invoice_id_tenant_key.
INVOICE_TENANTS = """
    SELECT tenant FROM invoices WHERE invoice_id = %(invoice_id)s ORDER BY tenant
"""

#: Invoices refused for their channel and not corrected yet, oldest first (no lock; the partial
#: index invoices_wrong_channel_idx).
WRONG_CHANNEL_REJECTED = """
    SELECT tenant, invoice_id FROM invoices
     WHERE status = 'REJECTED' AND last_error LIKE 'WRONG CHANNEL: %%'
     ORDER BY id LIMIT %(batch)s
"""

#: A refused invoice that cannot be corrected automatically loses the correction's mark: the
#: reason says why, for the operator (no history event: the status does not change).
GIVE_UP_CORRECTION = """
    UPDATE invoices SET last_error = %(reason)s
     WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s AND status = 'REJECTED'
       AND last_error LIKE 'WRONG CHANNEL: %%'
    RETURNING id
"""

#: What a channel correction needs of an invoice (no lock).
CORRECTION_STATE = """
    SELECT id, tenant, series, status, number, priority, payload::text AS payload, last_error
      FROM invoices WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
"""

#: One invoice by producer key, (tenant, invoice_id) (no lock).
GET_INVOICE = """
    SELECT id, invoice_id, tenant, series, status, priority, period_key, reserved_no, number,
           reserved_at, payload, attempts, sending_since, next_attempt_at, last_error,
           integrator_ref, created_at, updated_at, issued_at, uuid, profile_version,
           document_sha256, document, answer, answer_status
      FROM invoices WHERE invoice_id = %(invoice_id)s AND tenant = %(tenant)s
"""

#: History of one invoice, oldest first: in insertion order, which is also its feed order (events
#: committed but not positioned yet have no sequence_id, and still come in their place).
INVOICE_EVENTS = """
    SELECT sequence_id, kind, from_status, to_status, number, attempts, detail, actor, created_at,
           document_sha256
      FROM invoice_events WHERE invoice_pk = %(pk)s
     ORDER BY id
"""

#: The stored bytes of one document an invoice sent (by its sha256: the one in force is the
#: invoice's ``document_sha256``). No lock.
STORED_DOCUMENT = """
    SELECT media_type, format, body
      FROM invoice_documents WHERE invoice_pk = %(pk)s AND sha256 = %(sha256)s
"""

#: One invoice as a send would see it, with its document in force (no lock: a read).
INVOICE_AS_SENT = f"""
    SELECT {_SENDING_COLUMNS}
      FROM invoices i
      LEFT JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
     WHERE i.invoice_id = %(invoice_id)s AND i.tenant = %(tenant)s
"""  # noqa: S608 - constant column list, values are bound

#: What the API needs to answer a batch of producer keys in one round trip: the series and status
#: of each invoice the database holds among the (tenant, invoice_id) pairs (no lock; the unique
#: index invoices_invoice_id_tenant_key finds each). A key nobody holds has no row.
KNOWN_INVOICES = """
    SELECT i.tenant, i.invoice_id, i.series, i.status
      FROM unnest(%(tenants)s::text[], %(invoice_ids)s::text[]) AS k(tenant, invoice_id)
      JOIN invoices i ON i.invoice_id = k.invoice_id AND i.tenant = k.tenant
"""

#: `gapless invoice list`: the documents matching, newest first — by (created_at, id), a backward
#: scan of invoices_created_idx that stops at the limit (a `since` bound is a range of it). Every
#: filter may be NULL (not given). No lock. The caller asks one row more than it shows, to tell
#: whether more match.
LIST_INVOICES = """
    SELECT id, invoice_id, tenant, series, number, status, payload->>'issue_date' AS issue_date,
           attempts, last_error, created_at, updated_at, document, answer->>'code' AS answer,
           answer_status
      FROM invoices
     WHERE (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
       AND (CAST(%(statuses)s AS text[]) IS NULL OR status = ANY(%(statuses)s))
       AND (CAST(%(answer)s AS text) IS NULL
            OR (%(answer)s = 'none' AND answer_status IS NULL)
            OR (%(answer)s = 'unanswered' AND answer_status = 'unanswered')
            OR answer->>'code' = %(answer)s)
       AND (CAST(%(since)s AS timestamptz) IS NULL OR created_at >= %(since)s)
     ORDER BY created_at DESC, id DESC
     LIMIT %(limit)s
"""
