-- gapless schema, version 23: one index fewer on invoices.
--
-- invoices_tenant_series_status_idx (tenant, series, status) dates from 0001, when recovery
-- found its work by status. Recovery's scans have had partial indexes of their own since
-- (invoices_sending_idx, invoices_error_due_idx), the numbered invoices of a series are found
-- through invoices_counter_no_key (tenant, series, period_key, reserved_no), and the counts per
-- series and status (`gapless status`, `gapless audit`) read every row of the series they
-- count. No query needs it any more, and every insert and every status change of an invoice
-- (an update that cannot be HOT) wrote an entry into it.
--
-- Forward-only (schema/README.md): no down file.

DROP INDEX IF EXISTS invoices_tenant_series_status_idx;
