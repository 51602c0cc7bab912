-- gib.sql: GİB's verdict after the integrator accepted a document, in the invoice's history.
-- Followed by gapless recovery until it is final (accepted or refused) or recovery gives up
-- (still pending after GAPLESS_GIB_POLL_GIVE_UP_S). The invoice stays ISSUED whatever GİB says
-- (invoices_gib_status_issued, tables.sql): a refusal after acceptance is an operator's matter (a
-- new invoice or a return), never a resend, and the number stays accounted for.
--
-- The columns (tables.sql): gib_status NULL not followed (yet), pending, accepted, refused;
-- gib_next_check_at when the next question is due (NULL: none — a final verdict, recovery gave
-- up, or never asked); a claim sets it to the claim's lease, so a recovery that dies
-- mid-question is asked again after it.
--
-- The history of the verdict: gib_accepted / gib_refused when a final verdict is recorded,
-- gib_unresolved when recovery stops asking with the document still pending. Its own trigger
-- whose WHEN clause is the test, so the issuing path's updates (which never name these columns)
-- call nothing; it runs after invoices_history_update (BEFORE triggers run in name order), so
-- an update that also changed the status writes its state change first.

CREATE FUNCTION gapless_invoice_verdict() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, number, attempts, detail, actor, document_sha256)
    VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series,
            CASE NEW.gib_status WHEN 'pending' THEN 'gib_unresolved'
                                ELSE 'gib_' || NEW.gib_status END,
            OLD.status, NEW.status, NEW.number, NEW.attempts, NEW.gib_detail,
            coalesce(nullif(current_setting('gapless.actor', true), ''), 'sql'),
            NEW.document_sha256);
    RETURN NEW;
END $$;

CREATE TRIGGER invoices_history_verdict
    BEFORE UPDATE OF gib_status, gib_next_check_at ON invoices
    FOR EACH ROW WHEN (
        NEW.gib_status IS NOT NULL
        AND ((NEW.gib_status <> 'pending' AND NEW.gib_status IS DISTINCT FROM OLD.gib_status)
             OR (NEW.gib_status = 'pending' AND NEW.gib_next_check_at IS NULL
                 AND (OLD.gib_status IS DISTINCT FROM 'pending'
                      OR OLD.gib_next_check_at IS NOT NULL))))
    EXECUTE FUNCTION gapless_invoice_verdict();

-- The receiver's answer (a dispatch note's ReceiptAdvice, a TICARIFATURA invoice's KABUL/RED),
-- learnt by the same questions: gib_next_check_at stays set after a final verdict while an
-- answer may still come (until the legal window closes), which is why the verdict's trigger
-- above fires on a change of the verdict (and on giving up while pending), never again when the
-- questions end. The answer's own event — answered (detail: the code) or unanswered — is written
-- when answer_status is set, after the verdict's (BEFORE triggers run in name order). The status
-- and the number never change.
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
