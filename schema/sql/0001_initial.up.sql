-- gapless schema, version 1.
--
-- Tables: gapless_config (cluster id), series, number_counters, invoices, invoice_events.
-- Functions: gapless_next_id, next_number, format_number, reserve_number, preview_number.
-- Triggers: invoice state machine + event history; commit-ordered sequence_id on events.
-- No statement here uses the percent sign: the file runs through the driver unparameterised.

-- ---------------------------------------------------------------- cluster-encoded ids
CREATE TABLE gapless_config (
    singleton   boolean PRIMARY KEY DEFAULT true CONSTRAINT gapless_config_singleton CHECK (singleton),
    cluster_id  integer NOT NULL CONSTRAINT gapless_config_cluster_range CHECK (cluster_id BETWEEN 0 AND 32767),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Local parts stay below 2^48 so that (cluster_id << 48) | local fits a positive bigint.
CREATE SEQUENCE invoices_local_seq MAXVALUE 281474976710655;
CREATE SEQUENCE invoice_events_local_seq MAXVALUE 281474976710655;

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
    CONSTRAINT series_pkey PRIMARY KEY (tenant, code),
    -- Two series of one tenant with one prefix would print the same numbers.
    CONSTRAINT series_tenant_prefix_key UNIQUE (tenant, prefix)
);

CREATE TABLE number_counters (
    tenant      text NOT NULL,
    series      text NOT NULL,
    period_key  text NOT NULL,
    last_no     bigint NOT NULL CONSTRAINT number_counters_positive CHECK (last_no > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT number_counters_pkey PRIMARY KEY (tenant, series, period_key),
    CONSTRAINT number_counters_series_fkey FOREIGN KEY (tenant, series)
        REFERENCES series (tenant, code)
);

-- The period a moment falls in, read on the series' local clock.
CREATE FUNCTION gapless_period_key(p_reset text, p_local timestamp) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_reset
        WHEN 'never'   THEN 'all'
        WHEN 'yearly'  THEN to_char(p_local, 'YYYY')
        WHEN 'monthly' THEN to_char(p_local, 'YYYY-MM')
        WHEN 'daily'   THEN to_char(p_local, 'YYYY-MM-DD')
    END
$$;

-- Render a number with a series format: {prefix} {yyyy} {yy} {mm} {dd} {seq}.
CREATE FUNCTION gapless_render(p_format text, p_prefix text, p_width integer,
                               p_local timestamp, p_no bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT replace(replace(replace(replace(replace(replace(p_format,
        '{prefix}', p_prefix),
        '{yyyy}', to_char(p_local, 'YYYY')),
        '{yy}', to_char(p_local, 'YY')),
        '{mm}', to_char(p_local, 'MM')),
        '{dd}', to_char(p_local, 'DD')),
        '{seq}', lpad(p_no::text, p_width, '0'))
$$;

-- format_number: the printed number for counter value p_no reserved at p_at.
CREATE FUNCTION format_number(p_tenant text, p_series text, p_no bigint,
                              p_at timestamptz DEFAULT now()) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, p_no)
      FROM series s WHERE s.tenant = p_tenant AND s.code = p_series
$$;

-- next_number: advance the counter of (tenant, series, period of p_at) and return the new value.
-- One statement; the counter row stays locked until the caller's transaction ends, so the caller
-- must pin the value on an invoice in that same transaction (reserve_number does) or it is a gap.
CREATE FUNCTION next_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    s series;
    v_no bigint;
BEGIN
    SELECT * INTO s FROM series WHERE tenant = p_tenant AND code = p_series;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = 'unknown series (tenant ' || quote_literal(p_tenant)
            || ', series ' || quote_literal(p_series) || ')';
    END IF;
    INSERT INTO number_counters AS c (tenant, series, period_key, last_no)
    VALUES (p_tenant, p_series, gapless_period_key(s.reset, p_at AT TIME ZONE s.tz), 1)
    ON CONFLICT (tenant, series, period_key)
        DO UPDATE SET last_no = c.last_no + 1, updated_at = now()
    RETURNING c.last_no INTO v_no;
    IF length(v_no::text) > s.width THEN
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = 'series exhausted: number ' || v_no || ' does not fit width ' || s.width;
    END IF;
    RETURN v_no;
END $$;

-- preview_number: what the next reservation at p_at would print; consumes nothing, locks nothing.
CREATE FUNCTION preview_number(p_tenant text, p_series text, p_at timestamptz DEFAULT now())
RETURNS TABLE (period_key text, next_no bigint, number text)
LANGUAGE sql STABLE AS $$
    SELECT k.period_key, k.next_no,
           gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, k.next_no)
      FROM series s
      CROSS JOIN LATERAL (
          SELECT gapless_period_key(s.reset, p_at AT TIME ZONE s.tz) AS period_key
      ) p
      CROSS JOIN LATERAL (
          SELECT p.period_key,
                 coalesce((SELECT c.last_no FROM number_counters c
                            WHERE c.tenant = s.tenant AND c.series = s.code
                              AND c.period_key = p.period_key), 0) + 1 AS next_no
      ) k
     WHERE s.tenant = p_tenant AND s.code = p_series
$$;

-- ---------------------------------------------------------------- invoices
CREATE TABLE invoices (
    id               bigint PRIMARY KEY DEFAULT gapless_next_id('invoices_local_seq'),
    invoice_id       text NOT NULL CONSTRAINT invoices_invoice_id_key UNIQUE,
    tenant           text NOT NULL,
    series           text NOT NULL,
    status           text NOT NULL DEFAULT 'RECEIVED'
                     CONSTRAINT invoices_status_kind CHECK (status IN
                         ('RECEIVED', 'SENDING', 'ISSUED', 'ERROR', 'REJECTED', 'CANCELLED', 'VOIDED')),
    priority         smallint NOT NULL DEFAULT 1,
    period_key       text,
    reserved_no      bigint,
    number           text,
    reserved_at      timestamptz,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    attempts         integer NOT NULL DEFAULT 0,
    sending_since    timestamptz,
    next_attempt_at  timestamptz,
    last_error       text,
    integrator_ref   text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    issued_at        timestamptz,
    CONSTRAINT invoices_series_fkey FOREIGN KEY (tenant, series) REFERENCES series (tenant, code),
    CONSTRAINT invoices_number_pinned CHECK (
        (reserved_no IS NULL AND number IS NULL AND period_key IS NULL)
        OR (reserved_no > 0 AND number IS NOT NULL AND period_key IS NOT NULL)),
    CONSTRAINT invoices_numbered_status CHECK (
        reserved_no IS NOT NULL OR status IN ('RECEIVED', 'CANCELLED'))
);

-- I1 in the database itself: a counter value, and a printed number, belong to one invoice.
CREATE UNIQUE INDEX invoices_counter_no_key ON invoices (tenant, series, period_key, reserved_no)
    WHERE reserved_no IS NOT NULL;
CREATE UNIQUE INDEX invoices_tenant_number_key ON invoices (tenant, number)
    WHERE number IS NOT NULL;
-- Recovery's two scans stay index-only-small however large the table grows.
CREATE INDEX invoices_sending_idx ON invoices (sending_since) WHERE status = 'SENDING';
CREATE INDEX invoices_error_due_idx ON invoices (next_attempt_at) WHERE status = 'ERROR';
CREATE INDEX invoices_tenant_series_status_idx ON invoices (tenant, series, status);

-- ---------------------------------------------------------------- events and the feed
CREATE TABLE invoice_events (
    id           bigint PRIMARY KEY DEFAULT gapless_next_id('invoice_events_local_seq'),
    sequence_id  bigint CONSTRAINT invoice_events_sequence_id_key UNIQUE,
    invoice_pk   bigint NOT NULL,
    invoice_id   text NOT NULL,
    tenant       text NOT NULL,
    series       text NOT NULL,
    kind         text NOT NULL,
    from_status  text,
    to_status    text NOT NULL,
    number       text,
    attempts     integer NOT NULL DEFAULT 0,
    detail       text,
    actor        text NOT NULL DEFAULT 'sql',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX invoice_events_invoice_pk_idx ON invoice_events (invoice_pk);
CREATE INDEX invoice_events_tenant_sequence_idx ON invoice_events (tenant, sequence_id);

-- sequence_id is handed out at commit, one transaction at a time, so it grows in commit order:
-- a poller that has seen sequence_id N will never later find a committed row below N.
CREATE SEQUENCE invoice_events_sequence_id_seq;
CREATE TABLE invoice_events_commit_lock ();

CREATE FUNCTION gapless_event_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Held from here until the transaction's commit is visible; released by the commit.
    LOCK TABLE invoice_events_commit_lock IN EXCLUSIVE MODE;
    UPDATE invoice_events SET sequence_id = nextval('invoice_events_sequence_id_seq')
     WHERE id = NEW.id;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER invoice_events_sequence_trigger
    AFTER INSERT ON invoice_events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION gapless_event_sequence();

-- Events are history: never changed, never removed (the commit-time sequence_id aside).
CREATE FUNCTION gapless_event_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.sequence_id IS NULL AND NEW.sequence_id IS NOT NULL
       AND (to_jsonb(NEW) - 'sequence_id') = (to_jsonb(OLD) - 'sequence_id') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = 'invoice_events is append-only';
END $$;

CREATE TRIGGER invoice_events_append_only
    BEFORE UPDATE OR DELETE ON invoice_events
    FOR EACH ROW EXECUTE FUNCTION gapless_event_immutable();

-- ---------------------------------------------------------------- invoice state machine
CREATE FUNCTION gapless_invoice_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.reserved_no IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
                MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
                || ' holds number ' || OLD.number || ' and cannot be deleted; void it instead';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.reserved_no IS NOT NULL AND (
        NEW.reserved_no IS DISTINCT FROM OLD.reserved_no
        OR NEW.number IS DISTINCT FROM OLD.number
        OR NEW.period_key IS DISTINCT FROM OLD.period_key
        OR NEW.tenant IS DISTINCT FROM OLD.tenant
        OR NEW.series IS DISTINCT FROM OLD.series) THEN
        RAISE EXCEPTION USING ERRCODE = 'integrity_constraint_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id)
            || ': a reserved number is never changed';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT (
        (OLD.status, NEW.status) IN (
            ('RECEIVED', 'SENDING'), ('RECEIVED', 'CANCELLED'),
            ('SENDING', 'ISSUED'), ('SENDING', 'ERROR'), ('SENDING', 'REJECTED'),
            ('ERROR', 'SENDING'), ('ERROR', 'ISSUED'), ('ERROR', 'VOIDED'),
            ('REJECTED', 'SENDING'), ('REJECTED', 'VOIDED'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'invoice ' || quote_literal(OLD.invoice_id) || ': transition '
            || OLD.status || ' -> ' || NEW.status || ' is not allowed';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE TRIGGER invoices_guard
    BEFORE UPDATE OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_guard();

-- Every state change writes its event, whoever the writer is (worker, recovery, operator, SQL).
CREATE FUNCTION gapless_invoice_history() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_kind text;
    v_from text;
    v_detail text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_kind := CASE WHEN NEW.reserved_no IS NULL THEN 'received' ELSE 'reserved' END;
        v_from := NULL;
    ELSE
        v_from := OLD.status;
        IF OLD.reserved_no IS NULL AND NEW.reserved_no IS NOT NULL THEN
            v_kind := 'reserved';
        ELSIF NEW.status = OLD.status AND NEW.attempts = OLD.attempts THEN
            RETURN NULL;  -- bookkeeping only (payload fix, lease), no state change
        ELSE
            v_kind := CASE NEW.status
                WHEN 'SENDING'   THEN CASE OLD.status WHEN 'SENDING' THEN 'resent'
                                                         WHEN 'RECEIVED' THEN 'sending'
                                                         ELSE 'retried' END
                WHEN 'ISSUED'    THEN CASE WHEN current_setting('gapless.actor', true) = 'recovery'
                                           THEN 'recovered' ELSE 'issued' END
                WHEN 'ERROR'     THEN 'error'
                WHEN 'REJECTED'  THEN 'rejected'
                WHEN 'CANCELLED' THEN 'cancelled'
                WHEN 'VOIDED'    THEN 'voided'
                ELSE lower(NEW.status)
            END;
        END IF;
    END IF;
    v_detail := CASE
        WHEN NEW.status = 'ISSUED' THEN NEW.integrator_ref
        WHEN NEW.status IN ('ERROR', 'REJECTED', 'VOIDED', 'CANCELLED') THEN NEW.last_error
    END;
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, number, attempts, detail, actor)
    VALUES (NEW.id, NEW.invoice_id, NEW.tenant, NEW.series, v_kind, v_from, NEW.status,
            NEW.number, NEW.attempts, v_detail,
            coalesce(nullif(current_setting('gapless.actor', true), ''), 'sql'));
    RETURN NULL;
END $$;

CREATE TRIGGER invoices_history
    AFTER INSERT OR UPDATE ON invoices
    FOR EACH ROW EXECUTE FUNCTION gapless_invoice_history();

-- ---------------------------------------------------------------- the reservation
-- reserve_number: pin a number on the invoice (by its producer key), just in time.
-- Locks the invoice row, and if it has no number yet advances its counter (next_number) and pins
-- reserved_no, number and period_key, dated p_at in the series' time zone. Idempotent: an invoice
-- that already holds a number gets it back unchanged (fresh = false) and nothing is consumed.
-- Both row locks last until the caller commits: commit at once, never across I/O.
-- p_lock_timeout_ms bounds the wait for either lock (SET LOCAL; SQLSTATE 55P03 when it expires).
CREATE FUNCTION reserve_number(p_invoice_id text, p_at timestamptz DEFAULT now(),
                               p_lock_timeout_ms integer DEFAULT NULL)
RETURNS TABLE (invoice_pk bigint, reserved_no bigint, number text, period_key text, fresh boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inv invoices;
    v_no bigint;
    v_number text;
    v_period text;
BEGIN
    IF p_lock_timeout_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    END IF;
    SELECT * INTO inv FROM invoices i WHERE i.invoice_id = p_invoice_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found',
            MESSAGE = 'no invoice with invoice_id ' || quote_literal(p_invoice_id);
    END IF;
    IF inv.reserved_no IS NOT NULL THEN
        RETURN QUERY SELECT inv.id, inv.reserved_no, inv.number, inv.period_key, false;
        RETURN;
    END IF;
    IF inv.status <> 'RECEIVED' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            MESSAGE = 'invoice ' || quote_literal(p_invoice_id) || ' is ' || inv.status
            || ' and takes no number';
    END IF;
    v_no := next_number(inv.tenant, inv.series, p_at);
    SELECT gapless_period_key(s.reset, p_at AT TIME ZONE s.tz),
           gapless_render(s.format, s.prefix, s.width, p_at AT TIME ZONE s.tz, v_no)
      INTO v_period, v_number
      FROM series s WHERE s.tenant = inv.tenant AND s.code = inv.series;
    UPDATE invoices i
       SET reserved_no = v_no, number = v_number, period_key = v_period, reserved_at = p_at
     WHERE i.id = inv.id;
    RETURN QUERY SELECT inv.id, v_no, v_number, v_period, true;
END $$;
