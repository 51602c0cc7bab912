-- Undo schema version 6: the append-only guard on every update, the history of an update
-- AFTER UPDATE, ids through gapless_next_id() from sequences of local parts.

DROP TRIGGER IF EXISTS invoice_events_positioned_once ON invoice_events;
DROP TRIGGER IF EXISTS invoice_events_append_only ON invoice_events;
DROP TRIGGER IF EXISTS invoice_events_no_truncate ON invoice_events;
CREATE FUNCTION gapless_event_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
       AND current_setting('gapless.feed_assigning', true) = 'on'
       AND (NEW.id, NEW.invoice_pk, NEW.invoice_id, NEW.tenant, NEW.series, NEW.kind,
            NEW.from_status, NEW.to_status, NEW.number, NEW.attempts, NEW.detail, NEW.actor,
            NEW.created_at, NEW.document_sha256)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.invoice_pk, OLD.invoice_id, OLD.tenant, OLD.series, OLD.kind,
            OLD.from_status, OLD.to_status, OLD.number, OLD.attempts, OLD.detail, OLD.actor,
            OLD.created_at, OLD.document_sha256) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

CREATE TRIGGER invoice_events_append_only
    BEFORE UPDATE OR DELETE ON invoice_events
    FOR EACH ROW EXECUTE FUNCTION gapless_event_immutable();

CREATE FUNCTION gapless_event_no_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

CREATE TRIGGER invoice_events_no_truncate
    BEFORE TRUNCATE ON invoice_events
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_event_no_truncate();

DROP TRIGGER IF EXISTS invoices_history_update ON invoices;
DROP TRIGGER IF EXISTS invoices_history ON invoices;
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

CREATE TRIGGER invoices_history
    AFTER INSERT OR UPDATE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();

ALTER TABLE invoices ALTER COLUMN id SET DEFAULT gapless_next_id('invoices_local_seq');
ALTER TABLE invoice_events ALTER COLUMN id SET DEFAULT gapless_next_id('invoice_events_local_seq');
-- Cluster 0's range is the sequences of local parts that version 5 had.
SELECT gapless_rebase_ids(0);
DROP TRIGGER IF EXISTS gapless_config_rebase_ids ON gapless_config;
DROP FUNCTION IF EXISTS gapless_config_rebase_ids();
DROP FUNCTION IF EXISTS gapless_rebase_ids(integer);
