-- intake.sql: the claim. The worker's steps 1 and 2 (store the draft, lock it, decide, seal if
-- needed, take the sending lease) in one statement, intake_invoice — or intake_drafts for many
-- drafts of a tenant's series at once (the group seal); the same claim for a stored
-- draft, claim_tenant_invoice (other stacks, operator tools; claim_invoice when one tenant holds
-- the id). All decide with gapless_take, which seals through gapless_seal (numbering.sql). An
-- invoice is named by its producer key, (tenant, invoice_id): invoice_id is unique per tenant.
--
-- The guarantee (I3, I5): an invoice row is locked before anything is decided, so two workers
-- with the same message never both seal; an invoice that holds a number keeps it (redelivery,
-- retries and recovery never consume a second one). Run on its own (autocommit), intake_invoice
-- locks the invoice row and, for a seal, the counter row for one statement and its commit,
-- never across a client round trip; p_lock_timeout_ms bounds every lock wait (SQLSTATE 55P03
-- when it expires; nothing consumed).

-- What a claim returns: the decision and everything the sender needs (the stored document, if
-- the invoice already sent one; the payload only when asked).
CREATE TYPE gapless_claim AS (
    kind text, created boolean, id bigint, invoice_id text, tenant text, series text,
    status text, number text, reserved_no bigint, attempts integer, uuid uuid,
    reserved_at timestamptz, profile_version integer, payload jsonb,
    document_sha256 text, document_media_type text, document_format text, document bytea
);

-- gapless_take: decide for one invoice row the caller has locked, and act.
--   final  — ISSUED, CANCELLED or VOIDED: nothing to do;
--   parked — ERROR or REJECTED: recovery or an operator owns it;
--   busy   — SENDING under a lease younger than p_lease_s: its owner finishes it;
--   stale  — no number yet, and the issuer profile in force is not p_profile_version (only when
--            p_check_profile): nothing changed; the caller re-checks the message and comes back;
--   send   — it had its number: the sending lease is taken (SENDING, attempts + 1);
--   sealed — a number is sealed now (gapless_seal, naming this invoice), the profile in force
--            pinned, and the lease taken, in one row update (history: 'reserved', then 'sending').
CREATE FUNCTION gapless_take(p_id bigint, p_lease_s double precision, p_at timestamptz,
                             p_check_profile boolean, p_profile_version integer)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    inv record;
    v_profile integer;
    s record;
BEGIN
    -- The columns it decides by, not the whole row.
    SELECT i.tenant, i.series, i.status, i.sending_since, i.reserved_no
      INTO inv FROM invoices i WHERE i.id = p_id;
    IF inv.status IN ('ISSUED', 'CANCELLED', 'VOIDED') THEN
        RETURN 'final';
    ELSIF inv.status IN ('ERROR', 'REJECTED') THEN
        RETURN 'parked';
    ELSIF inv.status = 'SENDING'
          AND inv.sending_since > now() - make_interval(secs => p_lease_s) THEN
        RETURN 'busy';
    ELSIF inv.reserved_no IS NOT NULL THEN
        UPDATE invoices
           SET status = 'SENDING', sending_since = now(), attempts = attempts + 1,
               next_attempt_at = NULL
         WHERE id = p_id;
        RETURN 'send';
    END IF;
    v_profile := gapless_profile_version(inv.tenant);
    IF p_check_profile AND v_profile IS DISTINCT FROM p_profile_version THEN
        RETURN 'stale';
    END IF;
    s := gapless_seal(inv.tenant, inv.series, p_at, p_id);
    UPDATE invoices
       SET reserved_no = s.reserved_no, number = s.number, period_key = s.period_key,
           reserved_at = s.sealed_at, profile_version = v_profile,
           status = 'SENDING', sending_since = now(), attempts = attempts + 1,
           next_attempt_at = NULL
     WHERE id = p_id;
    RETURN 'sealed';
END $$;

CREATE FUNCTION gapless_claim_row(p_kind text, p_created boolean, p_id bigint,
                                  p_with_payload boolean)
RETURNS gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    r gapless_claim;
BEGIN
    SELECT p_kind, p_created, i.id, i.invoice_id, i.tenant, i.series, i.status, i.number,
           i.reserved_no, i.attempts, i.uuid, i.reserved_at, i.profile_version,
           CASE WHEN p_with_payload THEN i.payload END,
           i.document_sha256, d.media_type, d.format, d.body
      INTO r
      FROM invoices i
      LEFT JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
     WHERE i.id = p_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN r;
END $$;

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
CREATE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
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
CREATE FUNCTION intake_invoices(p_invoice_ids text[], p_tenant text, p_series text,
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

-- claim_tenant_invoice: the claim for a stored draft, by producer key (tenant, invoice_id) (other
-- stacks, operator tools): lock, decide, seal if needed, take the lease, and return the whole
-- claim; a fresh seal pins whichever issuer profile is in force. No row: the tenant has no such
-- invoice.
CREATE FUNCTION claim_tenant_invoice(p_tenant text, p_invoice_id text,
                                     p_lease_s double precision,
                                     p_lock_timeout_ms integer DEFAULT NULL,
                                     p_at timestamptz DEFAULT now())
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_kind text;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    SELECT i.id INTO v_id FROM invoices i
     WHERE i.invoice_id = p_invoice_id AND i.tenant = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_kind := gapless_take(v_id, p_lease_s, coalesce(p_at, now()), false, NULL);
    RETURN NEXT gapless_claim_row(v_kind, false, v_id, true);
END $$;

-- claim_invoice: claim_tenant_invoice for an invoice_id that one tenant holds (the signature
-- other stacks call since before ids were per tenant). No row: no tenant holds it. An id that
-- several tenants hold is refused (SQLSTATE 21000, naming them): call claim_tenant_invoice.
CREATE FUNCTION claim_invoice(p_invoice_id text, p_lease_s double precision,
                              p_lock_timeout_ms integer DEFAULT NULL,
                              p_at timestamptz DEFAULT now())
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_tenants text[];
BEGIN
    SELECT array_agg(i.tenant ORDER BY i.tenant) INTO v_tenants
      FROM invoices i WHERE i.invoice_id = p_invoice_id;
    IF v_tenants IS NULL THEN
        RETURN;
    ELSIF cardinality(v_tenants) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'cardinality_violation',
            MESSAGE = 'invoice_id ' || quote_literal(p_invoice_id) || ' is held by tenants '
            || array_to_string(v_tenants, ', ') || '; name one (claim_tenant_invoice)';
    END IF;
    RETURN QUERY SELECT * FROM claim_tenant_invoice(v_tenants[1], p_invoice_id, p_lease_s,
                                                    p_lock_timeout_ms, p_at);
END $$;
