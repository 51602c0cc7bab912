-- Routing before the seal: which documents a series numbers (its channel), the tenant's default
-- series per channel, and the integrator's recipient answers shared by every worker.

ALTER TABLE series
    ADD COLUMN channel text NOT NULL DEFAULT 'any'
        CONSTRAINT series_channel_kind CHECK (channel IN ('any', 'efatura', 'earsiv')),
    ADD COLUMN is_default boolean NOT NULL DEFAULT false;

-- At most one default series per tenant and channel (used when a message names no series).
CREATE UNIQUE INDEX series_default_per_channel ON series (tenant, channel) WHERE is_default;

-- The integrator's answer to "is this tax id an e-Fatura user, with which invoice aliases?",
-- reused for GAPLESS_RECIPIENT_TTL_S by every worker; never read or written inside the
-- transaction that seals a number.
CREATE TABLE recipients (
    tax_id      text PRIMARY KEY,
    registered  boolean NOT NULL,
    aliases     text[] NOT NULL DEFAULT '{}',
    checked_at  timestamptz NOT NULL DEFAULT now()
);

-- Invoices the integrator refused for their channel, waiting for the channel correction
-- (gapless/correction.py); recovery looks for them every round, so the question must not scan.
CREATE INDEX invoices_wrong_channel_idx ON invoices (id)
    WHERE status = 'REJECTED' AND last_error LIKE 'WRONG CHANNEL: %';
