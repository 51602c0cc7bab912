-- gapless schema, version 3: the worker's claim (step 2 of the flow) as one SQL function.
--
-- claim_invoice does in one statement what took four round trips (lock timeout, lock the row,
-- reserve, take the lease): the counter row is then locked for one statement and the COMMIT that
-- follows, never across a client round trip in between.
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

-- claim_invoice: lock the invoice (by producer key) and decide.
--   final  — ISSUED, CANCELLED or VOIDED: nothing to do;
--   parked — ERROR or REJECTED: recovery or an operator owns it;
--   busy   — SENDING under a lease younger than p_lease_s: its owner finishes it;
--   send   — otherwise: pin a number if it has none (reserve_number), take the sending lease
--            (SENDING, sending_since = now(), attempts + 1); the caller commits at once, sends.
-- No row: the invoice does not exist. Locks: the invoice row and, for a fresh reservation, its
-- counter row, until the caller's transaction ends. p_lock_timeout_ms bounds every lock wait.
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
