-- gapless schema, version 10: invoice_id is unique per tenant.
--
-- The producer's key of a document is (tenant, invoice_id): two tenants may use the same
-- invoice_id, and neither can learn of the other's (a POST of an id another tenant holds is
-- accepted for the caller's tenant) nor take it. Every existing row is kept: invoice_id was
-- unique across tenants, so it is unique per tenant already. The new constraint is added before
-- the old one is dropped (one transaction), so the key is never unguarded.
--
-- invoice_id comes first in the new index, so that it also finds every tenant's invoice of one
-- id (an operator's command that names the id alone, the functions below that keep their old
-- signature).
--
-- Functions: intake_invoice stores and claims by (tenant, invoice_id) (its signature already
-- took the tenant); claim_tenant_invoice and reserve_tenant_number are the claim and the pin by
-- (tenant, invoice_id); claim_invoice and reserve_number keep their signatures for the callers
-- of other stacks, for an id that one tenant holds, and refuse one that several tenants hold
-- (SQLSTATE 21000, naming them).
--
-- Forward-only (schema/README.md): no down file.

ALTER TABLE invoices
    ADD CONSTRAINT invoices_invoice_id_tenant_key UNIQUE (invoice_id, tenant);
ALTER TABLE invoices DROP CONSTRAINT invoices_invoice_id_key;


CREATE OR REPLACE FUNCTION intake_invoice(p_invoice_id text, p_tenant text, p_series text,
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

CREATE OR REPLACE FUNCTION claim_invoice(p_invoice_id text, p_lease_s double precision,
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

CREATE FUNCTION reserve_tenant_number(p_tenant text, p_invoice_id text,
                                      p_at timestamptz DEFAULT now(),
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
    SELECT * INTO inv FROM invoices i
     WHERE i.invoice_id = p_invoice_id AND i.tenant = p_tenant FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found',
            MESSAGE = 'no invoice with invoice_id ' || quote_literal(p_invoice_id)
            || ' for tenant ' || quote_literal(p_tenant);
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

CREATE OR REPLACE FUNCTION reserve_number(p_invoice_id text, p_at timestamptz DEFAULT now(),
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
