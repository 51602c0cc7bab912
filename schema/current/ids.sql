-- ids.sql: cluster-encoded ids. Every id is (cluster_id << 48) + a local part below 2^48, so the
-- databases of a sharded or regional deployment (distinct GAPLESS_CLUSTER_IDs) merge without key
-- collisions, and any id tells where it was made (`gapless id decode ID`).
--
-- Ids by plain nextval: the id sequences (tables.sql) hand out cluster-encoded values themselves.
-- Their range is (cluster_id << 48) + 1 .. (cluster_id << 48) + 2^48 - 1, set by
-- gapless_rebase_ids() whenever gapless_config's cluster id is written (gapless migrate inserts
-- it), so an insert calls no PL/pgSQL function and reads no config row.

-- gapless_next_id: the next id of sequence p_seq, for SQL callers. Gives the same value as the
-- rebased sequence itself ((c << 48) | ((c << 48) | local) is (c << 48) | local).
CREATE FUNCTION gapless_next_id(p_seq regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cluster integer;
BEGIN
    SELECT cluster_id INTO v_cluster FROM gapless_config;
    IF v_cluster IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = 'gapless cluster id is not configured; run gapless migrate';
    END IF;
    RETURN (v_cluster::bigint << 48) | nextval(p_seq);
END $$;

-- gapless_rebase_ids: the id sequences hand out ids of cluster p_cluster from their next local
-- part on (the ids already given keep theirs, whatever cluster made them).
CREATE FUNCTION gapless_rebase_ids(p_cluster integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_seq regclass;
    v_last bigint;
    v_called boolean;
    v_next bigint;
    v_base bigint := p_cluster::bigint << 48;
BEGIN
    FOREACH v_seq IN ARRAY ARRAY['invoices_local_seq', 'invoice_events_local_seq']::regclass[] LOOP
        EXECUTE 'SELECT last_value, is_called FROM ' || v_seq::text INTO v_last, v_called;
        v_next := (v_last & 281474976710655) + CASE WHEN v_called THEN 1 ELSE 0 END;
        EXECUTE 'ALTER SEQUENCE ' || v_seq::text
             || ' MINVALUE ' || (v_base + 1) || ' MAXVALUE ' || (v_base + 281474976710655)
             || ' START WITH ' || (v_base + 1) || ' RESTART WITH ' || (v_base + v_next);
    END LOOP;
END $$;

CREATE FUNCTION gapless_config_rebase_ids() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM gapless_rebase_ids(NEW.cluster_id);
    RETURN NULL;
END $$;

CREATE TRIGGER gapless_config_rebase_ids
    AFTER INSERT OR UPDATE OF cluster_id ON gapless_config
    FOR EACH ROW EXECUTE FUNCTION gapless_config_rebase_ids();
