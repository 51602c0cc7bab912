-- gapless schema, version 2: harden the commit-ordered feed (invoice_events.sequence_id).
--
-- 1. Visible must mean durable. sequence_id N is handed out under the commit lock, and the lock
--    is released only after the commit is visible, so a poller that sees N sees every committed
--    id below N. With synchronous_commit = off, though, a commit is visible before its WAL (and
--    the sequence's WAL) is flushed: after a crash the transaction is gone, the sequence resumes
--    below N, and the ids a poller already passed are handed out again and skipped for ever.
--    An event-writing transaction therefore always flushes its commit locally ('off' becomes
--    'local'; stronger settings such as remote_apply are left alone). This costs nothing at the
--    default (synchronous_commit = on), and numbers need it anyway: a reservation that a crash
--    could undo after the integrator saw it would be handed out twice.
-- 2. History is append-only: TRUNCATE skipped the row-level guard; now it is refused too.
--
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

CREATE OR REPLACE FUNCTION gapless_event_sequence() RETURNS trigger
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

CREATE FUNCTION gapless_event_no_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

CREATE TRIGGER invoice_events_no_truncate
    BEFORE TRUNCATE ON invoice_events
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_event_no_truncate();
