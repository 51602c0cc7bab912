"""The chain (docs/chain.md): what ``gapless chain verify`` reads.

Every statement reads only (MVCC snapshot, no lock) and takes the filters ``%(tenant)s`` and
``%(series)s`` (NULL: all). Run them in one snapshot (``Database.snapshot()``: REPEATABLE READ,
READ ONLY) so that they see one state of the database.
"""

_SCOPE = """(CAST(%(tenant)s AS text) IS NULL OR {t}.tenant = %(tenant)s)
           AND (CAST(%(series)s AS text) IS NULL OR {t}.series = %(series)s)"""

#: The counters in scope with their heads, in chain order.
COUNTERS = f"""
    SELECT c.tenant, c.series, c.period_key, c.last_no, c.chain_seq, c.chain_hash
      FROM number_counters c
     WHERE {_SCOPE.format(t="c")}
     ORDER BY c.tenant, c.series, c.period_key
"""  # noqa: S608 - constant text only; values are bound

#: Every record of the chains in scope, by chain and seq (the uuid as text, lowercase).
RECORDS = f"""
    SELECT r.tenant, r.series, r.period_key, r.seq, r.version, r.kind, r.reserved_no, r.number,
           r.invoice_id, r.uuid::text AS uuid, r.message_sha256, r.document_sha256,
           r.ref, r.reason,
           to_char(r.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at,
           r.migrated, r.hash
      FROM chain_records r
     WHERE {_SCOPE.format(t="r")}
     ORDER BY r.tenant, r.series, r.period_key, r.seq
"""  # noqa: S608 - constant text only; values are bound

#: The numbered invoices in scope, with their stored message as JSON text (parsed by the caller,
#: so numbers keep their exact decimal value).
INVOICES = f"""
    SELECT i.id, i.tenant, i.series, i.period_key, i.reserved_no, i.number, i.invoice_id,
           i.uuid::text AS uuid, i.status, i.payload::text AS payload, i.document_sha256,
           i.integrator_ref
      FROM invoices i
     WHERE i.reserved_no IS NOT NULL AND {_SCOPE.format(t="i")}
"""  # noqa: S608 - constant text only; values are bound

#: The stored documents of the numbered invoices in scope (the exact bytes sent).
DOCUMENTS = f"""
    SELECT d.invoice_pk, d.body
      FROM invoice_documents d
      JOIN invoices i ON i.id = d.invoice_pk
     WHERE i.reserved_no IS NOT NULL AND {_SCOPE.format(t="i")}
"""  # noqa: S608 - constant text only; values are bound

#: The head of every chain that has one (``gapless chain checkpoint``: every series, no filter),
#: with the printed number of its last seal record (found backwards from the head on the primary
#: key, a few records at most); in chain order.
HEADS = """
    SELECT c.tenant, c.series, c.period_key, c.last_no, c.chain_seq, c.chain_hash,
           s.number AS last_number
      FROM number_counters c
      LEFT JOIN LATERAL (
            SELECT r.number
              FROM chain_records r
             WHERE r.tenant = c.tenant AND r.series = c.series
               AND r.period_key = c.period_key AND r.seq <= c.chain_seq AND r.kind = 'seal'
             ORDER BY r.seq DESC
             LIMIT 1) s ON true
     WHERE c.chain_seq > 0
     ORDER BY c.tenant, c.series, c.period_key
"""

#: The hash of the record at each given (tenant, series, period_key, seq) — ``:signed``, a JSON
#: array of objects with those keys — or NULL where the chain has no such record; one index
#: probe each.
SIGNED_RECORDS = """
    SELECT s.tenant, s.series, s.period_key, s.seq, r.hash
      FROM jsonb_to_recordset(CAST(%(signed)s AS jsonb))
           AS s(tenant text, series text, period_key text, seq bigint)
      LEFT JOIN chain_records r
             ON r.tenant = s.tenant AND r.series = s.series AND r.period_key = s.period_key
            AND r.seq = s.seq
"""
