DROP FUNCTION IF EXISTS claim_invoice(text, double precision, integer, timestamptz);
