DROP TRIGGER IF EXISTS invoice_events_no_truncate ON invoice_events;
DROP FUNCTION IF EXISTS gapless_event_no_truncate();

CREATE OR REPLACE FUNCTION gapless_event_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Held from here until the transaction's commit is visible; released by the commit.
    LOCK TABLE invoice_events_commit_lock IN EXCLUSIVE MODE;
    UPDATE invoice_events SET sequence_id = nextval('invoice_events_sequence_id_seq')
     WHERE id = NEW.id;
    RETURN NULL;
END $$;
