-- gapless schema, version 13: recipient answers are cached per integrator account.
--
-- With GAPLESS_INTEGRATORS_FILE, tenants may use different integrator accounts — a test account
-- beside a live one, or two integrators — and each answers "is this tax id an e-Fatura user, with
-- which aliases?" from its own registry. The cache is keyed by (account, tax_id): '' is the
-- global account's (every row cached before this version), another account's rows carry its
-- name. Forward-only (schema/README.md): no down file.

ALTER TABLE recipients ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE recipients DROP CONSTRAINT recipients_pkey;
ALTER TABLE recipients ADD CONSTRAINT recipients_pkey PRIMARY KEY (account, tax_id);
