-- Undo schema version 5: positions given at commit again, under the commit lock.

DROP TRIGGER IF EXISTS number_counters_durable_commit ON number_counters;
DROP FUNCTION IF EXISTS gapless_durable_commit();
DROP FUNCTION IF EXISTS gapless_feed_assign(integer);
DROP INDEX IF EXISTS invoice_events_unpositioned_idx;
DROP INDEX IF EXISTS invoice_events_tenant_sequence_idx;
CREATE INDEX invoice_events_tenant_sequence_idx ON invoice_events (tenant, sequence_id);
DROP INDEX IF EXISTS invoice_events_sequence_id_key;
ALTER TABLE invoice_events ADD CONSTRAINT invoice_events_sequence_id_key UNIQUE (sequence_id);
DROP TABLE IF EXISTS invoice_events_feed;

-- Events committed under version 5 and never read by the feed get their positions now, so the
-- old sequence can continue above every position given.
CREATE SEQUENCE invoice_events_sequence_id_seq;
CREATE TABLE invoice_events_commit_lock ();

CREATE OR REPLACE FUNCTION gapless_event_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
       AND (to_jsonb(NEW) - 'sequence_id') = (to_jsonb(OLD) - 'sequence_id') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

WITH top AS (
    SELECT coalesce(max(sequence_id), 0) AS last FROM invoice_events
), batch AS (
    SELECT id, row_number() OVER (ORDER BY id) AS n
      FROM invoice_events WHERE sequence_id IS NULL
)
UPDATE invoice_events e SET sequence_id = top.last + batch.n
  FROM top, batch WHERE e.id = batch.id;
SELECT setval('invoice_events_sequence_id_seq',
              coalesce((SELECT max(sequence_id) FROM invoice_events), 0) + 1, false);

CREATE FUNCTION gapless_event_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Held from here until the transaction's commit is visible; released by the commit.
    LOCK TABLE invoice_events_commit_lock IN EXCLUSIVE MODE;
    -- Read by the commit itself, which comes after this deferred trigger (SET LOCAL scope).
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    UPDATE invoice_events SET sequence_id = nextval('invoice_events_sequence_id_seq')
     WHERE id = NEW.id;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER invoice_events_sequence_trigger
    AFTER INSERT ON invoice_events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION gapless_event_sequence();
