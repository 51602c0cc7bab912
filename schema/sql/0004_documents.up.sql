-- gapless schema, version 4: legal documents, and the worker's intake in one statement.
--
-- 1. Issuer profiles (tenant_profiles): the supplier party of every UBL-TR document, versioned
--    and append-only. The profile in force when a number is sealed is pinned on the invoice
--    (invoices.profile_version; NULL: the tenant had none, the document is the message's JSON).
-- 2. The document's identity: invoices.uuid (the ETTN) is fixed when the draft is first stored
--    and never changes; the exact bytes sent are kept in invoice_documents (append-only, one row
--    per distinct document an invoice ever sent) and invoices.document_sha256 names the one in
--    force. Every history event carries that SHA-256.
-- 3. IssueDate agrees with the number and never goes backwards along a counter: the seal time is
--    taken under the counter row lock, clamped to the counter's last seal (number_counters.last_at),
--    and the number, its period and reserved_at all derive from that one moment (gapless_seal).
-- 4. intake_invoice: the worker's draft upsert and claim in one statement (one round trip, one
--    transaction): the counter row is locked for one statement and its commit, nothing else.
-- 5. History: a fresh seal that also takes the lease writes 'reserved' then 'sending' (as before),
--    from one row update; a claim put back by recovery writes 'released', not 'resent'.
--
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

-- ---------------------------------------------------------------- issuer profiles
CREATE TABLE tenant_profiles (
    tenant       text NOT NULL,
    version      integer NOT NULL CONSTRAINT tenant_profiles_version_positive CHECK (version > 0),
    tax_id       text NOT NULL CONSTRAINT tenant_profiles_tax_id_digits
                 CHECK (tax_id ~ '^[0-9]{10,11}$'),
    name         text NOT NULL,
    tax_office   text NOT NULL,
    street       text NOT NULL,
    district     text NOT NULL,
    city         text NOT NULL,
    country      text NOT NULL DEFAULT 'Türkiye',
    postal_zone  text,
    email        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenant_profiles_pkey PRIMARY KEY (tenant, version)
);

-- Profiles, like documents, are history: a change is a new version, never an edit.
CREATE FUNCTION gapless_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = TG_TABLE_NAME || ' is append-only';
END $$;

CREATE TRIGGER tenant_profiles_append_only
    BEFORE UPDATE OR DELETE ON tenant_profiles
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER tenant_profiles_no_truncate
    BEFORE TRUNCATE ON tenant_profiles
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();

-- ---------------------------------------------------------------- document identity and bytes
ALTER TABLE number_counters ADD COLUMN last_at timestamptz;

ALTER TABLE invoices
    ADD COLUMN uuid uuid NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN profile_version integer,
    ADD COLUMN document_sha256 text;
ALTER TABLE invoices ADD CONSTRAINT invoices_uuid_key UNIQUE (uuid);

ALTER TABLE invoice_events ADD COLUMN document_sha256 text;

CREATE TABLE invoice_documents (
    invoice_pk  bigint NOT NULL,
    sha256      text NOT NULL CONSTRAINT invoice_documents_sha256_hex
                CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    media_type  text NOT NULL,
    format      text NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT invoice_documents_pkey PRIMARY KEY (invoice_pk, sha256),
    CONSTRAINT invoice_documents_invoice_fkey FOREIGN KEY (invoice_pk) REFERENCES invoices (id)
);

CREATE TRIGGER invoice_documents_append_only
    BEFORE UPDATE OR DELETE ON invoice_documents
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER invoice_documents_no_truncate
    BEFORE TRUNCATE ON invoice_documents
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();

-- ---------------------------------------------------------------- the seal
-- gapless_seal: advance the counter of (tenant, series, period of p_at) and say what was sealed:
-- the counter value, the seal time, its period and the printed number. The seal time is p_at
-- clamped to the counter's last seal, taken under the counter row lock, so along one counter the
-- seal times (and the documents' IssueDates) never go backwards, whatever the callers' clocks.
-- Clamping never leaves the period: the last seal of this counter lies in the same period.
-- The counter row stays locked until the caller's transaction ends: pin the number at once.
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

-- next_number keeps its signature (other stacks call it); the counter now also records the seal.
CREATE OR REPLACE FUNCTION next_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE sql AS $$
    SELECT reserved_no FROM gapless_seal(p_tenant, p_series, p_at)
$$;

-- The issuer profile in force for a tenant (NULL: none).
CREATE FUNCTION gapless_profile_version(p_tenant text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT max(version) FROM tenant_profiles WHERE tenant = p_tenant
$$;

-- reserve_number (same signature and contract as before): the number, its period and
-- reserved_at now come from one seal moment, and the issuer profile in force is pinned too.
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

-- ---------------------------------------------------------------- the claim
-- gapless_take: decide for one invoice row the caller has locked, and act.
--   final  — ISSUED, CANCELLED or VOIDED: nothing to do;
--   parked — ERROR or REJECTED: recovery or an operator owns it;
--   busy   — SENDING under a lease younger than p_lease_s: its owner finishes it;
--   stale  — no number yet, and the issuer profile in force is not p_profile_version (only when
--            p_check_profile): nothing changed; the caller re-checks the message and comes back;
--   send   — it had its number: the sending lease is taken (SENDING, attempts + 1);
--   sealed — a number is sealed now, the profile in force pinned, and the lease taken, in one
--            row update (history: 'reserved', then 'sending').
CREATE FUNCTION gapless_take(p_id bigint, p_lease_s double precision, p_at timestamptz,
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

-- What a claim returns: the decision and everything the sender needs (the stored document, if
-- the invoice already sent one; the payload only when asked).
CREATE TYPE gapless_claim AS (
    kind text, created boolean, id bigint, invoice_id text, tenant text, series text,
    status text, number text, reserved_no bigint, attempts integer, uuid uuid,
    reserved_at timestamptz, profile_version integer, payload jsonb,
    document_sha256 text, document_media_type text, document_format text, document bytea
);

CREATE FUNCTION gapless_claim_row(p_kind text, p_created boolean, p_id bigint,
                                  p_with_payload boolean)
RETURNS gapless_claim
LANGUAGE sql AS $$
    SELECT ROW(p_kind, p_created, i.id, i.invoice_id, i.tenant, i.series, i.status, i.number,
               i.reserved_no, i.attempts, i.uuid, i.reserved_at, i.profile_version,
               CASE WHEN p_with_payload THEN i.payload END,
               i.document_sha256, d.media_type, d.format, d.body)::gapless_claim
      FROM invoices i
      LEFT JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256
     WHERE i.id = p_id
$$;

-- intake_invoice: the worker's steps 1 and 2 in one statement. Stores the draft for the
-- producer key (a duplicate maps to the same row; the first payload stays), locks it, and
-- decides with gapless_take — expecting the issuer profile p_profile_version (NULL: none) for a
-- fresh seal. 'conflict': the key already names an invoice of another tenant or series (nothing
-- changed). The payload is returned only for a row that existed before (the caller has its own
-- otherwise). Locks: the invoice row and, for a seal, its counter row, until this statement's
-- transaction ends — run it on its own (autocommit) and the lock lasts one statement.
-- p_lock_timeout_ms bounds every lock wait (SQLSTATE 55P03 when it expires; nothing consumed).
CREATE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
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

-- claim_invoice: the claim for a stored draft, by producer key (other stacks, operator tools).
-- As before — lock, decide, seal if needed, take the lease — now returning the whole claim;
-- a fresh seal pins whichever issuer profile is in force. No row: the invoice does not exist.
DROP FUNCTION claim_invoice(text, double precision, integer, timestamptz);
CREATE FUNCTION claim_invoice(p_invoice_id text, p_lease_s double precision,
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
    SELECT i.id INTO v_id FROM invoices i WHERE i.invoice_id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_kind := gapless_take(v_id, p_lease_s, coalesce(p_at, now()), false, NULL);
    RETURN NEXT gapless_claim_row(v_kind, false, v_id, true);
END $$;

-- ---------------------------------------------------------------- invariants and history
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
        OR NEW.reserved_at IS DISTINCT FROM OLD.reserved_at
        OR NEW.profile_version IS DISTINCT FROM OLD.profile_version
        OR NEW.tenant IS DISTINCT FROM OLD.tenant
        OR NEW.series IS DISTINCT FROM OLD.series) THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
            || ': a reserved number, its seal time and its issuer profile are never changed';
    END IF;
    IF NEW.uuid IS DISTINCT FROM OLD.uuid THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
            || ': the document UUID is fixed when the draft is stored';
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
    v_actor text := coalesce(nullif(current_setting('gapless.actor', true), ''), 'sql');
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_kind := CASE WHEN NEW.reserved_no IS NULL THEN 'received' ELSE 'reserved' END;
        v_from := NULL;
    ELSE
        v_from := OLD.status;
        IF OLD.reserved_no IS NULL AND NEW.reserved_no IS NOT NULL THEN
            IF NEW.status = OLD.status THEN
                v_kind := 'reserved';
            ELSE
                -- Sealed and sent in one update: the seal, then the status change.
                INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind,
                                            from_status, to_status, number, attempts, detail,
                                            actor, document_sha256)
                VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series, 'reserved', OLD.status,
                        OLD.status, NEW.number, OLD.attempts, NULL, v_actor,
                        NEW.document_sha256);
                v_kind := NULL;
            END IF;
        ELSIF NEW.status = OLD.status AND NEW.attempts = OLD.attempts THEN
            RETURN NULL;  -- bookkeeping only (payload fix, lease, document), no state change
        ELSIF NEW.attempts < OLD.attempts THEN
            v_kind := 'released';  -- a claim put back untouched: the lease and attempt undone
        END IF;
        IF v_kind IS NULL THEN
            v_kind := CASE NEW.status
                WHEN 'SENDING'   THEN CASE OLD.status WHEN 'SENDING' THEN 'resent'
                                                         WHEN 'RECEIVED' THEN 'sending'
                                                         ELSE 'retried' END
                WHEN 'ISSUED'    THEN CASE WHEN v_actor = 'recovery'
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
        WHEN v_kind = 'released' THEN NULL
        WHEN NEW.status = 'ISSUED' THEN NEW.integrator_ref
        WHEN NEW.status IN ('ERROR', 'REJECTED', 'VOIDED', 'CANCELLED') THEN NEW.last_error
    END;
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, number, attempts, detail, actor, document_sha256)
    VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series, v_kind, v_from, NEW.status,
            NEW.number, NEW.attempts, v_detail, v_actor, NEW.document_sha256);
    RETURN NULL;
END $$;
