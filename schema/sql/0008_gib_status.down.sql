DROP TRIGGER invoices_history_verdict ON invoices;
DROP FUNCTION gapless_invoice_verdict();
DROP INDEX invoices_gib_due_idx;
DROP INDEX invoices_gib_unasked_idx;
ALTER TABLE invoices
    DROP CONSTRAINT invoices_gib_status_issued,
    DROP COLUMN gib_next_check_at,
    DROP COLUMN gib_checked_at,
    DROP COLUMN gib_detail,
    DROP COLUMN gib_status;
