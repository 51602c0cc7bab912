"""invoice_id unique per tenant: the constraint invoices_invoice_id_tenant_key UNIQUE (invoice_id,
tenant) replaces invoices_invoice_id_key, every row kept; intake_invoice keyed by (tenant,
invoice_id); claim_tenant_invoice and reserve_tenant_number; claim_invoice and reserve_number
refuse an id that several tenants hold. Forward-only.

Created 2026-11-26; the SQL is schema/sql/0010_tenant_invoice_ids.up.sql.
"""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "0010", "0009"
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("0010_tenant_invoice_ids")
