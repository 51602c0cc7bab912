-- gapless schema, version 9: a tamper-evident chain per counter (docs/chain.md is the format).
--
-- Every (tenant, series, period_key) counter carries a hash chain: chain_records holds its
-- records in order (seq 1..n), number_counters holds its head (chain_seq, chain_hash). A record
-- is appended
--   * 'seal'      by gapless_seal itself, in the statement that advances the counter, so every
--                 entry point (intake_invoice, claim_invoice, reserve_number, next_number) writes
--                 it: the counter's upsert also advances the head, under the row lock it takes
--                 anyway (no new contention, no second write of the row);
--   * 'issued', 'rejected', 'voided' by a trigger when a numbered invoice reaches that status;
--   * 'corrected' by the same trigger when the message of a numbered invoice is replaced.
-- A later record refers to its seal by the number (reserved_no): one seal per number.
-- The records a database had before this version are built here from its current state, marked
-- migrated. chain_records is append-only, like invoice_events.
--
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

ALTER TABLE number_counters
    ADD COLUMN chain_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN chain_hash text;

-- The SHA-256 of the stored message's canonical JSON, computed when the message is stored
-- (intake_invoice) or replaced (the trigger below), so that the seal only reads it; NULL for a
-- row a SQL client inserted itself (the seal computes it then). Never trusted by a verifier,
-- which recomputes it from the payload.
ALTER TABLE invoices ADD COLUMN message_sha256 text;

CREATE TABLE chain_records (
    tenant          text NOT NULL,
    series          text NOT NULL,
    period_key      text NOT NULL,
    seq             bigint NOT NULL,
    version         text NOT NULL,
    kind            text NOT NULL CONSTRAINT chain_records_kind
                    CHECK (kind IN ('seal', 'issued', 'rejected', 'voided', 'corrected')),
    reserved_no     bigint NOT NULL,
    number          text NOT NULL,
    invoice_id      text,
    uuid            uuid,
    message_sha256  text,
    document_sha256 text,
    ref             text,
    reason          text,
    at              timestamptz NOT NULL,
    migrated        boolean NOT NULL DEFAULT false,
    hash            text NOT NULL,
    CONSTRAINT chain_records_pkey PRIMARY KEY (tenant, series, period_key, seq)
);
-- No foreign key to number_counters: only the seal and gapless_chain_append write records, for
-- the counter row they hold locked, and the check's share lock on that row would cost every seal
-- a quarter of the chain's price. gapless chain verify reads every record against its counter.

CREATE TRIGGER chain_records_append_only
    BEFORE UPDATE OR DELETE ON chain_records
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER chain_records_no_truncate
    BEFORE TRUNCATE ON chain_records
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();

-- ---------------------------------------------------------------- canonical JSON and hashes
-- gapless_canonical_json: docs/chain.md, "Canonical JSON". Keys in code point order (the "C"
-- collation orders UTF-8 bytes, which is code point order), no spaces; strings as PostgreSQL's
-- JSON output escapes them; numbers in plain decimal without trailing zeros.
-- PL/pgSQL (its plans are cached per session) and one call per object or array, scalars inline:
-- an order of magnitude faster than a recursive SQL function.
CREATE FUNCTION gapless_canonical_json(p jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    r text;
BEGIN
    CASE jsonb_typeof(p)
    WHEN 'object' THEN
        SELECT string_agg(to_json(k)::text || ':' || CASE jsonb_typeof(v)
                   WHEN 'string' THEN v::text
                   WHEN 'number' THEN trim_scale(v::text::numeric)::text
                   WHEN 'object' THEN gapless_canonical_json(v)
                   WHEN 'array' THEN gapless_canonical_json(v)
                   ELSE v::text END, ',' ORDER BY k COLLATE "C")
          INTO r FROM jsonb_each(p) AS e(k, v);
        RETURN '{' || coalesce(r, '') || '}';
    WHEN 'array' THEN
        SELECT string_agg(CASE jsonb_typeof(v)
                   WHEN 'string' THEN v::text
                   WHEN 'number' THEN trim_scale(v::text::numeric)::text
                   WHEN 'object' THEN gapless_canonical_json(v)
                   WHEN 'array' THEN gapless_canonical_json(v)
                   ELSE v::text END, ',' ORDER BY n)
          INTO r FROM jsonb_array_elements(p) WITH ORDINALITY AS a(v, n);
        RETURN '[' || coalesce(r, '') || ']';
    WHEN 'number' THEN
        RETURN trim_scale(p::text::numeric)::text;
    ELSE
        RETURN p::text;  -- a string as PostgreSQL's JSON output escapes it; true, false, null
    END CASE;
END $$;

-- The SHA-256 (lowercase hex) of a message's canonical JSON, UTF-8.
CREATE FUNCTION gapless_message_sha256(p jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(gapless_canonical_json(p), 'UTF8')), 'hex')
$$;

-- The genesis value of a chain: the "previous hash" of its record 1.
CREATE FUNCTION gapless_chain_genesis(p_tenant text, p_series text, p_period_key text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to('gapless-chain/1' || E'\n'
        || '{"period_key":' || to_json(p_period_key)::text
        || ',"series":' || to_json(p_series)::text
        || ',"tenant":' || to_json(p_tenant)::text || '}', 'UTF8')), 'hex')
$$;

-- gapless_chain_link: the hash of a record given the previous hash (docs/chain.md, "Hashes");
-- the record's canonical JSON written out, its keys in code point order, every one present.
CREATE FUNCTION gapless_chain_link(
    p_prev text, p_seq bigint, p_kind text, p_tenant text, p_series text, p_period_key text,
    p_reserved_no bigint, p_number text, p_invoice_id text, p_uuid uuid, p_message_sha256 text,
    p_document_sha256 text, p_ref text, p_reason text, p_at timestamptz, p_migrated boolean)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to('gapless-chain/1' || E'\n' || p_prev || E'\n'
        || '{"at":'
        || to_json(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text
        || ',"document_sha256":' || coalesce(to_json(p_document_sha256)::text, 'null')
        || ',"invoice_id":' || coalesce(to_json(p_invoice_id)::text, 'null')
        || ',"kind":' || to_json(p_kind)::text
        || ',"message_sha256":' || coalesce(to_json(p_message_sha256)::text, 'null')
        || ',"migrated":' || CASE WHEN p_migrated THEN 'true' ELSE 'false' END
        || ',"number":' || to_json(p_number)::text
        || ',"period_key":' || to_json(p_period_key)::text
        || ',"reason":' || coalesce(to_json(p_reason)::text, 'null')
        || ',"ref":' || coalesce(to_json(p_ref)::text, 'null')
        || ',"reserved_no":' || p_reserved_no::text
        || ',"seq":' || p_seq::text
        || ',"series":' || to_json(p_series)::text
        || ',"tenant":' || to_json(p_tenant)::text
        || ',"uuid":' || coalesce(to_json(p_uuid::text)::text, 'null')
        || '}', 'UTF8')), 'hex')
$$;

-- gapless_chain_append: append a record (not a seal: gapless_seal links its own) to the chain
-- of a counter, advancing its head in one update. Locks the counter row until the caller's
-- transaction ends.
CREATE FUNCTION gapless_chain_append(
    p_tenant text, p_series text, p_period_key text, p_kind text, p_reserved_no bigint,
    p_number text, p_invoice_id text, p_uuid uuid, p_message_sha256 text,
    p_document_sha256 text, p_ref text, p_reason text, p_at timestamptz, p_migrated boolean)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
    v_hash text;
BEGIN
    UPDATE number_counters c
       SET chain_seq = c.chain_seq + 1,
           chain_hash = gapless_chain_link(
               coalesce(c.chain_hash, gapless_chain_genesis(p_tenant, p_series, p_period_key)),
               c.chain_seq + 1, p_kind, p_tenant, p_series, p_period_key, p_reserved_no,
               p_number, p_invoice_id, p_uuid, p_message_sha256, p_document_sha256, p_ref,
               p_reason, p_at, p_migrated)
     WHERE c.tenant = p_tenant AND c.series = p_series AND c.period_key = p_period_key
    RETURNING c.chain_seq, c.chain_hash INTO v_seq, v_hash;
    INSERT INTO chain_records (tenant, series, period_key, seq, version, kind, reserved_no,
                               number, invoice_id, uuid, message_sha256, document_sha256, ref,
                               reason, at, migrated, hash)
    VALUES (p_tenant, p_series, p_period_key, v_seq, 'gapless-chain/1', p_kind, p_reserved_no,
            p_number, p_invoice_id, p_uuid, p_message_sha256, p_document_sha256, p_ref,
            p_reason, p_at, p_migrated, v_hash);
    RETURN v_seq;
END $$;

-- ---------------------------------------------------------------- the seal links its record
-- gapless_seal now also takes the invoice the number is for (NULL: next_number, a number
-- without an invoice row). The counter's upsert advances the head with the seal record's hash
-- in the same row update, and the record is inserted before the function returns. A counter's
-- first seal (a fresh row) links from the genesis in a second update, once per counter.
DROP FUNCTION gapless_seal(text, text, timestamptz);
CREATE FUNCTION gapless_seal(p_tenant text, p_series text, p_at timestamptz,
                             p_invoice_pk bigint DEFAULT NULL)
RETURNS TABLE (reserved_no bigint, sealed_at timestamptz, period_key text, number text)
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
    RETURN QUERY SELECT v_no, v_at, v_period, v_number;
END $$;

-- intake_invoice (body as in version 4) stores the message's hash with the draft.
CREATE OR REPLACE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
                               p_priority smallint, p_payload jsonb, p_lease_s double precision,
                               p_lock_timeout_ms integer DEFAULT NULL,
                               p_profile_version integer DEFAULT NULL,
                               p_at timestamptz DEFAULT NULL)
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_tenant text;
    v_series text;
    v_created boolean := false;
    v_kind text;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    INSERT INTO invoices (invoice_id, tenant, series, priority, payload, message_sha256)
    VALUES (p_invoice_id, p_tenant, p_series, p_priority, p_payload,
            gapless_message_sha256(p_payload))
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NOT NULL THEN
        v_created := true;
    ELSE
        SELECT i.id, i.tenant, i.series INTO v_id, v_tenant, v_series
          FROM invoices i WHERE i.invoice_id = p_invoice_id FOR UPDATE;
        IF v_tenant <> p_tenant OR v_series <> p_series THEN
            RETURN NEXT gapless_claim_row('conflict', false, v_id, false);
            RETURN;
        END IF;
    END IF;
    -- Two statements, so that the claim row is read after gapless_take's update.
    v_kind := gapless_take(v_id, p_lease_s, coalesce(p_at, now()), true, p_profile_version);
    RETURN NEXT gapless_claim_row(v_kind, v_created, v_id, NOT v_created);
END $$;


-- reserve_number and gapless_take (bodies as in version 4) name their invoice to the seal.
CREATE OR REPLACE FUNCTION reserve_number(p_invoice_id text, p_at timestamptz DEFAULT now(),
                                          p_lock_timeout_ms integer DEFAULT NULL)
RETURNS TABLE (invoice_pk bigint, reserved_no bigint, number text, period_key text, fresh boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inv invoices;
    s record;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    SELECT * INTO inv FROM invoices i WHERE i.invoice_id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found',
            MESSAGE = 'no invoice with invoice_id ' || quote_literal(p_invoice_id);
    END IF;
    IF inv.reserved_no IS NOT NULL THEN
        RETURN QUERY SELECT inv.id, inv.reserved_no, inv.number, inv.period_key, false;
        RETURN;
    END IF;
    IF inv.status <> 'RECEIVED' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'invoice ' || quote_literal(p_invoice_id) || ' is ' || inv.status
            || ' and takes no number';
    END IF;
    SELECT * INTO s FROM gapless_seal(inv.tenant, inv.series, p_at, inv.id);
    UPDATE invoices i
       SET reserved_no = s.reserved_no, number = s.number, period_key = s.period_key,
           reserved_at = s.sealed_at, profile_version = gapless_profile_version(inv.tenant)
     WHERE i.id = inv.id;
    RETURN QUERY SELECT inv.id, s.reserved_no, s.number, s.period_key, true;
END $$;

CREATE OR REPLACE FUNCTION gapless_take(p_id bigint, p_lease_s double precision, p_at timestamptz,
                             p_check_profile boolean, p_profile_version integer)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    inv invoices;
    v_profile integer;
    s record;
BEGIN
    SELECT * INTO inv FROM invoices WHERE id = p_id;
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
    SELECT * INTO s FROM gapless_seal(inv.tenant, inv.series, p_at, p_id);
    UPDATE invoices
       SET reserved_no = s.reserved_no, number = s.number, period_key = s.period_key,
           reserved_at = s.sealed_at, profile_version = v_profile,
           status = 'SENDING', sending_since = now(), attempts = attempts + 1,
           next_attempt_at = NULL
     WHERE id = p_id;
    RETURN 'sealed';
END $$;


-- ---------------------------------------------------------------- final and correction records
-- gapless_invoice_chain: a message was replaced (its hash is stored anew; a numbered invoice
-- also gets a 'corrected' record), or a numbered invoice reached ISSUED, REJECTED or VOIDED:
-- append the record that says so. Locks the counter row until the transaction ends. Runs only
-- when its trigger's WHEN clause says so.
CREATE FUNCTION gapless_invoice_chain() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.payload IS DISTINCT FROM OLD.payload THEN
        NEW.message_sha256 := gapless_message_sha256(NEW.payload);
        IF OLD.reserved_no IS NOT NULL THEN
            PERFORM gapless_chain_append(NEW.tenant, NEW.series, NEW.period_key, 'corrected',
                                         NEW.reserved_no, NEW.number, NEW.invoice_id, NEW.uuid,
                                         NEW.message_sha256, NULL, NULL, NULL, now(), false);
        END IF;
    END IF;
    IF OLD.reserved_no IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
       AND NEW.status IN ('ISSUED', 'REJECTED', 'VOIDED') THEN
        PERFORM gapless_chain_append(
            NEW.tenant, NEW.series, NEW.period_key, lower(NEW.status), NEW.reserved_no,
            NEW.number, NEW.invoice_id, NEW.uuid, NULL,
            CASE WHEN NEW.status = 'ISSUED' THEN NEW.document_sha256 END,
            CASE WHEN NEW.status = 'ISSUED' THEN NEW.integrator_ref END,
            CASE WHEN NEW.status <> 'ISSUED' THEN NEW.last_error END,
            now(), false);
    END IF;
    RETURN NEW;
END $$;

-- After the guard and the history (BEFORE triggers run in name order): a refused change
-- never gets this far.
CREATE TRIGGER invoices_history_zchain
    BEFORE UPDATE OF status, payload ON invoices
    FOR EACH ROW WHEN (NEW.payload IS DISTINCT FROM OLD.payload
        OR (OLD.reserved_no IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
            AND NEW.status IN ('ISSUED', 'REJECTED', 'VOIDED')))
    EXECUTE FUNCTION gapless_invoice_chain();

-- ---------------------------------------------------------------- chains of existing rows
-- Every counter gets its chain from the current state, marked migrated: a seal record for
-- each number 1..last_no in order (the invoice that holds it, if any, with its current message
-- and seal time; a number with no invoice row — next_number — rendered at the counter's last
-- seal), then, in number order, the current final state of each ISSUED, REJECTED or VOIDED one.
DO $$
DECLARE
    c record;
    s series;
    inv invoices;
    n bigint;
BEGIN
    FOR c IN SELECT * FROM number_counters ORDER BY tenant, series, period_key LOOP
        SELECT * INTO s FROM series WHERE tenant = c.tenant AND code = c.series;
        FOR n IN 1 .. c.last_no LOOP
            SELECT * INTO inv FROM invoices i
             WHERE i.tenant = c.tenant AND i.series = c.series AND i.period_key = c.period_key
               AND i.reserved_no = n;
            PERFORM gapless_chain_append(
                c.tenant, c.series, c.period_key, 'seal', n,
                coalesce(inv.number, gapless_render(s.format, s.prefix, s.width,
                                                    coalesce(c.last_at, c.updated_at)
                                                        AT TIME ZONE s.tz, n)),
                inv.invoice_id, inv.uuid, gapless_message_sha256(inv.payload), NULL, NULL, NULL,
                coalesce(inv.reserved_at, c.last_at, c.updated_at), true);
        END LOOP;
        FOR inv IN SELECT * FROM invoices i
                    WHERE i.tenant = c.tenant AND i.series = c.series
                      AND i.period_key = c.period_key AND i.reserved_no IS NOT NULL
                      AND i.status IN ('ISSUED', 'REJECTED', 'VOIDED')
                    ORDER BY i.reserved_no LOOP
            PERFORM gapless_chain_append(
                c.tenant, c.series, c.period_key, lower(inv.status), inv.reserved_no,
                inv.number, inv.invoice_id, inv.uuid, NULL,
                CASE WHEN inv.status = 'ISSUED' THEN inv.document_sha256 END,
                CASE WHEN inv.status = 'ISSUED' THEN inv.integrator_ref END,
                CASE WHEN inv.status <> 'ISSUED' THEN inv.last_error END,
                coalesce(inv.issued_at, inv.updated_at), true);
        END LOOP;
    END LOOP;
END $$;
