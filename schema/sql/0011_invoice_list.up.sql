-- gapless schema, version 11: `gapless invoice list` reads the newest documents by an index.
--
-- The listing is ordered newest first, by (created_at, id), and filtered by tenant, status and
-- `--since`: a backward scan of this index reads the newest rows first and stops at the listing's
-- limit, and a `--since` bound is a range of it, so no listing sorts the table. (ERROR and SENDING
-- listings may also take their partial indexes, and sort the few rows they hold.)
--
-- Building the index locks writes to invoices for as long as it takes. On a large table, build it
-- first without that lock, then migrate (this statement then finds it and does nothing):
--     CREATE INDEX CONCURRENTLY IF NOT EXISTS invoices_created_idx ON invoices (created_at, id);
--
-- Forward-only (schema/README.md): no down file.

CREATE INDEX IF NOT EXISTS invoices_created_idx ON invoices (created_at, id);
