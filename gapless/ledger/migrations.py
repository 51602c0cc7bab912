"""``gapless migrate``: create the database if missing, bring the schema up to date, record the
cluster id. Safe to run twice and from several processes at once (an advisory lock serialises it).

The migrations (``schema/versions``, running ``schema/sql``) are history; the live schema, one
file per concern, is ``schema/current/`` (:func:`build_from_current` applies it to an empty
database). tests/integration/test_schema.py proves the two build the same database.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql
from sqlalchemy import Connection

from gapless.errors import ClusterMismatchError, ConfigurationError, IrreversibleMigration
from gapless.ledger.conninfo import database_name, with_database
from gapless.ledger.database import CONNECT_TIMEOUT_S, make_sync_engine
from gapless.ledger.queries import config as q

# Any constant works; it only has to be the same for every `gapless migrate`.
MIGRATE_LOCK_KEY = 0x6761706C657373  # "gapless"


#: Where an installed distribution carries ``schema/`` (mapped in pyproject.toml).
PACKAGED_SCHEMA = Path(__file__).resolve().parents[1] / "_schema"
#: ``schema/`` of a source checkout, beside the package (the editable install runs from it).
CHECKOUT_SCHEMA = Path(__file__).resolve().parents[2] / "schema"


def is_schema_dir(path: Path) -> bool:
    """True when ``path`` holds gapless's migrations (an Alembic env and its versions)."""
    return (path / "env.py").is_file() and (path / "versions").is_dir() and (
        path / "sql").is_dir()


def schema_dir() -> Path:
    """Where the migrations live, first match wins:

    1. ``GAPLESS_SCHEMA_DIR`` when set: an explicit override, used as given (never a fallback);
    2. ``gapless/_schema`` inside the installed package (a wheel, the Docker image);
    3. ``schema/`` beside the package (a source checkout, the editable install).

    Needs no working directory and no environment variable in cases 2 and 3.
    """
    configured = os.environ.get("GAPLESS_SCHEMA_DIR")
    if configured:
        path = Path(configured)
        if not is_schema_dir(path):
            raise ConfigurationError(f"GAPLESS_SCHEMA_DIR={configured} holds no gapless "
                                     "migrations (env.py, versions/, sql/); unset it to use "
                                     "the ones installed with gapless")
        return path
    for path in (PACKAGED_SCHEMA, CHECKOUT_SCHEMA):
        if is_schema_dir(path):
            return path
    raise ConfigurationError(f"no migrations found in {PACKAGED_SCHEMA} or {CHECKOUT_SCHEMA}: "
                             "this gapless is installed without its schema; reinstall it from "
                             "a wheel or the repository, or set GAPLESS_SCHEMA_DIR")


def run_sql_file(bind: Connection, name: str | Path) -> None:
    """Run one SQL file as it is (no parameter substitution, several statements): ``name`` in
    ``schema/sql``, or a path."""
    path = name if isinstance(name, Path) else schema_dir() / "sql" / name
    source = path.read_text(encoding="utf-8")
    dbapi = bind.connection.dbapi_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        cursor.execute(source)
    finally:
        cursor.close()


def sql_revision(name: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """A revision's ``upgrade`` and ``downgrade``: run ``schema/sql/<name>.up.sql`` or
    ``<name>.down.sql`` on Alembic's connection.

    A revision without a down file is forward-only (every one after 0009): its ``downgrade``
    raises IrreversibleMigration before touching the database, and the revisions above it that
    were already stepped down stay down (each runs in its own transaction).
    """
    from alembic import op

    def upgrade() -> None:
        run_sql_file(op.get_bind(), f"{name}.up.sql")

    def downgrade() -> None:
        down = f"{name}.down.sql"
        if not (schema_dir() / "sql" / down).is_file():
            raise IrreversibleMigration(
                f"migration {name} is forward-only (there is no schema/sql/{down}): the schema "
                "cannot be stepped down past it; restore a backup taken before it instead")
        run_sql_file(op.get_bind(), down)

    return upgrade, downgrade


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(schema_dir()))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["database_url"] = database_url
    return cfg


@contextmanager
def _on_server(database_url: str) -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """An autocommit connection to database ``postgres`` of the URL's servers (every host of a
    multi-host URL, and its ``target_session_attrs``), and the name of the URL's database."""
    name = database_name(database_url)
    if not name:
        raise ConfigurationError("GAPLESS_DATABASE_URL names no database")
    with psycopg.connect(with_database(database_url, "postgres"), autocommit=True,
                         connect_timeout=CONNECT_TIMEOUT_S) as conn:
        yield conn, name


def ensure_database(database_url: str) -> bool:
    """Create the database named in the URL when it does not exist. True when it was created.

    Asks database ``postgres`` of the same servers (every host of a multi-host URL, and its
    ``target_session_attrs``: the database is created on the primary)."""
    with _on_server(database_url) as (conn, name):
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %(name)s",
                        {"name": name}).fetchone():
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            return False  # another `gapless migrate` won the race
        return True


def reach_server(database_url: str) -> None:
    """Connect once to database ``postgres`` of the URL's servers (the database itself may not
    exist yet): raises psycopg's OperationalError when no server answers."""
    with psycopg.connect(with_database(database_url, "postgres"),
                         connect_timeout=CONNECT_TIMEOUT_S):
        pass


def drop_database(database_url: str) -> None:
    """Drop the database named in the URL, closing its connections (FORCE); nothing when it does
    not exist. Asks database ``postgres`` of the same servers, like :func:`ensure_database`."""
    with _on_server(database_url) as (conn, name):
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


def database_comment(database_url: str) -> tuple[bool, str | None]:
    """Whether the database named in the URL exists, and its comment (``COMMENT ON DATABASE``;
    None: none). Asks database ``postgres`` of the same servers."""
    with _on_server(database_url) as (conn, name):
        row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                           "WHERE datname = %(name)s", {"name": name}).fetchone()
    return (False, None) if row is None else (True, row[0])


def comment_database(database_url: str, comment: str) -> None:
    """Set the comment of the database named in the URL (its owner may; the comment is a
    literal, quoted by psycopg)."""
    with _on_server(database_url) as (conn, name):
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(
            sql.Identifier(name), sql.Literal(comment)))


@dataclass(frozen=True)
class MigrateResult:
    created_database: bool
    from_revision: str | None
    to_revision: str | None
    cluster_id: int

    @property
    def changed(self) -> bool:
        return self.created_database or self.from_revision != self.to_revision


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


def migrate(database_url: str, cluster_id: int) -> MigrateResult:
    """Bring the database to the newest schema and pin its cluster id (refusing a different one)."""
    created = ensure_database(database_url)
    cfg = alembic_config(database_url)
    engine = make_sync_engine(database_url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(q.MIGRATE_LOCK, {"key": MIGRATE_LOCK_KEY})
            conn.commit()
            try:
                before = current_revision(conn)
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
                after = current_revision(conn)
                conn.exec_driver_sql(q.PIN_CLUSTER_ID, {"cluster_id": cluster_id})
                stored = conn.exec_driver_sql(q.GET_CLUSTER_ID).scalar_one()
                conn.commit()
            finally:
                conn.rollback()
                conn.exec_driver_sql(q.MIGRATE_UNLOCK, {"key": MIGRATE_LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()
    if stored != cluster_id:
        raise ClusterMismatchError(cluster_id, stored)
    return MigrateResult(created, before, after, stored)


#: The files of ``schema/current/``, in the order :func:`build_from_current` applies them: the
#: tables first (they call no function), then each concern; a trigger, or a SQL-language function,
#: comes after the functions it names (PL/pgSQL bodies are resolved when they run).
CURRENT_FILES = ("tables.sql", "ids.sql", "numbering.sql", "intake.sql", "history.sql",
                 "chain.sql", "feed.sql", "gib.sql", "outcomes.sql", "routing.sql")


def current_files() -> list[Path]:
    """The files of ``schema/current/`` in the order they apply. Raises ConfigurationError when
    the folder and CURRENT_FILES disagree (a file added to one and not the other)."""
    folder = schema_dir() / "current"
    present = {path.name for path in folder.glob("*.sql")}
    if present != set(CURRENT_FILES):
        raise ConfigurationError(
            f"{folder} holds {sorted(present)} but CURRENT_FILES in gapless/ledger/migrations.py "
            f"lists {sorted(CURRENT_FILES)}: list every file of schema/current/ there, in order")
    return [folder / name for name in CURRENT_FILES]


def build_from_current(database_url: str) -> None:
    """Build the newest schema from ``schema/current/`` in an empty database (created when
    missing), in one transaction, and stamp it with the head revision, so that ``gapless
    migrate`` then finds nothing to upgrade (it still pins the cluster id: run it next).

    For tests and reading; production databases are made by :func:`migrate`. Raises
    ConfigurationError when the database already holds tables or functions.
    """
    ensure_database(database_url)
    cfg = alembic_config(database_url)
    engine = make_sync_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(q.MIGRATE_XACT_LOCK, {"key": MIGRATE_LOCK_KEY})
            occupied = conn.exec_driver_sql(q.SCHEMA_OCCUPIED).scalar_one()
            if occupied:
                raise ConfigurationError(
                    f"database {database_name(database_url)} is not empty: schema/current/ "
                    "builds a new database only; bring an existing one up with gapless migrate")
            for path in current_files():
                run_sql_file(conn, path)
            cfg.attributes["connection"] = conn
            command.stamp(cfg, "head")
    finally:
        engine.dispose()


def downgrade(database_url: str, revision: str = "base") -> None:
    """Step the schema down (development and the round-trip test only; drops data)."""
    command.downgrade(alembic_config(database_url), revision)
