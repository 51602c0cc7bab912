"""``gapless migrate``: create the database if missing and bring the schema up to date."""

from __future__ import annotations

import typer

from gapless.cli.options import ClusterIdOption, DatabaseUrlOption, settings_from
from gapless.cli.printable import echo


def migrate(database_url: str | None = DatabaseUrlOption,
            cluster_id: int | None = ClusterIdOption) -> None:
    """Create the database if missing and bring the schema up to date (idempotent)."""
    from gapless.ledger.migrations import migrate as do_migrate

    settings = settings_from(database_url=database_url, cluster_id=cluster_id)
    result = do_migrate(settings.database_url, settings.cluster_id)
    parts = []
    if result.created_database:
        parts.append("created database")
    if result.from_revision != result.to_revision:
        parts.append(f"schema {result.from_revision or 'empty'} -> {result.to_revision}")
    else:
        parts.append(f"schema at {result.to_revision}, nothing to do")
    echo(f"migrate: {', '.join(parts)}; cluster id {result.cluster_id}")


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)
