-- intake.sql: the claim. The worker's steps 1 and 2 (store the draft, lock it, decide, seal if
-- needed, take the sending lease) in one statement, intake_invoice; the same claim for a stored
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

-- intake_invoice: the worker's steps 1 and 2 in one statement. Stores the draft for the
-- producer key, (tenant, invoice_id) (a duplicate maps to the same row; the first payload stays)
-- with its message's hash, locks it, and decides with gapless_take — expecting the issuer profile
-- p_profile_version (NULL: none) for a fresh seal. 'conflict': the key already names an invoice
-- of another series of the tenant (nothing changed); another tenant's invoice of the same
-- invoice_id is never touched nor seen. The payload is returned only for a row that
-- existed before (the caller has its own otherwise). Locks: the invoice row and, for a seal, its
-- counter row, until this statement's transaction ends — run it on its own (autocommit) and the
-- lock lasts one statement. p_lock_timeout_ms bounds every lock wait (SQLSTATE 55P03 when it
-- expires; nothing consumed).
CREATE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
                               p_priority smallint, p_payload jsonb, p_lease_s double precision,
                               p_lock_timeout_ms integer DEFAULT NULL,
                               p_profile_version integer DEFAULT NULL,
                               p_at timestamptz DEFAULT NULL)
RETURNS SETOF gapless_claim
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
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
    ON CONFLICT (invoice_id, tenant) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NOT NULL THEN
        v_created := true;
    ELSE
        SELECT i.id, i.series INTO v_id, v_series
          FROM invoices i WHERE i.invoice_id = p_invoice_id AND i.tenant = p_tenant FOR UPDATE;
        IF v_series <> p_series THEN
            RETURN NEXT gapless_claim_row('conflict', false, v_id, false);
            RETURN;
        END IF;
    END IF;
    -- Two statements, so that the claim row is read after gapless_take's update.
    v_kind := gapless_take(v_id, p_lease_s, coalesce(p_at, now()), true, p_profile_version);
    RETURN NEXT gapless_claim_row(v_kind, v_created, v_id, NOT v_created);
END $$;

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
