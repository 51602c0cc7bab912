"""``gapless demo`` drops and re-creates its database only when it created it itself: it marks
its database with a comment, and refuses — one line, exit 2, before anything is dropped or
started — an existing database of its name without the mark, unless ``--force``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from gapless.demo.runner import (
    DEMO_MARK,
    DemoConfig,
    NotDemoDatabase,
    foreign_database,
    prepare_database,
)
from gapless.settings import Settings
from tests.conftest import create_database, database_url, drop_database
from tests.helpers import run_gapless


@pytest.fixture
def demo_name() -> Iterator[str]:
    name = f"gapless_demo_t_{uuid.uuid4().hex[:8]}"
    yield name
    drop_database(name)


def table_names(name: str) -> set[str]:
    with psycopg.connect(database_url(name)) as conn:
        return {row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def comment(name: str) -> str | None:
    with psycopg.connect(database_url("postgres")) as conn:
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                           "WHERE datname = %s", (name,)).fetchone()
    assert row is not None, f"database {name} does not exist"
    return row[0]


def someone_elses(name: str) -> None:
    """A database of the demo's name holding somebody's data (no demo mark)."""
    create_database(name)
    with psycopg.connect(database_url(name), autocommit=True) as conn:
        conn.execute("CREATE TABLE precious (note text)")


def test_the_demo_refuses_a_database_it_did_not_create(demo_name: str,
                                                       gapless_env: dict[str, str]) -> None:
    someone_elses(demo_name)
    result = run_gapless(["demo", "--database", demo_name, "--invoices", "1"], gapless_env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("gapless: error (gapless demo): "), line
    for fragment in (f"database {demo_name!r} (postgresql://", "was not created by gapless "
                     "demo", "--force"):
        assert fragment in line, line
    assert f"/{demo_name})" in line  # the server and the database the demo would drop
    assert result.stdout == ""
    assert table_names(demo_name) == {"precious"}  # nothing dropped


async def test_the_demo_marks_its_database_and_drops_only_a_marked_one(
        demo_name: str, settings: Settings) -> None:
    assert foreign_database(settings, demo_name) is None  # absent: the demo may create it
    await prepare_database(settings, DemoConfig(database=demo_name))
    assert comment(demo_name) == DEMO_MARK
    assert "invoices" in table_names(demo_name)
    assert foreign_database(settings, demo_name) is None  # its own: the next run may drop it
    with psycopg.connect(database_url(demo_name), autocommit=True) as conn:
        conn.execute("CREATE TABLE left_by_the_last_run (one integer)")
    await prepare_database(settings, DemoConfig(database=demo_name))
    assert "left_by_the_last_run" not in table_names(demo_name)  # dropped and made afresh
    assert comment(demo_name) == DEMO_MARK


async def test_force_drops_a_database_the_demo_did_not_create(
        demo_name: str, settings: Settings) -> None:
    someone_elses(demo_name)
    refusal = foreign_database(settings, demo_name)
    assert refusal is not None
    assert "was not created by gapless demo" in refusal
    with pytest.raises(NotDemoDatabase, match="--force"):
        await prepare_database(settings, DemoConfig(database=demo_name))
    assert table_names(demo_name) == {"precious"}
    await prepare_database(settings, DemoConfig(database=demo_name, force=True))
    assert "precious" not in table_names(demo_name)
    assert comment(demo_name) == DEMO_MARK
