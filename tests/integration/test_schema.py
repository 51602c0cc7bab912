"""The schema proven twice: migrations equal the metadata the code expects; migrate is idempotent;
the downgrade/upgrade round trip works."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.database import make_sync_engine
from gapless.ledger.migrations import downgrade, migrate
from tests.conftest import RUN_ID, database_url, drop_database
from tests.helpers import run_gapless
from tests.schema_model import EXPECTED_FUNCTIONS, metadata


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A database name that does not exist yet (migrate must create it)."""
    name = f"gapless_fresh_{RUN_ID}_{uuid.uuid4().hex[:8]}"
    yield database_url(name)
    drop_database(name)


def schema_dump(url: str) -> str:
    conninfo = driver_conninfo(url)
    dump = subprocess.run(["pg_dump", "--schema-only", "--no-owner", conninfo], check=True,
                          capture_output=True, text=True).stdout
    # pg_dump marks each dump with a random \restrict key; the schema is everything else.
    return "\n".join(line for line in dump.splitlines()
                     if not line.startswith(("\\restrict", "\\unrestrict")))


def test_migrated_database_equals_the_code_metadata(db_url: str) -> None:
    engine = make_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, metadata)
            functions = set(conn.execute(text(
                "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'public'")).scalars())
    finally:
        engine.dispose()
    diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name == "alembic_version")]
    assert diff == []
    assert functions >= EXPECTED_FUNCTIONS


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
    migrate(fresh_url, 0)
    before = schema_dump(fresh_url)
    downgrade(fresh_url, "base")
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
