-- chain.sql: a tamper-evident chain per counter (I8; docs/chain.md is the format).
--
-- Every (tenant, series, period_key) counter carries a hash chain: chain_records holds its
-- records in order (seq 1..n), number_counters holds its head (chain_seq, chain_hash). A record
-- is appended
--   * 'seal'      by gapless_seal itself (numbering.sql), in the statement that advances the
--                 counter, so every entry point (intake_invoice, claim_invoice, reserve_number,
--                 next_number) writes it: the counter's upsert also advances the head, under the
--                 row lock it takes anyway (no new contention, no second write of the row);
--   * 'issued', 'rejected', 'voided' by a trigger when a numbered invoice reaches that status;
--   * 'corrected' by the same trigger when the message of a numbered invoice is replaced.
-- A later record refers to its seal by the number (reserved_no): one seal per number.
-- chain_records is append-only, like invoice_events. Records built by migration 0009 for the
-- rows a database had before the chain existed are marked migrated.

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
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN encode(sha256(convert_to(gapless_canonical_json(p), 'UTF8')), 'hex');
END $$;

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
