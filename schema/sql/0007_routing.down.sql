DROP INDEX invoices_wrong_channel_idx;
DROP TABLE recipients;
DROP INDEX series_default_per_channel;
ALTER TABLE series DROP COLUMN is_default, DROP COLUMN channel;
