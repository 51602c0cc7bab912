-- gapless schema, version 15: the receiver's answer to a sent document.
--
-- A dispatch note is answered by its receiver (e-İrsaliye Yanıtı: received, short and rejected
-- quantities per line) and a TICARIFATURA invoice by KABUL or RED. Recovery asks the integrator's
-- status of each sent document, as it does for GİB's verdict, and records:
--
-- * answer — the answer as the API shows it: {"code", "at", "lines"} (lines for a note only);
-- * answer_status — 'answered', or 'unanswered' once the legal window passed without one (NULL:
--   not answered yet, or a document nobody answers).
--
-- One due time still drives the questions (gib_next_check_at): it stays set after GİB's final
-- verdict while an answer may come. So the verdict's history event is now written when the
-- verdict changes (gib_accepted / gib_refused once), or when recovery stops asking while GİB's
-- verdict is still pending (gib_unresolved once) — not again when the questions about the answer
-- end. The answer's event (answered, unanswered) has its own trigger, after the verdict's.
-- The status and the number never change.
--
-- Forward-only (schema/README.md): no down file.

ALTER TABLE invoices ADD COLUMN answer jsonb;
ALTER TABLE invoices ADD COLUMN answer_status text
    CONSTRAINT invoices_answer_status_kind CHECK (answer_status IN ('answered', 'unanswered'));

DROP TRIGGER invoices_history_verdict ON invoices;
CREATE TRIGGER invoices_history_verdict
    BEFORE UPDATE OF gib_status, gib_next_check_at ON invoices
    FOR EACH ROW WHEN (
        NEW.gib_status IS NOT NULL
        AND ((NEW.gib_status <> 'pending' AND NEW.gib_status IS DISTINCT FROM OLD.gib_status)
             OR (NEW.gib_status = 'pending' AND NEW.gib_next_check_at IS NULL
                 AND (OLD.gib_status IS DISTINCT FROM 'pending'
                      OR OLD.gib_next_check_at IS NOT NULL))))
    EXECUTE FUNCTION gapless_invoice_verdict();

CREATE FUNCTION gapless_invoice_answer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, number, attempts, detail, actor, document_sha256)
    VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series, NEW.answer_status,
            OLD.status, NEW.status, NEW.number, NEW.attempts,
            CASE NEW.answer_status WHEN 'answered' THEN NEW.answer->>'code'
                 ELSE 'no answer within the legal window' END,
            coalesce(nullif(current_setting('gapless.actor', true), ''), 'sql'),
            NEW.document_sha256);
    RETURN NEW;
END $$;

CREATE TRIGGER invoices_history_verdict_answer
    BEFORE UPDATE OF answer_status ON invoices
    FOR EACH ROW WHEN (NEW.answer_status IS NOT NULL
                       AND NEW.answer_status IS DISTINCT FROM OLD.answer_status)
    EXECUTE FUNCTION gapless_invoice_answer();
