"""``gapless chain``: the tamper-evident chain of every counter (docs/chain.md).

``gapless chain verify`` recomputes every record from the database (or, given a directory, from
an export, with no database) and exits 1 naming the first broken number; ``gapless chain export
--out DIR`` writes the chains with the stored messages and documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from gapless.cli.common import DatabaseUrlOption, run, settings_from

if TYPE_CHECKING:
    from gapless.chain import ChainReport

chain_app = typer.Typer(help="The tamper-evident chain of every series (docs/chain.md).",
                        no_args_is_help=True)


@chain_app.command("verify")
def verify(
    directory: Path | None = typer.Argument(
        None, help="An export (gapless chain export --out DIR): verify it with no database."),
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Recompute every chain (in the database, or in an export); exit 1 naming the first
    broken number."""
    if directory is not None:
        from gapless.chain import verify_export

        if not (directory / "manifest.json").is_file():
            raise typer.BadParameter(f"{directory} holds no manifest.json", param_hint="DIR")
        reports = [r for r in verify_export(directory)
                   if (tenant is None or r.tenant == tenant)
                   and (series is None or r.series == series)]
    else:
        settings = settings_from(database_url=database_url)
        reports = run(_verify(settings.database_url, tenant, series))
    _print(reports)
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


@chain_app.command("export")
def export(
    out: Path = typer.Option(..., "--out", help="Directory to write (created if missing)."),
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Write every chain with its invoices' messages and documents to DIR (one snapshot)."""
    settings = settings_from(database_url=database_url)
    manifest = run(_export(settings.database_url, out, tenant, series))
    typer.echo(f"chain: exported {len(manifest['chains'])} chain(s) to {out}")


async def _export(url: str, out: Path, tenant: str | None,
                  series: str | None) -> dict[str, Any]:
    from gapless.chain import export as export_chains
    from gapless.db import make_engine

    engine = make_engine(url, actor="chain", pool_size=1)
    try:
        return await export_chains(engine, out, tenant=tenant, series=series)
    finally:
        await engine.dispose()


async def _verify(url: str, tenant: str | None, series: str | None) -> list[ChainReport]:
    from gapless.chain import verify as verify_chains
    from gapless.db import make_engine

    engine = make_engine(url, actor="chain", pool_size=1)
    try:
        return await verify_chains(engine, tenant=tenant, series=series)
    finally:
        await engine.dispose()


def _print(reports: list[ChainReport]) -> None:
    console = Console(highlight=False, width=200)
    table = Table(title=f"chains ({len(reports)})", title_justify="left")
    for name in ("tenant", "series", "period", "first", "last", "head", "seals", "issued",
                 "rejected", "voided", "corrected", "migrated"):
        table.add_column(name, overflow="fold")
    for r in reports:
        head = f"{r.head_seq}:{(r.head_hash or '-')[:16]}"
        table.add_row(r.tenant, r.series, r.period_key, r.first_number or "-",
                      r.last_number or "-", head,
                      *(str(r.counts[k]) for k in ("seal", "issued", "rejected", "voided",
                                                   "corrected", "migrated")))
    console.print(table)
    broken = [r for r in reports if not r.ok]
    for r in broken:
        where = f"{r.tenant}/{r.series}/{r.period_key}"
        what = (f"number {r.broken_number or '?'} ({r.broken_no})" if r.broken_no is not None
                else "the chain")
        console.print(f"chain: BROKEN {where}: {what}: {r.reason}")
    if not broken:
        console.print(f"chain: verified, {len(reports)} chain(s), "
                      f"{sum(r.counts['seal'] for r in reports)} sealed number(s)")


def register(app: typer.Typer) -> None:
    app.add_typer(chain_app, name="chain")
