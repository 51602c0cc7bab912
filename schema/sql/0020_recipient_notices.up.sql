-- gapless schema, version 20: the recipient cache announces its changes.
--
-- Routing reads a customer's cached recipient answer before every routed seal: one statement
-- per message. A worker now keeps the answers it read in memory and drops one when the table
-- says it changed (LISTEN gapless_recipients); the table announces every change, whoever makes
-- it, through a trigger.
--
-- Forward-only (schema/README.md): no down file.
--
-- The recipient cache's invalidations. Every change of a cached answer (a row of recipients
-- inserted, updated or deleted, whoever writes it: a worker, an operator, another stack) is
-- announced on channel gapless_recipients at its commit, payload account || E'\t' || tax_id,
-- and a TRUNCATE announces '*' (every answer). A worker that keeps answers in memory listens
-- (gapless/ledger/notices.py) and drops what changed; PostgreSQL delivers a notification only
-- after its transaction commits, and to every session listening then.
CREATE FUNCTION gapless_recipient_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('gapless_recipients', '*');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_notify('gapless_recipients', OLD.account || E'\t' || OLD.tax_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_notify('gapless_recipients', NEW.account || E'\t' || NEW.tax_id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER recipients_changed AFTER INSERT OR UPDATE OR DELETE ON recipients
    FOR EACH ROW EXECUTE FUNCTION gapless_recipient_changed();
CREATE TRIGGER recipients_truncated AFTER TRUNCATE ON recipients
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_recipient_changed();
