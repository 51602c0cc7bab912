-- gapless schema, version 19: the group seal.
--
-- A worker process runs many deliveries at once, and those of one series queue for its counter
-- row. Each one's intake was a statement and a commit of its own: a round trip, an executor, a
-- WAL flush per invoice. intake_invoices takes the drafts waiting for one series together — one
-- statement, one commit — with the same decisions, in array order (fresh seals number in that
-- order). A draft's two steps become gapless_store_draft (store and lock) and
-- gapless_claim_draft (decide, seal, lease), which intake_invoice (one draft, as before) and
-- intake_invoices (many: every invoice row first, in invoice_id order, then the seals) both
-- call; intake_invoice's results, locks and errors are unchanged.
--
-- Forward-only (schema/README.md): no down file.

-- gapless_store_draft: step 1 for one draft, in the caller's statement. Stores the draft for the
-- producer key, (tenant, invoice_id) (a duplicate maps to the same row; the first payload stays)
-- with its message's hash, and locks it. conflict: the key already names an invoice of another
-- series of the tenant (nothing changed); another tenant's invoice of the same invoice_id is
-- never touched nor seen.
CREATE FUNCTION gapless_store_draft(p_invoice_id text, p_tenant text, p_series text,
                                    p_priority smallint, p_payload jsonb,
                                    OUT id bigint, OUT created boolean, OUT conflict boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_series text;
BEGIN
    INSERT INTO invoices (invoice_id, tenant, series, priority, payload, message_sha256)
    VALUES (p_invoice_id, p_tenant, p_series, p_priority, p_payload,
            gapless_message_sha256(p_payload))
    ON CONFLICT (invoice_id, tenant) DO NOTHING
    RETURNING invoices.id INTO id;
    created := id IS NOT NULL;
    conflict := false;
    IF NOT created THEN
        SELECT i.id, i.series INTO id, v_series
          FROM invoices i WHERE i.invoice_id = p_invoice_id AND i.tenant = p_tenant FOR UPDATE;
        conflict := v_series <> p_series;
    END IF;
END $$;

-- gapless_claim_draft: step 2 for a draft gapless_store_draft has stored and locked: decide with
-- gapless_take at p_at — expecting the issuer profile p_profile_version (NULL: none) for a fresh
-- seal — and return the claim. The payload is returned only for a row that existed before (the
-- caller has its own otherwise).
CREATE FUNCTION gapless_claim_draft(p_id bigint, p_created boolean, p_conflict boolean,
                                    p_lease_s double precision, p_profile_version integer,
                                    p_at timestamptz)
RETURNS gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_kind text;
BEGIN
    IF p_conflict THEN
        RETURN gapless_claim_row('conflict', false, p_id, false);
    END IF;
    -- Two statements, so that the claim row is read after gapless_take's update.
    v_kind := gapless_take(p_id, p_lease_s, p_at, true, p_profile_version);
    RETURN gapless_claim_row(v_kind, p_created, p_id, NOT p_created);
END $$;

-- intake_invoice: the worker's steps 1 and 2 for one draft in one statement
-- (gapless_store_draft, then gapless_claim_draft; the seal moment p_at, by default the
-- database's clock). Locks: the invoice row and, for a seal, its counter row, until this
-- statement's transaction ends — run it on its own (autocommit) and the lock lasts one
-- statement. p_lock_timeout_ms bounds every lock wait (SQLSTATE 55P03 when it expires; nothing
-- consumed).
CREATE OR REPLACE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
                               p_priority smallint, p_payload jsonb, p_lease_s double precision,
                               p_lock_timeout_ms integer DEFAULT NULL,
                               p_profile_version integer DEFAULT NULL,
                               p_at timestamptz DEFAULT NULL)
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    d := gapless_store_draft(p_invoice_id, p_tenant, p_series, p_priority, p_payload);
    RETURN NEXT gapless_claim_draft(d.id, d.created, d.conflict, p_lease_s, p_profile_version,
                                    coalesce(p_at, now()));
END $$;

-- intake_invoices: the group seal — intake_invoice for many drafts of one tenant's series in one
-- statement and one commit (the worker's, gapless/issuing/seals.py). The n-th draft is
-- (p_invoice_ids[n], p_priorities[n], p_payloads[n], p_profile_versions[n]; the versions NULL:
-- no profile for any), and the n-th claim returned is the n-th draft's (read them WITH
-- ORDINALITY). All or nothing: a lock not granted within p_lock_timeout_ms (55P03), an unknown
-- series, a deadlock fails the statement and nothing is stored or consumed.
--
-- Locks, in an order every caller shares, so that batches of two processes holding the same
-- messages (duplicated deliveries) do not wait for each other in a circle: first every draft's
-- invoice row, in invoice_id order; then, deciding in array order (fresh seals number in that
-- order), the series' counter row from the first seal — never an invoice row while holding it.
-- intake_invoice takes the same two steps for its one draft. Held until the commit: one
-- statement's time, as for one draft.
CREATE FUNCTION intake_invoices(p_invoice_ids text[], p_tenant text, p_series text,
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
    d record;
    n integer;
BEGIN
    IF coalesce(cardinality(p_priorities), 0) <> v_count
       OR coalesce(cardinality(p_payloads), 0) <> v_count
       OR (p_profile_versions IS NOT NULL AND cardinality(p_profile_versions) <> v_count) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'intake_invoices: every array must have one element per invoice_id ('
                      || v_count || ')';
    END IF;
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    FOR n IN SELECT o.n FROM unnest(p_invoice_ids) WITH ORDINALITY AS o (invoice_id, n)
              ORDER BY o.invoice_id COLLATE "C", o.n LOOP
        d := gapless_store_draft(p_invoice_ids[n], p_tenant, p_series, p_priorities[n],
                                 p_payloads[n]);
        v_ids[n] := d.id;
        v_created[n] := d.created;
        v_conflict[n] := d.conflict;
    END LOOP;
    FOR n IN 1 .. v_count LOOP
        RETURN NEXT gapless_claim_draft(v_ids[n], v_created[n], v_conflict[n], p_lease_s,
                                        p_profile_versions[n], v_at);
    END LOOP;
END $$;
