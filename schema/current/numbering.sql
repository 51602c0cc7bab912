-- numbering.sql: series, counters and THE SEAL. Where is the number sealed? Here, in
-- gapless_seal: every number gapless hands out comes from it, whichever entry point asks
-- (intake_invoice and claim_tenant_invoice through gapless_take, in intake.sql;
-- reserve_tenant_number and next_number below).
--
-- The guarantee (I1, I2): a counter of (tenant, series, period) advances by exactly one in one
-- statement, `INSERT ... ON CONFLICT DO UPDATE SET last_no = last_no + 1 RETURNING`, which takes
-- the counter's row lock and keeps it until the caller's transaction ends. The caller pins the
-- number on its invoice in that same transaction, so a counter only advances inside the
-- transaction that pins the number: a rollback undoes both, and no number is ever handed out
-- twice or skipped (next_number alone pins nothing: its caller must). The lock is the only serialisation point of a series; commit at once, never
-- across I/O (I5). A period's row is created by its first seal: the reset per day, month or year
-- needs no cron job and has no midnight race.
--
-- Seal time: the number, its period and the seal time (reserved_at, the document's IssueDate)
-- derive from one moment, taken under the counter row lock and clamped to the counter's last
-- seal, so along one counter seal times never go backwards, whatever the callers' clocks.
--
-- Durability: a sealed number may reach the integrator before a crash could undo it, so a
-- transaction that changes a counter never commits asynchronously (synchronous_commit 'off'
-- becomes 'local' for it; stronger settings such as remote_apply are left alone).
--
-- The seal also advances the counter's chain head in the same row update and appends its 'seal'
-- record (chain.sql).

-- The period a moment falls in, read on the series' local clock.
CREATE FUNCTION gapless_period_key(p_reset text, p_local timestamp) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN CASE p_reset
        WHEN 'never'   THEN 'all'
        WHEN 'yearly'  THEN to_char(p_local, 'YYYY')
        WHEN 'monthly' THEN to_char(p_local, 'YYYY-MM')
        WHEN 'daily'   THEN to_char(p_local, 'YYYY-MM-DD')
    END;
END $$;

-- Render a number with a series format: {prefix} {yyyy} {yy} {mm} {dd} {seq}.
CREATE FUNCTION gapless_render(p_format text, p_prefix text, p_width integer,
                               p_local timestamp, p_no bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN replace(replace(replace(replace(replace(replace(p_format,
        '{prefix}', p_prefix),
        '{yyyy}', to_char(p_local, 'YYYY')),
        '{yy}', to_char(p_local, 'YY')),
        '{mm}', to_char(p_local, 'MM')),
        '{dd}', to_char(p_local, 'DD')),
        '{seq}', lpad(p_no::text, p_width, '0'));
END $$;

-- format_number: the printed number for counter value p_no reserved at p_at.
CREATE FUNCTION format_number(p_tenant text, p_series text, p_no bigint,
                              p_at timestamptz DEFAULT now()) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, p_no)
      FROM series s WHERE s.tenant = p_tenant AND s.code = p_series
$$;

-- preview_number: what the next reservation at p_at would print; consumes nothing, locks nothing.
CREATE FUNCTION preview_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS TABLE (period_key text, next_no bigint, number text)
LANGUAGE sql STABLE AS $$
    SELECT k.period_key, k.next_no,
           gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, k.next_no)
      FROM series s
      CROSS JOIN LATERAL (
          SELECT gapless_period_key(s.reset, p_at AT TIME ZONE s.tz) AS period_key
      ) p
      CROSS JOIN LATERAL (
          SELECT p.period_key,
                 coalesce((SELECT c.last_no FROM number_counters c
                            WHERE c.tenant = s.tenant AND c.series = s.code
                              AND c.period_key = p.period_key), 0) + 1 AS next_no
      ) k
     WHERE s.tenant = p_tenant AND s.code = p_series
$$;

-- The issuer profile in force for a tenant (NULL: none); a seal pins it on the invoice.
CREATE FUNCTION gapless_profile_version(p_tenant text) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT max(version) FROM tenant_profiles WHERE tenant = p_tenant);
END $$;

-- ---------------------------------------------------------------- the seal
-- gapless_seal: advance the counter of (tenant, series, period of p_at) and say what was sealed:
-- the counter value, the seal time, its period and the printed number. The seal time is p_at
-- clamped to the counter's last seal, taken under the counter row lock, so along one counter the
-- seal times (and the documents' IssueDates) never go backwards, whatever the callers' clocks.
-- Clamping never leaves the period: the last seal of this counter lies in the same period.
-- p_invoice_pk is the invoice the number is for (NULL: next_number, a number without an invoice
-- row). The counter's upsert advances the chain head with the seal record's hash in the same row
-- update, and the record is inserted before the function returns. A counter's first seal (a
-- fresh row) links from the genesis in a second update, once per counter.
-- One row, not a set: a PL/pgSQL caller assigns it (`s := gapless_seal(...)`), an expression
-- evaluated in place, without the executor a query over a set-returning function starts.
-- The counter row stays locked until the caller's transaction ends: pin the number at once.
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

-- next_number: advance the counter of (tenant, series, period of p_at) and return the new value,
-- for other stacks (its signature is kept). The counter row stays locked until the caller's
-- transaction ends, so the caller must pin the value in that same transaction or it is a gap.
CREATE FUNCTION next_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE sql AS $$
    SELECT reserved_no FROM gapless_seal(p_tenant, p_series, p_at)
$$;

-- reserve_tenant_number: pin a number on the invoice (by its producer key, (tenant,
-- invoice_id)), just in time, for SQL callers (the worker's path is intake_invoice, intake.sql).
-- Locks the invoice row, and if it has no number yet seals one (gapless_seal) and pins
-- reserved_no, number, period_key, reserved_at and the issuer profile in force. Idempotent: an
-- invoice that already holds a number gets it back unchanged (fresh = false) and nothing is
-- consumed. Both row locks last until the caller commits: commit at once, never across I/O.
-- p_lock_timeout_ms bounds the wait for either lock (SET LOCAL; SQLSTATE 55P03 when it expires).
CREATE FUNCTION reserve_tenant_number(p_tenant text, p_invoice_id text,
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

-- reserve_number: reserve_tenant_number for an invoice_id that one tenant holds (the signature
-- other stacks call since before ids were per tenant). An id that several tenants hold is
-- refused (SQLSTATE 21000, naming them): call reserve_tenant_number.
CREATE FUNCTION reserve_number(p_invoice_id text, p_at timestamptz DEFAULT now(),
                               p_lock_timeout_ms integer DEFAULT NULL)
RETURNS TABLE (invoice_pk bigint, reserved_no bigint, number text, period_key text, fresh boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_tenants text[];
BEGIN
    SELECT array_agg(i.tenant ORDER BY i.tenant) INTO v_tenants
      FROM invoices i WHERE i.invoice_id = p_invoice_id;
    IF v_tenants IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found',
            MESSAGE = 'no invoice with invoice_id ' || quote_literal(p_invoice_id);
    ELSIF cardinality(v_tenants) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'cardinality_violation',
            MESSAGE = 'invoice_id ' || quote_literal(p_invoice_id) || ' is held by tenants '
            || array_to_string(v_tenants, ', ') || '; name one (reserve_tenant_number)';
    END IF;
    RETURN QUERY SELECT * FROM reserve_tenant_number(v_tenants[1], p_invoice_id, p_at,
                                                     p_lock_timeout_ms);
END $$;

-- A counter's change is never committed asynchronously (see the head of this file).
CREATE FUNCTION gapless_durable_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Read by the commit itself (SET LOCAL scope); stronger settings are left alone.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER number_counters_durable_commit
    AFTER INSERT OR UPDATE ON number_counters
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_durable_commit();
