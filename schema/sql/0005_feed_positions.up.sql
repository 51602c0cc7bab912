-- gapless schema, version 5: a feed that never makes writers wait for each other.
--
-- Until version 4 every event-writing transaction took invoice_events_commit_lock at commit and
-- held it until its commit was visible, so that sequence_id grew in commit order. That
-- serialised every state change of every tenant and series, one WAL flush at a time.
--
-- From here writers only insert: an event is committed with sequence_id NULL and no lock. Its
-- feed position is given afterwards, by gapless_feed_assign(): the feed reader calls it before
-- each page (and recovery once per cycle). It numbers the committed, unpositioned events in one
-- short transaction, under invoice_events_feed, which only position-givers take:
--
--   * positions continue from the largest one given (max(sequence_id) + 1, + 2, ...; or from the
--     feed's floor, if an operator raised it above), read after the lock is granted, so every
--     batch lies above every batch committed before it;
--   * the lock is released only after the batch's commit is visible (PostgreSQL makes a commit
--     visible before it releases its locks), so a reader that sees position N sees every
--     position below N: following "sequence_id > cursor" never skips and never repeats (I6);
--   * within a batch, events go in insertion order (invoice_events.id). A transaction that
--     depends on another (it changed the same invoice after the other committed) inserted its
--     events later and is visible no earlier, so an invoice's history is in causal order.
--
-- An open transaction delays only its own events: they become visible, and get positions, when
-- it commits. Positions are dense (a rolled-back batch leaves nothing behind).
--
-- Durability: a position a reader has seen must survive a crash, so the batch's commit is always
-- flushed (synchronous_commit 'off' becomes 'local'); the flush carries every earlier commit with
-- it, the writers' too. A sealed number needs the same (the integrator may see it before a crash
-- could undo it): a transaction that changes a counter never commits asynchronously either. That
-- rule was the feed trigger's before; it now has a trigger of its own, once per statement.
--
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

DROP TRIGGER invoice_events_sequence_trigger ON invoice_events;
DROP FUNCTION gapless_event_sequence();
DROP TABLE invoice_events_commit_lock;
DROP SEQUENCE invoice_events_sequence_id_seq;

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

-- The feed's indexes cover positioned events only: a writer's insert maintains the primary key,
-- invoice_pk and the short index of events still waiting for a position, nothing else.
ALTER TABLE invoice_events DROP CONSTRAINT invoice_events_sequence_id_key;
CREATE UNIQUE INDEX invoice_events_sequence_id_key ON invoice_events (sequence_id)
    WHERE sequence_id IS NOT NULL;
DROP INDEX invoice_events_tenant_sequence_idx;
CREATE INDEX invoice_events_tenant_sequence_idx ON invoice_events (tenant, sequence_id)
    WHERE sequence_id IS NOT NULL;
-- The events still waiting for a position: empty whenever the feed keeps up.
CREATE INDEX invoice_events_unpositioned_idx ON invoice_events (id) WHERE sequence_id IS NULL;

CREATE FUNCTION gapless_feed_assign(p_limit integer DEFAULT 10000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_done integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM invoice_events WHERE sequence_id IS NULL) THEN
        RETURN 0;  -- nothing committed waits: no lock, no write
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
            MESSAGE = 'gapless_feed_assign() must run in a READ COMMITTED transaction',
            HINT = 'it reads the positions committed before its lock was granted';
    END IF;
    -- Waits for another position-giver (the caller's lock_timeout applies); writers never
    -- take this lock.
    LOCK TABLE invoice_events_feed IN EXCLUSIVE MODE;
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    -- Lets the append-only guard tell this update from any other.
    PERFORM set_config('gapless.feed_assigning', 'on', true);
    -- A fresh snapshot (READ COMMITTED, new statement): every batch committed before the lock
    -- was granted is visible, so max() is the top of the feed.
    WITH top AS (
        SELECT greatest(coalesce(max(sequence_id), 0),
                        (SELECT floor FROM invoice_events_feed)) AS last
          FROM invoice_events
    ), batch AS (
        SELECT id, row_number() OVER (ORDER BY id) AS n
          FROM (SELECT id FROM invoice_events WHERE sequence_id IS NULL
                 ORDER BY id LIMIT p_limit) AS waiting
    )
    UPDATE invoice_events e
       SET sequence_id = top.last + batch.n
      FROM top, batch
     WHERE e.id = batch.id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    PERFORM set_config('gapless.feed_assigning', '', true);
    RETURN v_done;
END $$;

-- Events stay append-only; the one change allowed is the position, given once, by the function
-- above (the column list is compared as well, so nothing else can ride along).
CREATE OR REPLACE FUNCTION gapless_event_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
       AND current_setting('gapless.feed_assigning', true) = 'on'
       AND (NEW.id, NEW.invoice_pk, NEW.invoice_id, NEW.tenant, NEW.series, NEW.kind,
            NEW.from_status, NEW.to_status, NEW.number, NEW.attempts, NEW.detail, NEW.actor,
            NEW.created_at, NEW.document_sha256)
           IS NOT DISTINCT FROM
           (OLD.id, OLD.invoice_pk, OLD.invoice_id, OLD.tenant, OLD.series, OLD.kind,
            OLD.from_status, OLD.to_status, OLD.number, OLD.attempts, OLD.detail, OLD.actor,
            OLD.created_at, OLD.document_sha256) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

-- A counter's change is never committed asynchronously (see the head of this file).
CREATE FUNCTION gapless_durable_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Read by the commit itself (SET LOCAL scope); stronger settings are left alone.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER number_counters_durable_commit
    AFTER INSERT OR UPDATE ON number_counters
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_durable_commit();
