-- gapless schema, version 22: the group seal takes drafts of several series.
--
-- intake_invoices (0019) sealed the drafts of one series together; a worker issuing to two
-- series of a tenant (routed e-Fatura and e-Arşiv) sent a statement and a commit per series.
-- intake_drafts takes each draft's series, so the drafts of a tenant that wait together go in
-- one statement and one commit whatever their series. Its counter rows are locked series by
-- series in key order, the order gapless_mark_issued_many already locks them in, so two
-- statements never wait for each other in a circle. intake_invoices stays, with its meaning:
-- intake_drafts with one series for every draft.
--
-- Forward-only (schema/README.md): no down file.

-- intake_drafts: the group seal — intake_invoice for many drafts of one tenant, of any of its
-- series, in one statement and one commit (the worker's, gapless/issuing/seals.py). The n-th
-- draft is (p_invoice_ids[n], p_series[n], p_priorities[n], p_payloads[n],
-- p_profile_versions[n]; the versions NULL: no profile for any), and the n-th claim returned is
-- the n-th draft's (read them WITH ORDINALITY). All or nothing: a lock not granted within
-- p_lock_timeout_ms (55P03), an unknown series, a deadlock fails the statement and nothing is
-- stored or consumed.
--
-- Locks, in an order every caller shares, so that two statements never wait for each other in
-- a circle: first every draft's invoice row, in invoice_id order (batches of two processes
-- holding the same messages, duplicated deliveries); then, deciding series by series in key
-- order — the order gapless_mark_issued_many locks counters in — and within a series in array
-- order (its fresh seals number in that order), each series' counter row from its first seal;
-- never an invoice row while holding one. intake_invoice takes the same two steps for its one
-- draft. Held until the commit: one statement's time.
CREATE FUNCTION intake_drafts(p_invoice_ids text[], p_tenant text, p_series text[],
                              p_priorities smallint[], p_payloads jsonb[],
                              p_lease_s double precision,
                              p_lock_timeout_ms integer DEFAULT NULL,
                              p_profile_versions integer[] DEFAULT NULL,
                              p_at timestamptz DEFAULT NULL)
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := coalesce(cardinality(p_invoice_ids), 0);
    v_at timestamptz := coalesce(p_at, now());
    v_ids bigint[] := array_fill(NULL::bigint, ARRAY[v_count]);
    v_created boolean[] := array_fill(NULL::boolean, ARRAY[v_count]);
    v_conflict boolean[] := array_fill(NULL::boolean, ARRAY[v_count]);
    v_claims gapless_claim[] := '{}';
    d record;
    n integer;
BEGIN
    IF coalesce(cardinality(p_series), 0) <> v_count
       OR coalesce(cardinality(p_priorities), 0) <> v_count
       OR coalesce(cardinality(p_payloads), 0) <> v_count
       OR (p_profile_versions IS NOT NULL AND cardinality(p_profile_versions) <> v_count) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'intake_drafts: every array must have one element per invoice_id ('
                      || v_count || ')';
    END IF;
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    FOR n IN SELECT o.n FROM unnest(p_invoice_ids) WITH ORDINALITY AS o (invoice_id, n)
              ORDER BY o.invoice_id COLLATE "C", o.n LOOP
        d := gapless_store_draft(p_invoice_ids[n], p_tenant, p_series[n], p_priorities[n],
                                 p_payloads[n]);
        v_ids[n] := d.id;
        v_created[n] := d.created;
        v_conflict[n] := d.conflict;
    END LOOP;
    FOR n IN SELECT o.n FROM unnest(p_series) WITH ORDINALITY AS o (series, n)
              ORDER BY o.series, o.n LOOP
        v_claims[n] := gapless_claim_draft(v_ids[n], v_created[n], v_conflict[n], p_lease_s,
                                           p_profile_versions[n], v_at);
    END LOOP;
    FOR n IN 1 .. v_count LOOP
        RETURN NEXT v_claims[n];
    END LOOP;
END $$;

-- intake_invoices: intake_drafts for drafts all of one series (p_series) — the group seal's
-- first form (schema 0019), kept for its callers.
CREATE OR REPLACE FUNCTION intake_invoices(p_invoice_ids text[], p_tenant text, p_series text,
                                p_priorities smallint[], p_payloads jsonb[],
                                p_lease_s double precision,
                                p_lock_timeout_ms integer DEFAULT NULL,
                                p_profile_versions integer[] DEFAULT NULL,
                                p_at timestamptz DEFAULT NULL)
RETURNS SETOF gapless_claim
LANGUAGE sql AS $$
    SELECT * FROM intake_drafts(
        p_invoice_ids, p_tenant,
        array_fill(p_series, ARRAY[coalesce(cardinality(p_invoice_ids), 0)]),
        p_priorities, p_payloads, p_lease_s, p_lock_timeout_ms, p_profile_versions, p_at)
$$;
