-- Undo version 9: the chain goes, the seal and its callers are as in version 4.
DROP TRIGGER invoices_history_zchain ON invoices;
DROP FUNCTION gapless_invoice_chain();
DROP FUNCTION gapless_seal(text, text, timestamptz, bigint);
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
    INSERT INTO invoices (invoice_id, tenant, series, priority, payload)
    VALUES (p_invoice_id, p_tenant, p_series, p_priority, p_payload)
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


CREATE FUNCTION gapless_seal(p_tenant text, p_series text, p_at timestamptz)
RETURNS TABLE (reserved_no bigint, sealed_at timestamptz, period_key text, number text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s series;
    v_period text;
    v_no bigint;
    v_at timestamptz;
BEGIN
    SELECT * INTO s FROM series WHERE tenant = p_tenant AND code = p_series;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'unknown series (tenant ' || quote_literal(p_tenant)
            || ', series ' || quote_literal(p_series) || ')';
    END IF;
    v_period := gapless_period_key(s.reset, p_at AT TIME ZONE s.tz);
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no, last_at)
    VALUES (p_tenant, p_series, v_period, 1, p_at)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = c.last_no + 1, updated_at = now(),
                      last_at = greatest(c.last_at, EXCLUDED.last_at)
    RETURNING c.last_no, c.last_at INTO v_no, v_at;
    IF length(v_no::text) > s.width THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = 'series exhausted: number ' || v_no || ' does not fit width ' || s.width;
    END IF;
    RETURN QUERY SELECT v_no, v_at, v_period,
                        gapless_render(s.format, s.prefix, s.width, v_at AT TIME ZONE s.tz, v_no);
END $$;

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
    SELECT * INTO s FROM gapless_seal(inv.tenant, inv.series, p_at);
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
    SELECT * INTO s FROM gapless_seal(inv.tenant, inv.series, p_at);
    UPDATE invoices
       SET reserved_no = s.reserved_no, number = s.number, period_key = s.period_key,
           reserved_at = s.sealed_at, profile_version = v_profile,
           status = 'SENDING', sending_since = now(), attempts = attempts + 1,
           next_attempt_at = NULL
     WHERE id = p_id;
    RETURN 'sealed';
END $$;
DROP FUNCTION gapless_chain_append(text, text, text, text, bigint, text, text, uuid, text, text,
                                   text, text, timestamptz, boolean);
DROP FUNCTION gapless_chain_link(text, bigint, text, text, text, text, bigint, text, text, uuid,
                                 text, text, text, text, timestamptz, boolean);
DROP FUNCTION gapless_chain_genesis(text, text, text);
DROP FUNCTION gapless_message_sha256(jsonb);
DROP FUNCTION gapless_canonical_json(jsonb);
DROP TABLE chain_records;
ALTER TABLE number_counters DROP COLUMN chain_hash, DROP COLUMN chain_seq;
ALTER TABLE invoices DROP COLUMN message_sha256;
