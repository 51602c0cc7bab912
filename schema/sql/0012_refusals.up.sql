-- gapless schema, version 12: what the worker refused before any number is kept, and in the feed.
--
-- A message the worker dead-letters before a number is sealed (routing, the issue-date window, the
-- UBL-TR checks, an unknown series) left no trace but the dead-letter queue: the API answered 404
-- for ever. `refusals` keeps the newest reason per (tenant, invoice_id), so GET /v1/invoices/{id}
-- answers REFUSED (an invoice of the same id, stored later, wins), and each refusal writes a
-- `refused` event into invoice_events, positioned in commit order like every other event. Such an
-- event has no invoice (invoice_pk NULL) and, when routing chose no series, no series.
--
-- Forward-only (schema/README.md): no down file.

CREATE TABLE IF NOT EXISTS refusals (
    tenant      text NOT NULL,
    invoice_id  text NOT NULL,
    series      text,
    reason      text NOT NULL,
    refused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, invoice_id)
);
CREATE INDEX IF NOT EXISTS refusals_invoice_id_idx ON refusals (invoice_id);

ALTER TABLE invoice_events ALTER COLUMN invoice_pk DROP NOT NULL;
ALTER TABLE invoice_events ALTER COLUMN series DROP NOT NULL;
