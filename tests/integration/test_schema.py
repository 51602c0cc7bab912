"""The schema proven twice: a database built from ``schema/current/`` (the live SQL, one file per
concern) equals one built by the migrations, as ``pg_dump`` prints them; every function is defined
once; migrate is idempotent; the downgrade/upgrade round trip works as far as down files reach,
and a forward-only migration refuses to be stepped down past."""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from gapless.errors import ConfigurationError, IrreversibleMigration
from gapless.ledger.conninfo import database_name, driver_conninfo
from gapless.ledger.database import make_sync_engine
from gapless.ledger.migrations import (
    CURRENT_FILES,
    build_from_current,
    downgrade,
    head_revision,
    migrate,
    schema_dir,
)
from tests.conftest import RUN_ID, admin_conninfo, database_url, drop_database
from tests.helpers import run_gapless

#: The functions other code calls by name (the worker, recovery, the feed, the chain, other
#: stacks); the dumps' equality covers the rest.
EXPECTED_FUNCTIONS = frozenset({
    "gapless_next_id", "gapless_period_key", "gapless_render", "format_number", "next_number",
    "preview_number", "reserve_number", "gapless_feed_assign",
    "gapless_invoice_guard", "gapless_invoice_history", "claim_invoice",
    "gapless_seal", "gapless_profile_version", "gapless_take", "gapless_claim_row",
    "intake_invoice", "gapless_append_only", "gapless_durable_commit", "gapless_rebase_ids",
    "gapless_config_rebase_ids", "gapless_invoice_verdict",
    "gapless_canonical_json", "gapless_message_sha256", "gapless_chain_genesis",
    "gapless_chain_link", "gapless_chain_append", "gapless_invoice_chain",
    "claim_tenant_invoice", "reserve_tenant_number",
})


def fresh_name() -> str:
    return f"gapless_fresh_{RUN_ID}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A database name that does not exist yet (migrate, or the build, must create it)."""
    name = fresh_name()
    yield database_url(name)
    drop_database(name)


@cache
def pg_dump() -> str:
    """A pg_dump of the server's major version (an older one refuses a newer server; a newer
    one prints the same schema differently)."""
    with psycopg.connect(admin_conninfo()) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    major = int(row[0]) // 10000
    candidates = [Path(f"/usr/lib/postgresql/{major}/bin/pg_dump")]
    on_path = shutil.which("pg_dump")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file():
            version = subprocess.run([str(candidate), "--version"], check=True,
                                     capture_output=True, text=True).stdout
            found = re.search(r"(\d+)(?:\.\d+)+", version)
            if found and int(found.group(1)) == major:
                return str(candidate)
    pytest.fail(f"no pg_dump of PostgreSQL {major} (looked at {[str(c) for c in candidates]})")


def dump(url: str, *options: str) -> str:
    """``pg_dump`` of the database, less what legitimately differs between two databases of the
    same schema: the random ``\\restrict`` key of each dump, the header naming the versions, and
    the database's name."""
    printed = subprocess.run([pg_dump(), "--no-owner", *options, driver_conninfo(url)],
                             check=True, capture_output=True, text=True).stdout
    name = database_name(url)
    assert name
    lines = (line.replace(name, "<database>") for line in printed.splitlines()
             if not line.startswith(("\\restrict", "\\unrestrict", "-- Dumped ")))
    return "\n".join(lines)


def schema_dump(url: str) -> str:
    return dump(url, "--schema-only")


def seed_dump(url: str) -> str:
    """The rows a new database starts with (the feed's row, the revision, the sequences'
    positions), less gapless_config: the cluster id is pinned by ``gapless migrate``."""
    return dump(url, "--data-only", "--exclude-table-data=public.gapless_config")


def differences(expected: str, actual: str, expected_name: str, actual_name: str) -> str:
    """The differing lines, each group under the name of the object pg_dump printed them in."""
    old, new = expected.splitlines(), actual.splitlines()
    said = [f"- {expected_name}", f"+ {actual_name}"]
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        where = next((line for line in reversed(old[:i1 + 1]) if line.startswith("-- Name: ")),
                     "-- (before the first object)")
        said += [where, *(f"- {line}" for line in old[i1:i2]),
                 *(f"+ {line}" for line in new[j1:j2])]
    return "\n".join(said)


def public_functions(url: str) -> set[str]:
    engine = make_sync_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(text(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
            )).scalars())
    finally:
        engine.dispose()


def test_the_current_schema_equals_the_migrated_one(db_url: str, fresh_url: str) -> None:
    """db_url is a clone of the session's template, built by migrate(); fresh_url is built from
    schema/current/. A migration without its change in schema/current/ (or the reverse) fails
    here, with the differing lines of the two dumps."""
    build_from_current(fresh_url)
    migrated, current = schema_dump(db_url), schema_dump(fresh_url)
    assert "gapless_seal" in migrated
    assert current == migrated, differences(migrated, current, "migrations", "schema/current")
    migrated, current = seed_dump(db_url), seed_dump(fresh_url)
    assert current == migrated, differences(migrated, current, "migrations", "schema/current")
    assert public_functions(fresh_url) >= EXPECTED_FUNCTIONS


def test_stored_documents_are_compressed_with_lz4_where_the_server_has_it(db_url: str) -> None:
    """Migration 0021: a document's bytes are TOAST-compressed with lz4 (pglz cost the backend
    about 80 µs per UBL-TR document). This server is built with lz4, as PostgreSQL's packages
    and images are; one without it keeps pglz, which the migration allows. (A stored document
    compressed with lz4: tests/integration/test_einvoice_flow.py.)"""
    with psycopg.connect(driver_conninfo(db_url), autocommit=True) as conn:
        method = conn.execute(
            "SELECT attcompression FROM pg_attribute "
            "WHERE attrelid = 'invoice_documents'::regclass AND attname = 'body'").fetchone()
    assert method == ("l",)


def test_every_function_is_defined_once_and_the_seal_in_numbering_sql() -> None:
    defined: dict[str, list[str]] = {}
    for name in CURRENT_FILES:
        source = (schema_dir() / "current" / name).read_text(encoding="utf-8")
        for function in re.findall(r"^CREATE FUNCTION (\w+)", source, re.MULTILINE):
            defined.setdefault(function, []).append(name)
    copies = {function: files for function, files in defined.items() if len(files) > 1}
    assert not copies, f"defined more than once in schema/current/: {copies}"
    assert set(defined) >= EXPECTED_FUNCTIONS
    assert defined["gapless_seal"] == ["numbering.sql"]  # the README points there


def test_a_database_built_from_current_is_at_head_and_refuses_a_second_build(
        fresh_url: str) -> None:
    build_from_current(fresh_url)
    result = migrate(fresh_url, 0)
    assert result.from_revision == result.to_revision == head_revision(fresh_url)
    with pytest.raises(ConfigurationError, match="is not empty"):
        build_from_current(fresh_url)


def test_migrate_creates_the_database_and_twice_changes_nothing(fresh_url: str) -> None:
    first = migrate(fresh_url, 0)
    assert first.created_database
    assert first.changed
    before = schema_dump(fresh_url)
    second = migrate(fresh_url, 0)
    assert not second.changed
    assert schema_dump(fresh_url) == before


def test_gapless_migrate_command_is_idempotent(fresh_url: str) -> None:
    env = {"GAPLESS_DATABASE_URL": fresh_url, "PATH": "/usr/bin:/bin"}
    first = run_gapless(["migrate"], env)
    assert first.returncode == 0, first.stderr
    assert "created database" in first.stdout
    second = run_gapless(["migrate"], env)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout


def test_downgrade_and_upgrade_round_trip(fresh_url: str) -> None:
    """Down to base while every migration has a down file; once a forward-only one exists, down
    to it (the downgrade stops there with IrreversibleMigration), and back up."""
    migrate(fresh_url, 0)
    before = schema_dump(fresh_url)
    try:
        downgrade(fresh_url, "base")
    except IrreversibleMigration:
        pass  # stepped down to the newest forward-only migration
    else:
        engine = make_sync_engine(fresh_url)
        try:
            with engine.connect() as conn:
                tables = set(conn.execute(text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars())
        finally:
            engine.dispose()
        assert tables <= {"alembic_version"}
    migrate(fresh_url, 0)
    assert schema_dump(fresh_url) == before


FORWARD_ONLY_REVISION = '''"""A forward-only revision, as schema/README.md says to write one."""

from gapless.ledger.migrations import sql_revision

revision, down_revision = "9999", {head!r}
branch_labels = depends_on = None
upgrade, downgrade = sql_revision("9999_forward_only")
'''


def test_a_forward_only_migration_applies_and_refuses_to_be_stepped_down(
        fresh_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = tmp_path / "schema"
    shutil.copytree(schema_dir(), schema, ignore=shutil.ignore_patterns("__pycache__"))
    (schema / "sql" / "9999_forward_only.up.sql").write_text(
        "CREATE TABLE forward_only_probe (one integer);\n", encoding="utf-8")
    (schema / "versions" / "9999_forward_only.py").write_text(
        FORWARD_ONLY_REVISION.format(head=head_revision(fresh_url)), encoding="utf-8")
    monkeypatch.setenv("GAPLESS_SCHEMA_DIR", str(schema))
    assert migrate(fresh_url, 0).to_revision == "9999"
    with pytest.raises(IrreversibleMigration, match="9999_forward_only is forward-only"):
        downgrade(fresh_url, "base")
    assert migrate(fresh_url, 0).from_revision == "9999"  # nothing was stepped down


def _rows(url: str) -> dict[str, list[tuple[object, ...]]]:
    """What a migration must keep: every invoice, event, counter and chain record."""
    queries = {
        "invoices": "SELECT id, invoice_id, tenant, series, status, reserved_no, number, uuid, "
                    "payload::text, message_sha256 FROM invoices ORDER BY id",
        "events": "SELECT id, invoice_pk, invoice_id, tenant, kind, to_status, number "
                  "FROM invoice_events ORDER BY id",
        "counters": "SELECT tenant, series, period_key, last_no, chain_seq, chain_hash "
                    "FROM number_counters ORDER BY 1, 2, 3",
        "chain": "SELECT tenant, series, period_key, seq, kind, invoice_id, hash "
                 "FROM chain_records ORDER BY 1, 2, 3, 4",
    }
    with psycopg.connect(driver_conninfo(url)) as conn:
        return {name: conn.execute(query).fetchall() for name, query in queries.items()}


def _intake(conn: psycopg.Connection, invoice_id: str, tenant: str, series: str) -> tuple[
        object, ...]:
    row = conn.execute(
        "SELECT kind, created, tenant, number FROM intake_invoice(%s, %s, %s, 1::smallint, "
        "%s::jsonb, 300)", (invoice_id, tenant, series, f'{{"id": "{invoice_id}"}}')).fetchone()
    assert row is not None
    return tuple(row)


def schema_up_to(last: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gapless migrate`` stops at revision ``last``: a copy of the schema without the
    revisions after it, in force through GAPLESS_SCHEMA_DIR (until the test removes it)."""
    schema = tmp_path / "schema"
    shutil.copytree(schema_dir(), schema, ignore=shutil.ignore_patterns("__pycache__"))
    for revision in (schema / "versions").glob("*.py"):
        if revision.name[:4].isdigit() and int(revision.name[:4]) > last:
            revision.unlink()
    monkeypatch.setenv("GAPLESS_SCHEMA_DIR", str(schema))


def test_migration_0010_keeps_every_row_and_makes_invoice_id_unique_per_tenant(
        fresh_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database at 0009 with invoices of two tenants (numbered, drafts, events, chains) is
    migrated to head: every row is kept, and the producer's key is (tenant, invoice_id)."""
    schema_up_to(9, tmp_path, monkeypatch)
    assert migrate(fresh_url, 0).to_revision == "0009"
    with psycopg.connect(driver_conninfo(fresh_url), autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) "
                     "VALUES ('acme', 'ABC', 'ABC'), ('globex', 'GLX', 'GLX')")
        for invoice_id, tenant, series in (("a-1", "acme", "ABC"), ("a-2", "acme", "ABC"),
                                           ("g-1", "globex", "GLX")):
            assert _intake(conn, invoice_id, tenant, series)[:2] == ("sealed", True)
        conn.execute("INSERT INTO invoices (invoice_id, tenant, series) "
                     "VALUES ('a-draft', 'acme', 'ABC')")
        # At 0009 the id is unique across tenants: globex cannot store acme's a-1.
        assert _intake(conn, "a-1", "globex", "GLX")[0] == "conflict"
    before = _rows(fresh_url)
    assert len(before["invoices"]) == 4

    monkeypatch.delenv("GAPLESS_SCHEMA_DIR")
    assert migrate(fresh_url, 0).from_revision == "0009"
    assert _rows(fresh_url) == before
    with psycopg.connect(driver_conninfo(fresh_url), autocommit=True) as conn:
        constraints = dict(conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = 'invoices'::regclass AND contype = 'u'").fetchall())
        assert constraints["invoices_invoice_id_tenant_key"] == "UNIQUE (invoice_id, tenant)"
        assert "invoices_invoice_id_key" not in constraints
        # Now globex stores and seals its own a-1, in its own series; acme's is untouched.
        kind, created, tenant, number = _intake(conn, "a-1", "globex", "GLX")
        assert (kind, created, tenant) == ("sealed", True, "globex")
        assert re.fullmatch(r"GLX[0-9]{4}0{8}2", str(number))  # the one after g-1
        assert _intake(conn, "a-1", "acme", "ABC")[:3] == ("busy", False, "acme")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO invoices (invoice_id, tenant, series) "
                         "VALUES ('a-1', 'acme', 'ABC')")
        # The signatures other stacks call refuse an id two tenants hold, naming them.
        with pytest.raises(psycopg.errors.CardinalityViolation, match="acme, globex"):
            conn.execute("SELECT * FROM claim_invoice('a-1', 300)")
        with pytest.raises(psycopg.errors.CardinalityViolation, match="acme, globex"):
            conn.execute("SELECT * FROM reserve_number('a-1')")
        # ... and serve an id one tenant holds, as before.
        claimed = conn.execute("SELECT kind, tenant FROM claim_invoice('a-draft', 300)")
        assert claimed.fetchone() == ("sealed", "acme")
        assert conn.execute("SELECT * FROM claim_tenant_invoice('acme', 'g-1', 300)"
                            ).fetchall() == []


def _invoice_indexes(url: str) -> set[str]:
    with psycopg.connect(driver_conninfo(url), autocommit=True) as conn:
        return {name for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'invoices'").fetchall()}


@pytest.mark.parametrize("dropped_first", [False, True],
                         ids=["by-the-migration", "concurrently-first"])
def test_migration_0023_drops_the_series_status_index_either_way(
        fresh_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dropped_first: bool) -> None:
    """At 0022 invoices has invoices_tenant_series_status_idx; migrated to head it has not —
    also when an operator dropped it CONCURRENTLY before (docs/operations.md), and nothing
    else of the table's indexes changes."""
    schema_up_to(22, tmp_path, monkeypatch)
    assert migrate(fresh_url, 0).to_revision == "0022"
    before = _invoice_indexes(fresh_url)
    assert "invoices_tenant_series_status_idx" in before
    if dropped_first:
        with psycopg.connect(driver_conninfo(fresh_url), autocommit=True) as conn:
            conn.execute("DROP INDEX CONCURRENTLY IF EXISTS invoices_tenant_series_status_idx")

    monkeypatch.delenv("GAPLESS_SCHEMA_DIR")
    result = migrate(fresh_url, 0)
    assert (result.from_revision, result.to_revision) == ("0022", head_revision(fresh_url))
    assert _invoice_indexes(fresh_url) == before - {"invoices_tenant_series_status_idx"}
