-- tables.sql: every table, sequence, index and constraint of the live schema, and the one row
-- the feed needs. One function is defined here, the invoice row's CHECK
-- (gapless_invoice_consistent), which calls no other; no other function is called: column
-- defaults are plain nextval(), so the other files may follow in any order that creates a
-- function before a trigger or a SQL-language function that names it (schema/current/README.md
-- gives the order).
--
-- Guarantees kept by constraints alone, whatever writes the rows:
--   * I1: a counter value and a printed number belong to one invoice (invoices_counter_no_key,
--     invoices_tenant_number_key); two series of a tenant never share a prefix;
--   * a producer's key names one invoice of its tenant (invoices_invoice_id_tenant_key);
--   * a number is pinned whole or not at all (invoices_number_pinned), and only an invoice that
--     holds one can be past RECEIVED (invoices_numbered_status);
--   * counters only count up from 1 (number_counters_positive), one row per period.
-- The rules that need the row's previous state (a number never changes, the state machine,
-- append-only history) are triggers: history.sql, feed.sql, chain.sql.

-- ---------------------------------------------------------------- cluster-encoded ids
-- The cluster id of this database; gapless migrate writes it, and its trigger (ids.sql) rebases
-- the id sequences on it.
CREATE TABLE gapless_config (
    singleton   boolean PRIMARY KEY DEFAULT true CONSTRAINT gapless_config_singleton CHECK (singleton),
    cluster_id  integer NOT NULL CONSTRAINT gapless_config_cluster_range CHECK (cluster_id BETWEEN 0 AND 32767),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The id sequences hand out (cluster_id << 48) + local part by plain nextval: their range is
-- set by gapless_rebase_ids() (ids.sql) whenever the cluster id is written. As created here they
-- are cluster 0's: local parts stay below 2^48, so any cluster's ids fit a positive bigint.
CREATE SEQUENCE invoices_local_seq MAXVALUE 281474976710655;
CREATE SEQUENCE invoice_events_local_seq MAXVALUE 281474976710655;

-- ---------------------------------------------------------------- series and counters
CREATE TABLE series (
    tenant      text NOT NULL,
    code        text NOT NULL,
    prefix      text NOT NULL,
    reset       text NOT NULL DEFAULT 'yearly'
                CONSTRAINT series_reset_kind CHECK (reset IN ('never', 'yearly', 'monthly', 'daily')),
    tz          text NOT NULL DEFAULT 'Europe/Istanbul',
    width       integer NOT NULL DEFAULT 9 CONSTRAINT series_width_range CHECK (width BETWEEN 1 AND 18),
    format      text NOT NULL DEFAULT '{prefix}{yyyy}{seq}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- Which documents the series numbers (routing chooses the channel before the seal).
    channel     text NOT NULL DEFAULT 'any',
    is_default  boolean NOT NULL DEFAULT false,
    CONSTRAINT series_pkey PRIMARY KEY (tenant, code),
    -- Two series of one tenant with one prefix would print the same numbers.
    CONSTRAINT series_tenant_prefix_key UNIQUE (tenant, prefix),
    -- edespatch: dispatch notes (and only they) are numbered in it.
    CONSTRAINT series_channel_kind CHECK (channel IN ('any', 'efatura', 'earsiv', 'edespatch'))
);

-- At most one default series per tenant and channel (used when a message names no series).
CREATE UNIQUE INDEX series_default_per_channel ON series (tenant, channel) WHERE is_default;

-- One row per (tenant, series, period), created by the period's first seal (numbering.sql): the
-- reset per day/month/year needs no cron job and has no midnight race. last_at is the last seal's
-- time (seal times never go backwards along a counter); chain_seq and chain_hash are the head of
-- the counter's tamper-evident chain (chain.sql).
CREATE TABLE number_counters (
    tenant      text NOT NULL,
    series      text NOT NULL,
    period_key  text NOT NULL,
    last_no     bigint NOT NULL CONSTRAINT number_counters_positive CHECK (last_no > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    last_at     timestamptz,
    chain_seq   bigint NOT NULL DEFAULT 0,
    chain_hash  text,
    CONSTRAINT number_counters_pkey PRIMARY KEY (tenant, series, period_key),
    CONSTRAINT number_counters_series_fkey FOREIGN KEY (tenant, series)
        REFERENCES series (tenant, code)
);

-- ---------------------------------------------------------------- issuer profiles
-- The supplier party of every UBL-TR document, versioned and append-only (history.sql): a change
-- is a new version, never an edit. The version in force when a number is sealed is pinned on the
-- invoice (invoices.profile_version; NULL: the tenant had none, the document is the message's JSON).
CREATE TABLE tenant_profiles (
    tenant       text NOT NULL,
    version      integer NOT NULL CONSTRAINT tenant_profiles_version_positive CHECK (version > 0),
    tax_id       text NOT NULL CONSTRAINT tenant_profiles_tax_id_digits
                 CHECK (tax_id ~ '^[0-9]{10,11}$'),
    name         text NOT NULL,
    tax_office   text NOT NULL,
    street       text NOT NULL,
    district     text NOT NULL,
    city         text NOT NULL,
    country      text NOT NULL DEFAULT 'Türkiye',
    postal_zone  text,
    email        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenant_profiles_pkey PRIMARY KEY (tenant, version)
);

-- gapless_invoice_consistent: the rules of one invoice row, the CHECK invoices_consistent.
-- They were six CHECK constraints, and PostgreSQL reads a table's CHECK expressions back from
-- their stored text at every INSERT or UPDATE statement, not once per session. One PL/pgSQL
-- call (compiled once per session) keeps the same rules, and names the rule a row breaks as its
-- constraint with the same SQLSTATE (23514) and message; a reservation costs the backend about
-- a tenth fewer instructions (docs/benchmarks.md, "The seal's own cost").
CREATE FUNCTION gapless_invoice_consistent(p_status text, p_reserved_no bigint, p_number text,
                                           p_period_key text, p_gib_status text,
                                           p_answer_status text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_failed text;
BEGIN
    -- Each rule is the constraint it replaced, word for word, and passes when it is true or
    -- NULL as a CHECK does (NOT NULL is NULL, and IF takes NULL for false). In the order
    -- PostgreSQL checked them: by name.
    IF NOT (p_answer_status IN ('answered', 'unanswered')) THEN
        v_failed := 'invoices_answer_status_kind';
    ELSIF NOT (p_gib_status IS NULL OR p_status = 'ISSUED') THEN
        v_failed := 'invoices_gib_status_issued';
    ELSIF NOT (p_gib_status IN ('pending', 'accepted', 'refused')) THEN
        v_failed := 'invoices_gib_status_kind';
    ELSIF NOT ((p_reserved_no IS NULL AND p_number IS NULL AND p_period_key IS NULL)
               OR (p_reserved_no > 0 AND p_number IS NOT NULL AND p_period_key IS NOT NULL)) THEN
        v_failed := 'invoices_number_pinned';
    ELSIF NOT (p_reserved_no IS NOT NULL OR p_status IN ('RECEIVED', 'CANCELLED')) THEN
        v_failed := 'invoices_numbered_status';
    ELSIF NOT (p_status IN ('RECEIVED', 'SENDING', 'ISSUED', 'ERROR', 'REJECTED', 'CANCELLED',
                            'VOIDED')) THEN
        v_failed := 'invoices_status_kind';
    ELSE
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = v_failed,
        TABLE = 'invoices',
        MESSAGE = 'new row for relation "invoices" violates check constraint "' || v_failed || '"';
END $$;

-- ---------------------------------------------------------------- invoices
-- Every numbered document (invoices and dispatch notes alike). The number, its period, its seal
-- time and the issuer profile are pinned together by the seal (numbering.sql) and never change
-- after (history.sql). uuid (the ETTN) is fixed when the draft is stored. message_sha256 is the
-- SHA-256 of the stored message's canonical JSON, computed when the message is stored
-- (intake_invoice) or replaced (chain.sql), so that the seal only reads it; NULL for a row a SQL
-- client inserted itself (the seal computes it then). gib_status: NULL not followed (yet);
-- pending, accepted, refused; gib_next_check_at: when the next question to GİB is due (gib.sql).
CREATE TABLE invoices (
    id                 bigint PRIMARY KEY DEFAULT nextval('invoices_local_seq'),
    invoice_id         text NOT NULL,
    tenant             text NOT NULL,
    series             text NOT NULL,
    status             text NOT NULL DEFAULT 'RECEIVED',
    priority           smallint NOT NULL DEFAULT 1,
    period_key         text,
    reserved_no        bigint,
    number             text,
    reserved_at        timestamptz,
    payload            jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempts           integer NOT NULL DEFAULT 0,
    sending_since      timestamptz,
    next_attempt_at    timestamptz,
    last_error         text,
    integrator_ref     text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    issued_at          timestamptz,
    uuid               uuid NOT NULL DEFAULT gen_random_uuid() CONSTRAINT invoices_uuid_key UNIQUE,
    profile_version    integer,
    document_sha256    text,
    gib_status         text,
    gib_detail         text,
    gib_checked_at     timestamptz,
    gib_next_check_at  timestamptz,
    message_sha256     text,
    -- The kind of document: `despatch` for a dispatch note (the message says
    -- "document": "despatch"), else `invoice`. Generated, so no writer can get it wrong.
    document           text NOT NULL GENERATED ALWAYS AS (
                           CASE WHEN payload->>'document' = 'despatch' THEN 'despatch'
                                ELSE 'invoice' END) STORED,
    -- The receiver's answer (gib.sql): {"code", "at", "lines"} as the API shows it, and
    -- answered / unanswered (the legal window passed); NULL: not (yet) answered.
    answer             jsonb,
    answer_status      text,
    CONSTRAINT invoices_series_fkey FOREIGN KEY (tenant, series) REFERENCES series (tenant, code),
    -- The producer's key is unique per tenant: two tenants may use the same invoice_id, and
    -- neither can learn of or take the other's. invoice_id comes first so that the index also
    -- finds every tenant's invoice of an id (an operator's command names the id alone).
    CONSTRAINT invoices_invoice_id_tenant_key UNIQUE (invoice_id, tenant),
    -- The row's rules, one CHECK (gapless_invoice_consistent, above): the status is a known one;
    -- a number is pinned whole or not at all (invoices_number_pinned), and only an invoice that
    -- holds one can be past RECEIVED (invoices_numbered_status); GİB's verdict follows an
    -- accepted document, so the invoice stays ISSUED whatever GİB says
    -- (invoices_gib_status_issued); the verdict and the answer are known ones.
    CONSTRAINT invoices_consistent CHECK (gapless_invoice_consistent(
        status, reserved_no, number, period_key, gib_status, answer_status))
);

-- I1 in the database itself: a counter value, and a printed number, belong to one invoice.
CREATE UNIQUE INDEX invoices_counter_no_key ON invoices (tenant, series, period_key, reserved_no)
    WHERE reserved_no IS NOT NULL;
CREATE UNIQUE INDEX invoices_tenant_number_key ON invoices (tenant, number)
    WHERE number IS NOT NULL;
-- Recovery's two scans stay index-only-small however large the table grows.
CREATE INDEX invoices_sending_idx ON invoices (sending_since) WHERE status = 'SENDING';
CREATE INDEX invoices_error_due_idx ON invoices (next_attempt_at) WHERE status = 'ERROR';
-- `gapless invoice list`: the newest documents first (a backward scan, stopped at the limit; a
-- `--since` bound is a range of it), never a sort of the table.
CREATE INDEX invoices_created_idx ON invoices (created_at, id);
-- Invoices the integrator refused for their channel, waiting for the channel correction
-- (gapless/issuing/correction.py); recovery looks for them every round, so the question must
-- not scan.
CREATE INDEX invoices_wrong_channel_idx ON invoices (id)
    WHERE status = 'REJECTED' AND last_error LIKE 'WRONG CHANNEL: %';
-- The two kinds of due question to GİB, each a partial index that holds only what it is for:
-- ISSUED documents never asked (by when they were issued), and those with a question due.
CREATE INDEX invoices_gib_unasked_idx ON invoices (issued_at)
    WHERE status = 'ISSUED' AND gib_status IS NULL AND gib_next_check_at IS NULL;
CREATE INDEX invoices_gib_due_idx ON invoices (gib_next_check_at)
    WHERE status = 'ISSUED' AND gib_next_check_at IS NOT NULL;

-- The exact bytes sent: one row per distinct document an invoice ever sent, append-only
-- (history.sql); invoices.document_sha256 names the one in force.
CREATE TABLE invoice_documents (
    invoice_pk  bigint NOT NULL,
    sha256      text NOT NULL CONSTRAINT invoice_documents_sha256_hex
                CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    media_type  text NOT NULL,
    format      text NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT invoice_documents_pkey PRIMARY KEY (invoice_pk, sha256),
    CONSTRAINT invoice_documents_invoice_fkey FOREIGN KEY (invoice_pk) REFERENCES invoices (id)
);
-- A document is compressed with lz4 where the server has it: pglz, the default, took about
-- 80 µs of the backend per 6 KB document, lz4 about nothing (migration 0021). A server built
-- without lz4 keeps pglz.
DO $$
BEGIN
    ALTER TABLE invoice_documents ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: stored documents stay compressed with pglz';
END $$;

-- The integrator's answer to "is this tax id an e-Fatura user, with which invoice aliases?",
-- per integrator account ('' the global one's: accounts may see different registries), reused
-- for GAPLESS_RECIPIENT_TTL_S by every worker; never read or written inside the transaction that
-- seals a number.
CREATE TABLE recipients (
    tax_id      text NOT NULL,
    registered  boolean NOT NULL,
    aliases     text[] NOT NULL DEFAULT '{}',
    checked_at  timestamptz NOT NULL DEFAULT now(),
    account     text NOT NULL DEFAULT '',
    -- The e-İrsaliye answer (dispatch notes): its own registration and aliases.
    despatch_registered boolean NOT NULL DEFAULT false,
    despatch_aliases    text[] NOT NULL DEFAULT '{}',
    CONSTRAINT recipients_pkey PRIMARY KEY (account, tax_id)
);

-- ---------------------------------------------------------------- events and the feed
-- The history of every state change, written by triggers (history.sql, gib.sql); append-only
-- (feed.sql). Writers insert with sequence_id NULL and take no lock; gapless_feed_assign()
-- (feed.sql) gives committed events their feed positions afterwards, in commit order.
CREATE TABLE invoice_events (
    id               bigint PRIMARY KEY DEFAULT nextval('invoice_events_local_seq'),
    sequence_id      bigint,
    invoice_pk       bigint,          -- NULL: a refusal's event (no invoice)
    invoice_id       text NOT NULL,
    tenant           text NOT NULL,
    series           text,            -- NULL: a refusal's event, no series chosen
    kind             text NOT NULL,
    from_status      text,
    to_status        text NOT NULL,
    number           text,
    attempts         integer NOT NULL DEFAULT 0,
    detail           text,
    actor            text NOT NULL DEFAULT 'sql',
    created_at       timestamptz NOT NULL DEFAULT now(),
    document_sha256  text
);
CREATE INDEX invoice_events_invoice_pk_idx ON invoice_events (invoice_pk);
-- The feed's indexes cover positioned events only: a writer's insert maintains the primary key,
-- invoice_pk and the short index of events still waiting for a position, nothing else.
CREATE UNIQUE INDEX invoice_events_sequence_id_key ON invoice_events (sequence_id)
    WHERE sequence_id IS NOT NULL;
CREATE INDEX invoice_events_tenant_sequence_idx ON invoice_events (tenant, sequence_id)
    WHERE sequence_id IS NOT NULL;
-- The events still waiting for a position: empty whenever the feed keeps up.
CREATE INDEX invoice_events_unpositioned_idx ON invoice_events (id) WHERE sequence_id IS NULL;

-- The feed's one row: the floor above which positions continue, 0 unless an operator raised it
-- (after a failover to an asynchronous standby, past every position clients may hold: docs/api.md).
-- gapless_feed_assign() locks the table in EXCLUSIVE mode while it gives positions.
CREATE TABLE invoice_events_feed (
    one_row boolean PRIMARY KEY DEFAULT true CONSTRAINT invoice_events_feed_one_row
        CHECK (one_row),
    floor   bigint NOT NULL DEFAULT 0 CONSTRAINT invoice_events_feed_floor_nonnegative
        CHECK (floor >= 0)
);
INSERT INTO invoice_events_feed DEFAULT VALUES;

-- ---------------------------------------------------------------- refusals
-- Messages the worker refused before any number (dead-lettered with a reason): the newest reason
-- per tenant and invoice_id, so the API answers REFUSED (an invoice of the same id wins). Each
-- refusal also writes a `refused` event into invoice_events (invoice_pk NULL). No counter or
-- invoice is touched.
CREATE TABLE refusals (
    tenant      text NOT NULL,
    invoice_id  text NOT NULL,
    series      text,
    reason      text NOT NULL,
    refused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, invoice_id)
);
CREATE INDEX refusals_invoice_id_idx ON refusals (invoice_id);

-- ---------------------------------------------------------------- the chain
-- Each counter's tamper-evident chain (chain.sql; docs/chain.md is the format): its records in
-- order (seq 1..n), append-only; the head is on number_counters.
CREATE TABLE chain_records (
    tenant          text NOT NULL,
    series          text NOT NULL,
    period_key      text NOT NULL,
    seq             bigint NOT NULL,
    version         text NOT NULL,
    kind            text NOT NULL CONSTRAINT chain_records_kind
                    CHECK (kind IN ('seal', 'issued', 'rejected', 'voided', 'corrected')),
    reserved_no     bigint NOT NULL,
    number          text NOT NULL,
    invoice_id      text,
    uuid            uuid,
    message_sha256  text,
    document_sha256 text,
    ref             text,
    reason          text,
    at              timestamptz NOT NULL,
    migrated        boolean NOT NULL DEFAULT false,
    hash            text NOT NULL,
    CONSTRAINT chain_records_pkey PRIMARY KEY (tenant, series, period_key, seq)
);
-- No foreign key to number_counters: only the seal and gapless_chain_append write records, for
-- the counter row they hold locked, and the check's share lock on that row would cost every seal
-- a quarter of the chain's price. gapless chain verify reads every record against its counter.
