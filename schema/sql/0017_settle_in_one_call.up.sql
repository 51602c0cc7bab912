-- gapless schema, version 17: the ISSUED outcomes of a group commit in one call.
--
-- The worker's and recovery's writer of ISSUED outcomes (gapless/issuing/issued.py) settled each
-- batch in a transaction of four round trips: BEGIN, the locks (rows in id order, then the
-- counters whose chains the 'issued' records extend, in key order), the UPDATE with the
-- documents, COMMIT. gapless_mark_issued_many does the same steps, in the same order, in one
-- function: one statement, its own transaction in autocommit, one round trip.
--
-- Forward-only (schema/README.md): no down file.

CREATE FUNCTION gapless_mark_issued_many(p_pks bigint[], p_refs text[], p_shas text[],
                                         p_media_types text[], p_formats text[],
                                         p_bodies bytea[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    -- The rows it settles, in id order; then the counters whose chains their 'issued' records
    -- extend, in key order. The records' trigger locks each counter (the chain's head) as the
    -- UPDATE reaches its row, in whatever order the plan visits the rows: two writers settling
    -- invoices of two series each could take the heads in opposite orders and deadlock. Taken
    -- here first, every writer takes them in one order.
    PERFORM 1 FROM invoices i
      WHERE i.id = ANY(p_pks) AND i.status IN ('SENDING', 'ERROR')
      ORDER BY i.id
        FOR UPDATE;
    PERFORM 1 FROM number_counters c
      WHERE (c.tenant, c.series, c.period_key) IN (
                SELECT i.tenant, i.series, i.period_key FROM invoices i
                 WHERE i.id = ANY(p_pks) AND i.status IN ('SENDING', 'ERROR'))
      ORDER BY c.tenant, c.series, c.period_key
        FOR UPDATE;
    -- Each document unless it is stored already (its sha256 NULL).
    INSERT INTO invoice_documents (invoice_pk, sha256, media_type, format, body)
    SELECT v.id, v.sha256, v.media_type, v.format, v.body
      FROM unnest(p_pks, p_shas, p_media_types, p_formats, p_bodies)
           AS v(id, sha256, media_type, format, body)
     WHERE v.sha256 IS NOT NULL
    ON CONFLICT DO NOTHING;
    -- Unfenced, like one invoice's ISSUED: acceptance is the integrator's truth whoever saw it.
    RETURN QUERY
    UPDATE invoices i
       SET status = 'ISSUED', integrator_ref = v.ref, issued_at = now(), last_error = NULL,
           next_attempt_at = NULL, sending_since = NULL,
           document_sha256 = coalesce(v.sha256, i.document_sha256)
      FROM unnest(p_pks, p_refs, p_shas) AS v(id, ref, sha256)
     WHERE i.id = v.id AND i.status IN ('SENDING', 'ERROR')
    RETURNING i.id;
END $$;
