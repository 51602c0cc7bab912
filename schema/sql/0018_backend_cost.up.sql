-- gapless schema, version 18: the backend's own cost of a seal and of an ISSUED outcome.
--
-- Counted in instructions (callgrind over a single-user backend: bench/backend_instructions.py,
-- docs/benchmarks.md, "The seal's own cost"), three things cost PostgreSQL more than the work:
--
-- * The invoice row's six CHECK constraints. PostgreSQL reads a table's CHECK expressions back
--   from their stored text and prepares them at every INSERT or UPDATE statement, not once per
--   session, and every change of an invoice is such a statement. They become one CHECK,
--   invoices_consistent, calling gapless_invoice_consistent: the same rules word for word, a
--   PL/pgSQL body compiled once per session, and a broken rule reported as before (SQLSTATE
--   23514, the old constraint's name and message).
-- * The seal's calls. gapless_seal returned a set, so each caller ran a query with a function
--   scan for its one row; it now returns one row (OUT parameters) that callers assign.
--   reserve_tenant_number and gapless_take read the columns they decide by, not the whole row.
-- * gapless_mark_issued_many was planned anew at every call: its statements take arrays, and the
--   plan cache found a custom plan for a batch of one cheaper than the generic one. It runs with
--   plan_cache_mode = force_generic_plan, and each statement finds its rows by primary key (the
--   counters one by one, in the same key order; the update by id = ANY, each row's values by its
--   place in the arrays), so its generic plan is the right one whatever the table's size.
--
-- Same results, locks and order of locks; nothing a caller sees changes.
-- Forward-only (schema/README.md): no down file.

CREATE FUNCTION gapless_invoice_consistent(p_status text, p_reserved_no bigint, p_number text,
                                           p_period_key text, p_gib_status text,
                                           p_answer_status text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_failed text;
BEGIN
    -- Each rule is the constraint it replaced, word for word, and passes when it is true or
    -- NULL as a CHECK does (NOT NULL is NULL, and IF takes NULL for false). In the order
    -- PostgreSQL checked them: by name.
    IF NOT (p_answer_status IN ('answered', 'unanswered')) THEN
        v_failed := 'invoices_answer_status_kind';
    ELSIF NOT (p_gib_status IS NULL OR p_status = 'ISSUED') THEN
        v_failed := 'invoices_gib_status_issued';
    ELSIF NOT (p_gib_status IN ('pending', 'accepted', 'refused')) THEN
        v_failed := 'invoices_gib_status_kind';
    ELSIF NOT ((p_reserved_no IS NULL AND p_number IS NULL AND p_period_key IS NULL)
               OR (p_reserved_no > 0 AND p_number IS NOT NULL AND p_period_key IS NOT NULL)) THEN
        v_failed := 'invoices_number_pinned';
    ELSIF NOT (p_reserved_no IS NOT NULL OR p_status IN ('RECEIVED', 'CANCELLED')) THEN
        v_failed := 'invoices_numbered_status';
    ELSIF NOT (p_status IN ('RECEIVED', 'SENDING', 'ISSUED', 'ERROR', 'REJECTED', 'CANCELLED',
                            'VOIDED')) THEN
        v_failed := 'invoices_status_kind';
    ELSE
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = v_failed,
        TABLE = 'invoices',
        MESSAGE = 'new row for relation "invoices" violates check constraint "' || v_failed || '"';
END $$;

ALTER TABLE invoices
    DROP CONSTRAINT invoices_status_kind,
    DROP CONSTRAINT invoices_gib_status_kind,
    DROP CONSTRAINT invoices_answer_status_kind,
    DROP CONSTRAINT invoices_number_pinned,
    DROP CONSTRAINT invoices_numbered_status,
    DROP CONSTRAINT invoices_gib_status_issued,
    ADD CONSTRAINT invoices_consistent CHECK (gapless_invoice_consistent(
        status, reserved_no, number, period_key, gib_status, answer_status));

-- A new result type: the function is replaced, not altered. Its callers are PL/pgSQL (resolved
-- when they run) and next_number, a SQL function whose FROM takes one row as it took a set.
DROP FUNCTION gapless_seal(text, text, timestamptz, bigint);
CREATE FUNCTION gapless_seal(p_tenant text, p_series text, p_at timestamptz,
                             p_invoice_pk bigint DEFAULT NULL,
                             OUT reserved_no bigint, OUT sealed_at timestamptz,
                             OUT period_key text, OUT number text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s series;
    v_period text;
    v_no bigint;
    v_at timestamptz;
    v_number text;
    v_seq bigint;
    v_hash text;
    v_invoice_id text;
    v_uuid uuid;
    v_message text;
BEGIN
    SELECT * INTO s FROM series WHERE tenant = p_tenant AND code = p_series;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'unknown series (tenant ' || quote_literal(p_tenant)
            || ', series ' || quote_literal(p_series) || ')';
    END IF;
    -- Read (the caller holds the invoice row) before the counter is locked.
    IF p_invoice_pk IS NOT NULL THEN
        SELECT i.invoice_id, i.uuid,
               coalesce(i.message_sha256, gapless_message_sha256(i.payload))
          INTO v_invoice_id, v_uuid, v_message FROM invoices i WHERE i.id = p_invoice_pk;
    END IF;
    v_period := gapless_period_key(s.reset, p_at AT TIME ZONE s.tz);
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no, last_at, chain_seq)
    VALUES (p_tenant, p_series, v_period, 1, p_at, 1)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = c.last_no + 1, updated_at = now(),
                      last_at = greatest(c.last_at, EXCLUDED.last_at),
                      chain_seq = c.chain_seq + 1,
                      chain_hash = gapless_chain_link(
                          coalesce(c.chain_hash,
                                   gapless_chain_genesis(p_tenant, p_series, v_period)),
                          c.chain_seq + 1, 'seal', p_tenant, p_series, v_period, c.last_no + 1,
                          gapless_render(s.format, s.prefix, s.width,
                                         greatest(c.last_at, EXCLUDED.last_at) AT TIME ZONE s.tz,
                                         c.last_no + 1),
                          v_invoice_id, v_uuid, v_message, NULL, NULL, NULL,
                          greatest(c.last_at, EXCLUDED.last_at), false)
    RETURNING c.last_no, c.last_at, c.chain_seq, c.chain_hash INTO v_no, v_at, v_seq, v_hash;
    IF length(v_no::text) > s.width THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = 'series exhausted: number ' || v_no || ' does not fit width ' || s.width;
    END IF;
    v_number := gapless_render(s.format, s.prefix, s.width, v_at AT TIME ZONE s.tz, v_no);
    IF v_hash IS NULL THEN  -- a fresh counter row: its first record links from the genesis
        v_hash := gapless_chain_link(gapless_chain_genesis(p_tenant, p_series, v_period), 1,
                                     'seal', p_tenant, p_series, v_period, v_no, v_number,
                                     v_invoice_id, v_uuid, v_message, NULL, NULL, NULL, v_at,
                                     false);
        UPDATE number_counters c SET chain_hash = v_hash
         WHERE c.tenant = p_tenant AND c.series = p_series AND c.period_key = v_period;
    END IF;
    INSERT INTO chain_records (tenant, series, period_key, seq, version, kind, reserved_no,
                               number, invoice_id, uuid, message_sha256, at, hash)
    VALUES (p_tenant, p_series, v_period, v_seq, 'gapless-chain/1', 'seal', v_no, v_number,
            v_invoice_id, v_uuid, v_message, v_at, v_hash);
    reserved_no := v_no;
    sealed_at := v_at;
    period_key := v_period;
    number := v_number;
END $$;

CREATE OR REPLACE FUNCTION reserve_tenant_number(p_tenant text, p_invoice_id text,
                                      p_at timestamptz DEFAULT now(),
                                      p_lock_timeout_ms integer DEFAULT NULL)
RETURNS TABLE (invoice_pk bigint, reserved_no bigint, number text, period_key text, fresh boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_no bigint;
    v_number text;
    v_period text;
    v_status text;
    v_series text;
    s record;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    -- The columns it decides by, not the whole row.
    SELECT i.id, i.reserved_no, i.number, i.period_key, i.status, i.series
      INTO v_id, v_no, v_number, v_period, v_status, v_series
      FROM invoices i
     WHERE i.invoice_id = p_invoice_id AND i.tenant = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found',
            MESSAGE = 'no invoice with invoice_id ' || quote_literal(p_invoice_id)
            || ' for tenant ' || quote_literal(p_tenant);
    END IF;
    IF v_no IS NOT NULL THEN
        invoice_pk := v_id;
        reserved_no := v_no;
        number := v_number;
        period_key := v_period;
        fresh := false;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_status <> 'RECEIVED' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'invoice ' || quote_literal(p_invoice_id) || ' is ' || v_status
            || ' and takes no number';
    END IF;
    s := gapless_seal(p_tenant, v_series, p_at, v_id);
    UPDATE invoices i
       SET reserved_no = s.reserved_no, number = s.number, period_key = s.period_key,
           reserved_at = s.sealed_at, profile_version = gapless_profile_version(p_tenant)
     WHERE i.id = v_id;
    invoice_pk := v_id;
    reserved_no := s.reserved_no;
    number := s.number;
    period_key := s.period_key;
    fresh := true;
    RETURN NEXT;
END $$;

CREATE OR REPLACE FUNCTION gapless_take(p_id bigint, p_lease_s double precision, p_at timestamptz,
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

CREATE OR REPLACE FUNCTION gapless_mark_issued_many(p_pks bigint[], p_refs text[], p_shas text[],
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
