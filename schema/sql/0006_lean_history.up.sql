-- gapless schema, version 6: the same history, written for less.
--
-- Every state change still writes its event and every event still gets its feed position from
-- gapless_feed_assign() (version 5); what changes is what each event costs the writer and the
-- position-giver:
--
-- 1. Ids by plain nextval. The id sequences now hand out cluster-encoded values themselves: their
--    range is (cluster_id << 48) + 1 .. (cluster_id << 48) + 2^48 - 1, set by gapless_rebase_ids()
--    whenever gapless_config's cluster id is written (gapless migrate inserts it; rebasing on
--    cluster 0 gives the sequences of local parts back, which is how version 5 is restored). An insert no
--    longer calls a PL/pgSQL function that reads gapless_config. gapless_next_id() stays for SQL
--    callers and gives the same value ((c << 48) | ((c << 48) | local) is (c << 48) | local).
-- 2. The event of an update is written by a BEFORE UPDATE trigger, the last one to run (after
--    invoices_guard): no after-trigger queue, no second fetch of the row. The row is already
--    locked and final when it runs (PostgreSQL locks it, and rechecks a concurrently changed row,
--    before it fires), and an update that fails later takes its event with it (same statement).
--    A new invoice's event stays AFTER INSERT: INSERT ... ON CONFLICT may end up inserting nothing.
-- 3. The append-only guard is asked only when an update is not the one allowed change (the
--    position, given once, by gapless_feed_assign()): that test is the trigger's WHEN clause, so
--    positioning an event no longer calls PL/pgSQL, and what the trigger calls only refuses. The
--    history's guards (update, delete, truncate) are then the one every append-only table has,
--    gapless_append_only() (version 4), in place of gapless_event_immutable() and
--    gapless_event_no_truncate().
--
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

-- ---------------------------------------------------------------- 1. ids by plain nextval
-- gapless_rebase_ids: the id sequences hand out ids of cluster p_cluster from their next local
-- part on (the ids already given keep theirs, whatever cluster made them).
CREATE FUNCTION gapless_rebase_ids(p_cluster integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_seq regclass;
    v_last bigint;
    v_called boolean;
    v_next bigint;
    v_base bigint := p_cluster::bigint << 48;
BEGIN
    FOREACH v_seq IN ARRAY ARRAY['invoices_local_seq', 'invoice_events_local_seq']::regclass[] LOOP
        EXECUTE 'SELECT last_value, is_called FROM ' || v_seq::text INTO v_last, v_called;
        v_next := (v_last & 281474976710655) + CASE WHEN v_called THEN 1 ELSE 0 END;
        EXECUTE 'ALTER SEQUENCE ' || v_seq::text
             || ' MINVALUE ' || (v_base + 1) || ' MAXVALUE ' || (v_base + 281474976710655)
             || ' START WITH ' || (v_base + 1) || ' RESTART WITH ' || (v_base + v_next);
    END LOOP;
END $$;

CREATE FUNCTION gapless_config_rebase_ids() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gapless_rebase_ids(NEW.cluster_id);
    RETURN NULL;
END $$;

CREATE TRIGGER gapless_config_rebase_ids
    AFTER INSERT OR UPDATE OF cluster_id ON gapless_config
    FOR EACH ROW EXECUTE FUNCTION gapless_config_rebase_ids();

-- A database migrated before this version: rebase now (no row yet: gapless migrate inserts it).
UPDATE gapless_config SET cluster_id = cluster_id;

ALTER TABLE invoices ALTER COLUMN id SET DEFAULT nextval('invoices_local_seq');
ALTER TABLE invoice_events ALTER COLUMN id SET DEFAULT nextval('invoice_events_local_seq');

-- ---------------------------------------------------------------- 2. the history trigger
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

DROP TRIGGER invoices_history ON invoices;
CREATE TRIGGER invoices_history
    AFTER INSERT ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();
-- Runs after invoices_guard (BEFORE triggers run in name order).
CREATE TRIGGER invoices_history_update
    BEFORE UPDATE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();

-- ---------------------------------------------------------------- 3. the append-only guard
DROP TRIGGER invoice_events_append_only ON invoice_events;
DROP FUNCTION gapless_event_immutable();
DROP TRIGGER invoice_events_no_truncate ON invoice_events;
DROP FUNCTION gapless_event_no_truncate();
CREATE TRIGGER invoice_events_append_only
    BEFORE DELETE ON invoice_events
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER invoice_events_no_truncate
    BEFORE TRUNCATE ON invoice_events
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();
-- Refuses every update but the position, given once, by gapless_feed_assign() (which sets
-- gapless.feed_assigning for its own statement); the other columns are compared too, so nothing
-- can ride along.
CREATE TRIGGER invoice_events_positioned_once
    BEFORE UPDATE ON invoice_events
    FOR EACH ROW WHEN (NOT (
        OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
        AND current_setting('gapless.feed_assigning', true) IS NOT DISTINCT FROM 'on'
        AND (NEW.id, NEW.invoice_pk, NEW.invoice_id, NEW.tenant, NEW.series, NEW.kind,
             NEW.from_status, NEW.to_status, NEW.number, NEW.attempts, NEW.detail, NEW.actor,
             NEW.created_at, NEW.document_sha256)
            IS NOT DISTINCT FROM
            (OLD.id, OLD.invoice_pk, OLD.invoice_id, OLD.tenant, OLD.series, OLD.kind,
             OLD.from_status, OLD.to_status, OLD.number, OLD.attempts, OLD.detail, OLD.actor,
             OLD.created_at, OLD.document_sha256)))
    EXECUTE FUNCTION gapless_append_only();
