"""The invoice row's rules (the CHECK ``invoices_consistent``, schema 0018) against real PostgreSQL.

Six CHECK constraints became one PL/pgSQL call. These tests hold it to the six expressions it
replaced, word for word, on every combination of the values that matter (NULLs included: a CHECK
passes on NULL), and hold its errors to what PostgreSQL said before: SQLSTATE 23514, the broken
rule's constraint name, its message.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

# The six constraints of schema 0017, as PostgreSQL stored them, in the order it checked them
# (by name). The first that is false (not NULL) is the one a row breaks.
OLD_RULES = (
    ("invoices_answer_status_kind", "answer_status IN ('answered', 'unanswered')"),
    ("invoices_gib_status_issued", "gib_status IS NULL OR status = 'ISSUED'"),
    ("invoices_gib_status_kind", "gib_status IN ('pending', 'accepted', 'refused')"),
    ("invoices_number_pinned",
     "(reserved_no IS NULL AND number IS NULL AND period_key IS NULL) "
     "OR (reserved_no > 0 AND number IS NOT NULL AND period_key IS NOT NULL)"),
    ("invoices_numbered_status", "reserved_no IS NOT NULL OR status IN ('RECEIVED', 'CANCELLED')"),
    ("invoices_status_kind",
     "status IN ('RECEIVED', 'SENDING', 'ISSUED', 'ERROR', 'REJECTED', 'CANCELLED', 'VOIDED')"),
)

GRID = """
    SELECT status, reserved_no, number, period_key, gib_status, answer_status
      FROM unnest(ARRAY['RECEIVED', 'SENDING', 'ISSUED', 'ERROR', 'REJECTED', 'CANCELLED',
                        'VOIDED', 'received', '']) status,
           unnest(ARRAY[NULL, -1, 0, 7]::bigint[]) reserved_no,
           unnest(ARRAY[NULL, 'ABC2026000000007']) number,
           unnest(ARRAY[NULL, '2026']) period_key,
           unnest(ARRAY[NULL, 'pending', 'accepted', 'refused', 'ACCEPTED']) gib_status,
           unnest(ARRAY[NULL, 'answered', 'unanswered', 'rejected']) answer_status
"""


def test_the_one_check_agrees_with_the_six_it_replaced_on_every_combination(db_url: str) -> None:
    expected = "CASE " + " ".join(
        f"WHEN NOT ({rule}) THEN '{name}'" for name, rule in OLD_RULES) + " END"
    compare = f"""
    DO $$
    DECLARE
        r record;
        v_got text;
        v_seen integer := 0;
        v_broken integer := 0;
    BEGIN
        FOR r IN SELECT g.*, {expected} AS expected FROM ({GRID}) g LOOP
            BEGIN
                PERFORM gapless_invoice_consistent(r.status, r.reserved_no, r.number,
                                                   r.period_key, r.gib_status, r.answer_status);
                v_got := NULL;
            EXCEPTION WHEN check_violation THEN
                GET STACKED DIAGNOSTICS v_got = CONSTRAINT_NAME;
            END;
            IF v_got IS DISTINCT FROM r.expected THEN
                RAISE EXCEPTION 'row % broke % by the new check, % by the old ones',
                    row(r.status, r.reserved_no, r.number, r.period_key, r.gib_status,
                        r.answer_status), v_got, r.expected;
            END IF;
            v_seen := v_seen + 1;
            v_broken := v_broken + (v_got IS NOT NULL)::integer;
        END LOOP;
        -- The grid reaches every rule and both answers.
        IF v_seen <> 9 * 4 * 2 * 2 * 5 * 4 OR v_broken = 0 OR v_broken = v_seen THEN
            RAISE EXCEPTION 'grid of % rows, % broken', v_seen, v_broken;
        END IF;
    END $$;
    """
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(compare)
        # Every old rule is the first one broken by some row of the grid.
        names = {row[0] for row in conn.execute(
            f"SELECT DISTINCT {expected} FROM ({GRID}) g").fetchall()}
    assert names == {name for name, _ in OLD_RULES} | {None}


@pytest.mark.parametrize(("columns", "values", "rule"), [
    ("status, reserved_no, number, period_key", "'DONE', 3, 'X3', '2026'",
     "invoices_status_kind"),
    ("status", "'SENDING'", "invoices_numbered_status"),
    ("reserved_no, number", "3, 'X3'", "invoices_number_pinned"),
    ("reserved_no, number, period_key", "0, 'X0', '2026'", "invoices_number_pinned"),
    ("status, reserved_no, number, period_key, gib_status", "'ISSUED', 3, 'X3', '2026', 'maybe'",
     "invoices_gib_status_kind"),
    ("gib_status", "'accepted'", "invoices_gib_status_issued"),
    ("answer_status", "'maybe'", "invoices_answer_status_kind"),
])
def test_a_row_that_breaks_a_rule_is_refused_as_before(db_url: str, columns: str, values: str,
                                                       rule: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('rules', 'RUL', 'RUL') "
                     "ON CONFLICT DO NOTHING")
        with pytest.raises(errors.CheckViolation) as refused:
            conn.execute(
                f"INSERT INTO invoices (invoice_id, tenant, series, {columns}) "
                f"VALUES ('rules-1', 'rules', 'RUL', {values})")
        assert refused.value.diag.constraint_name == rule
        assert refused.value.diag.table_name == "invoices"
        assert refused.value.diag.message_primary == (
            f'new row for relation "invoices" violates check constraint "{rule}"')
        left = conn.execute("SELECT count(*) FROM invoices WHERE tenant = 'rules'").fetchone()
        assert left == (0,)
