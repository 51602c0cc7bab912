-- Undo schema version 4: back to version 3's functions; the documents, profiles and UUIDs go.

DROP FUNCTION IF EXISTS intake_invoice(text, text, text, smallint, jsonb, double precision, integer,
                                       integer, timestamptz);
DROP FUNCTION IF EXISTS claim_invoice(text, double precision, integer, timestamptz);
DROP FUNCTION IF EXISTS gapless_claim_row(text, boolean, bigint, boolean);
DROP TYPE IF EXISTS gapless_claim;
DROP FUNCTION IF EXISTS gapless_take(bigint, double precision, timestamptz, boolean, integer);

CREATE FUNCTION claim_invoice(p_invoice_id text, p_lease_s double precision,
                              p_lock_timeout_ms integer DEFAULT NULL,
                              p_at timestamptz DEFAULT now())
RETURNS TABLE (kind text, status text, id bigint, invoice_id text, tenant text, series text,
               number text, reserved_no bigint, payload jsonb, attempts integer, fresh boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inv invoices;
    v_fresh boolean := false;
    v_kind text;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    SELECT * INTO inv FROM invoices i WHERE i.invoice_id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_kind := CASE
        WHEN inv.status IN ('ISSUED', 'CANCELLED', 'VOIDED') THEN 'final'
        WHEN inv.status IN ('ERROR', 'REJECTED') THEN 'parked'
        WHEN inv.status = 'SENDING'
             AND inv.sending_since > now() - make_interval(secs => p_lease_s) THEN 'busy'
        ELSE 'send'
    END;
    IF v_kind = 'send' THEN
        IF inv.reserved_no IS NULL THEN
            PERFORM reserve_number(p_invoice_id, p_at, NULL);
            v_fresh := true;
        END IF;
        UPDATE invoices i
           SET status = 'SENDING', sending_since = now(), attempts = i.attempts + 1,
               next_attempt_at = NULL
         WHERE i.id = inv.id
        RETURNING i.* INTO inv;
    END IF;
    RETURN QUERY SELECT v_kind, inv.status, inv.id, inv.invoice_id, inv.tenant, inv.series,
                        inv.number, inv.reserved_no, inv.payload, inv.attempts, v_fresh;
END $$;

CREATE OR REPLACE FUNCTION next_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    s series;
    v_no bigint;
BEGIN
    SELECT * INTO s FROM series WHERE tenant = p_tenant AND code = p_series;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'unknown series (tenant ' || quote_literal(p_tenant)
            || ', series ' || quote_literal(p_series) || ')';
    END IF;
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no)
    VALUES (p_tenant, p_series, gapless_period_key(s.reset, p_at AT TIME ZONE s.tz), 1)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = c.last_no + 1, updated_at = now()
    RETURNING c.last_no INTO v_no;
    IF length(v_no::text) > s.width THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = 'series exhausted: number ' || v_no || ' does not fit width ' || s.width;
    END IF;
    RETURN v_no;
END $$;

CREATE OR REPLACE FUNCTION reserve_number(p_invoice_id text, p_at timestamptz DEFAULT now(),
                               p_lock_timeout_ms integer DEFAULT NULL)
RETURNS TABLE (invoice_pk bigint, reserved_no bigint, number text, period_key text, fresh boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inv invoices;
    v_no bigint;
    v_number text;
    v_period text;
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
    v_no := next_number(inv.tenant, inv.series, p_at);
    SELECT gapless_period_key(s.reset, p_at AT TIME ZONE s.tz),
           gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, v_no)
      INTO v_period, v_number
      FROM series s WHERE s.tenant = inv.tenant AND s.code = inv.series;
    UPDATE invoices i
       SET reserved_no = v_no, number = v_number, period_key = v_period, reserved_at = p_at
     WHERE i.id = inv.id;
    RETURN QUERY SELECT inv.id, v_no, v_number, v_period, true;
END $$;

CREATE OR REPLACE FUNCTION gapless_invoice_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.reserved_no IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
                MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
                || ' holds number ' || OLD.number || ' and cannot be deleted; void it instead';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.reserved_no IS NOT NULL AND (
        NEW.reserved_no IS DISTINCT FROM OLD.reserved_no
        OR NEW.number IS DISTINCT FROM OLD.number
        OR NEW.period_key IS DISTINCT FROM OLD.period_key
        OR NEW.tenant IS DISTINCT FROM OLD.tenant
        OR NEW.series IS DISTINCT FROM OLD.series) THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
            || ': a reserved number is never changed';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
        (OLD.status, NEW.status) IN (
            ('RECEIVED', 'SENDING'), ('RECEIVED', 'CANCELLED'),
            ('SENDING', 'ISSUED'), ('SENDING', 'ERROR'), ('SENDING', 'REJECTED'),
            ('ERROR', 'SENDING'), ('ERROR', 'ISSUED'), ('ERROR', 'VOIDED'),
            ('REJECTED', 'SENDING'), ('REJECTED', 'VOIDED'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id) || ': transition '
            || OLD.status || ' -> ' || NEW.status || ' is not allowed';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION gapless_invoice_history() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_kind text;
    v_from text;
    v_detail text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_kind := CASE WHEN NEW.reserved_no IS NULL THEN 'received' ELSE 'reserved' END;
        v_from := NULL;
    ELSE
        v_from := OLD.status;
        IF OLD.reserved_no IS NULL AND NEW.reserved_no IS NOT NULL THEN
            v_kind := 'reserved';
        ELSIF NEW.status = OLD.status AND NEW.attempts = OLD.attempts THEN
            RETURN NULL;  -- bookkeeping only (payload fix, lease), no state change
        ELSE
            v_kind := CASE NEW.status
                WHEN 'SENDING'   THEN CASE OLD.status WHEN 'SENDING' THEN 'resent'
                                                         WHEN 'RECEIVED' THEN 'sending'
                                                         ELSE 'retried' END
                WHEN 'ISSUED'    THEN CASE WHEN current_setting('gapless.actor', true) = 'recovery'
                                           THEN 'recovered' ELSE 'issued' END
                WHEN 'ERROR'     THEN 'error'
                WHEN 'REJECTED'  THEN 'rejected'
                WHEN 'CANCELLED' THEN 'cancelled'
                WHEN 'VOIDED'    THEN 'voided'
                ELSE lower(NEW.status)
            END;
        END IF;
    END IF;
    v_detail := CASE
        WHEN NEW.status = 'ISSUED' THEN NEW.integrator_ref
        WHEN NEW.status IN ('ERROR', 'REJECTED', 'VOIDED', 'CANCELLED') THEN NEW.last_error
    END;
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, number, attempts, detail, actor)
    VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series, v_kind, v_from, NEW.status,
            NEW.number, NEW.attempts, v_detail,
            coalesce(nullif(current_setting('gapless.actor', true), ''), 'sql'));
    RETURN NULL;
END $$;

DROP FUNCTION IF EXISTS gapless_profile_version(text);
DROP FUNCTION IF EXISTS gapless_seal(text, text, timestamptz);

DROP TABLE IF EXISTS invoice_documents;
ALTER TABLE invoice_events DROP COLUMN IF EXISTS document_sha256;
ALTER TABLE invoices DROP CONSTRAINT IF EXISTS invoices_uuid_key;
ALTER TABLE invoices
    DROP COLUMN IF EXISTS uuid,
    DROP COLUMN IF EXISTS profile_version,
    DROP COLUMN IF EXISTS document_sha256;
ALTER TABLE number_counters DROP COLUMN IF EXISTS last_at;
DROP TABLE IF EXISTS tenant_profiles;
DROP FUNCTION IF EXISTS gapless_append_only();
