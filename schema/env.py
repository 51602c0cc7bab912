"""Alembic environment for gapless: runs the ordered migrations in schema/versions."""

from __future__ import annotations

from alembic import context

from gapless.ledger.database import make_sync_engine

config = context.config
url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")


def run_migrations_offline() -> None:
    # Offline mode only renders SQL: the dialect is all it needs of the URL.
    context.configure(url="postgresql+psycopg://", literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_sync_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
