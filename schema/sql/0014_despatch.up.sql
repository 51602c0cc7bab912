-- gapless schema, version 14: dispatch notes (e-İrsaliye) are numbered documents too.
--
-- * series.channel takes `edespatch`: a series that numbers dispatch notes (GİB's 16-character
--   form, yearly, like an invoice series), never invoices.
-- * invoices.document says which kind of document the row is, `invoice` or `despatch`, from the
--   message as published (`"document": "despatch"`; absent means an invoice). A generated column:
--   every writer, gapless or another stack's SQL, gets it right without naming it.
-- * recipients keeps the integrator's e-İrsaliye answer beside the e-Fatura one (separate
--   aliases). Rows cached before this version lack it, so they are dropped: the cache refills on
--   the next check of each tax id.
--
-- Forward-only (schema/README.md): no down file.

ALTER TABLE series DROP CONSTRAINT series_channel_kind;
ALTER TABLE series ADD CONSTRAINT series_channel_kind
    CHECK (channel IN ('any', 'efatura', 'earsiv', 'edespatch'));

ALTER TABLE invoices ADD COLUMN document text NOT NULL
    GENERATED ALWAYS AS (CASE WHEN payload->>'document' = 'despatch' THEN 'despatch'
                              ELSE 'invoice' END) STORED;

DELETE FROM recipients;
ALTER TABLE recipients ADD COLUMN despatch_registered boolean NOT NULL DEFAULT false;
ALTER TABLE recipients ADD COLUMN despatch_aliases text[] NOT NULL DEFAULT '{}';
