-- history.sql: the invoice's invariants and its history, enforced by triggers whoever the writer
-- is (worker, recovery, operator, plain SQL).
--
-- The guarantees:
--   * a sealed number is never changed or deleted (void it instead), and neither are its period,
--     its seal time, its issuer profile, its tenant and series; the document UUID never changes;
--   * status moves only along the state machine: RECEIVED -> SENDING | CANCELLED;
--     SENDING -> ISSUED | ERROR | REJECTED; ERROR -> SENDING | ISSUED | VOIDED;
--     REJECTED -> SENDING | VOIDED;
--   * every state change writes its event into invoice_events, in the same statement (an update
--     that fails takes its event with it);
--   * history is append-only: issuer profiles and sent documents are never updated, deleted or
--     truncated (invoice_events' own guards are in feed.sql, chain_records' in chain.sql).
--
-- BEFORE triggers run in name order: invoices_guard, invoices_history_update,
-- invoices_history_verdict (gib.sql), invoices_history_zchain (chain.sql). A refused change
-- never gets past the guard, and an update that also changes the status writes its state change
-- before GİB's verdict or the chain record.

-- Profiles, documents, events and chain records are history: a change is a new row, never an
-- edit. The guard of every append-only table.
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

CREATE TRIGGER invoice_documents_append_only
    BEFORE UPDATE OR DELETE ON invoice_documents
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER invoice_documents_no_truncate
    BEFORE TRUNCATE ON invoice_documents
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();

-- ---------------------------------------------------------------- invariants
CREATE FUNCTION gapless_invoice_guard() RETURNS trigger
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

CREATE TRIGGER invoices_guard
    BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_guard();

-- ---------------------------------------------------------------- history
-- Every state change writes its event. The event of an update is written by a BEFORE UPDATE
-- trigger that runs after invoices_guard: no after-trigger queue, no second fetch of the row. The
-- row is already locked and final when it runs (PostgreSQL locks it, and rechecks a concurrently
-- changed row, before it fires). A new invoice's event stays AFTER INSERT: INSERT ... ON CONFLICT
-- may end up inserting nothing. A fresh seal that also takes the lease writes 'reserved' then
-- 'sending' from one row update; a claim put back by recovery writes 'released', not 'resent'.
CREATE FUNCTION gapless_invoice_history() RETURNS trigger
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
            RETURN NEW;  -- bookkeeping only (payload fix, lease, document), no state change
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
    RETURN NEW;  -- BEFORE UPDATE: the row goes on unchanged (AFTER INSERT: ignored)
END $$;

CREATE TRIGGER invoices_history
    AFTER INSERT ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();
-- Runs after invoices_guard (BEFORE triggers run in name order).
CREATE TRIGGER invoices_history_update
    BEFORE UPDATE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();
