-- outcomes.sql: outcome writes that take more than one statement, as one call.
--
-- gapless_mark_issued_many settles a group commit of ISSUED outcomes (gapless/issuing/issued.py:
-- the worker's and recovery's writer): it locks the rows in id order, then the counters whose
-- chains the rows' 'issued' records extend (chain.sql) in key order, so that writers settling
-- invoices of several series never deadlock on the chains' heads; stores each document not
-- stored yet; and sets ISSUED. One statement in autocommit: its own transaction, one round trip,
-- one WAL flush for the whole batch. Returns the ids that became ISSUED (the others were settled
-- already). The single-invoice writes are plain statements (gapless/ledger/queries/invoices.py).
--
-- Its statements take arrays, and PostgreSQL's plan cache found a custom plan for a batch of one
-- cheaper than the generic plan, so it planned every statement anew at every call: a quarter of
-- the backend's instructions per issued invoice (docs/benchmarks.md, "The seal's own cost").
-- The function runs with plan_cache_mode = force_generic_plan, and every statement is one whose
-- generic plan is the right one, whatever the table's size: the rows by their primary keys
-- (id = ANY), the counters by primary key one at a time in key order.
CREATE FUNCTION gapless_mark_issued_many(p_pks bigint[], p_refs text[], p_shas text[],
                                         p_media_types text[], p_formats text[],
                                         p_bodies bytea[]) RETURNS SETOF bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    k record;
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
    FOR k IN SELECT DISTINCT i.tenant, i.series, i.period_key FROM invoices i
              WHERE i.id = ANY(p_pks) AND i.status IN ('SENDING', 'ERROR')
              ORDER BY i.tenant, i.series, i.period_key LOOP
        PERFORM 1 FROM number_counters c
          WHERE c.tenant = k.tenant AND c.series = k.series AND c.period_key = k.period_key
            FOR UPDATE;
    END LOOP;
    -- Each document unless it is stored already (its sha256 NULL).
    INSERT INTO invoice_documents (invoice_pk, sha256, media_type, format, body)
    SELECT v.id, v.sha256, v.media_type, v.format, v.body
      FROM unnest(p_pks, p_shas, p_media_types, p_formats, p_bodies)
           AS v(id, sha256, media_type, format, body)
     WHERE v.sha256 IS NOT NULL
    ON CONFLICT DO NOTHING;
    -- Unfenced, like one invoice's ISSUED: acceptance is the integrator's truth whoever saw it.
    -- Each row's reference and document by its id's place in p_pks (not a join with unnest():
    -- a generic plan takes unnest() for a hundred rows, and a hash join over a small table).
    RETURN QUERY
    UPDATE invoices i
       SET status = 'ISSUED', integrator_ref = p_refs[array_position(p_pks, i.id)],
           issued_at = now(), last_error = NULL, next_attempt_at = NULL, sending_since = NULL,
           document_sha256 = coalesce(p_shas[array_position(p_pks, i.id)], i.document_sha256)
     WHERE i.id = ANY(p_pks) AND i.status IN ('SENDING', 'ERROR')
    RETURNING i.id;
END $$;
