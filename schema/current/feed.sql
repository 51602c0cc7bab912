-- feed.sql: the commit-ordered event feed (I6). A client that pages by "sequence_id > cursor"
-- never misses and never repeats an event, however transactions interleave and commit out of
-- order — and writers never wait for each other to get there.
--
-- Writers only insert: an event is committed with sequence_id NULL and no lock. Its feed
-- position is given afterwards, by gapless_feed_assign(): the feed reader calls it before each
-- page (and recovery once per cycle). It numbers the committed, unpositioned events in one short
-- transaction, under invoice_events_feed, which only position-givers take:
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
-- it, the writers' too.
--
-- Events are append-only: never deleted or truncated, and never updated but for the position,
-- given once, by gapless_feed_assign().

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

-- ---------------------------------------------------------------- append-only
CREATE TRIGGER invoice_events_append_only
    BEFORE DELETE ON invoice_events
    FOR EACH ROW EXECUTE FUNCTION gapless_append_only();
CREATE TRIGGER invoice_events_no_truncate
    BEFORE TRUNCATE ON invoice_events
    FOR EACH STATEMENT EXECUTE FUNCTION gapless_append_only();
-- Refuses every update but the position, given once, by gapless_feed_assign() (which sets
-- gapless.feed_assigning for its own statement); the other columns are compared too, so nothing
-- can ride along. The test is the trigger's WHEN clause, so positioning an event calls no
-- PL/pgSQL, and what the trigger calls only refuses.
CREATE TRIGGER invoice_events_positioned_once
    BEFORE UPDATE ON invoice_events
    FOR EACH ROW WHEN (NOT (
        OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
        AND current_setting('gapless.feed_assigning', true) IS NOT DISTINCT FROM 'on'
        AND (NEW.id, NEW.invoice_pk, NEW.invoice_id, NEW.tenant, NEW.series, NEW.kind,
             NEW.from_status, NEW.to_status, NEW.number, NEW.attempts, NEW.detail, NEW.actor,
             NEW.created_at, NEW.document_sha256)
            IS NOT DISTINCT FROM
            (OLD.id, OLD.invoice_pk, OLD.invoice_id, OLD.tenant, OLD.series, OLD.kind,
             OLD.from_status, OLD.to_status, OLD.number, OLD.attempts, OLD.detail, OLD.actor,
             OLD.created_at, OLD.document_sha256)))
    EXECUTE FUNCTION gapless_append_only();
