"""``gapless series add | list | bump | next``: define and inspect numbering series.

A tenant with an issuer profile issues UBL-TR documents, whose numbers are GİB's: a 3-character
prefix, the year and a 9-digit sequence that restarts every year. ``series add`` refuses (exit 2)
a series that cannot print them for such a tenant — a monthly or daily reset, another prefix
length or layout — because the worker would dead-letter every message of it; ``tenant set``
refuses to give a profile to a tenant that has one (:func:`ubl_series_refusal`, one wording).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import typer
from rich.table import Table

from gapless.cli.options import DatabaseUrlOption, run, settings_from
from gapless.cli.printable import console, echo
from gapless.errors import SeriesError

series_app = typer.Typer(help="Define and inspect numbering series.", no_args_is_help=True)


@series_app.command("add")
def series_add(
    tenant: str = typer.Argument(..., help="Tenant (company) the series numbers for."),
    code: str = typer.Argument(..., help="Series code, e.g. ABC."),
    prefix: str | None = typer.Option(None, "--prefix",
                                      help="Printed prefix (default: the code, upper-case)."),
    reset: str = typer.Option("yearly", "--reset", help="never | yearly | monthly | daily"),
    tz: str = typer.Option("Europe/Istanbul", "--tz", help="Time zone of period boundaries."),
    width: int | None = typer.Option(
        None, "--width", help="Digits of the sequence (default 9; 7 monthly; 5 daily)."),
    fmt: str | None = typer.Option(
        None, "--format",
        help="Layout with {prefix} {yyyy} {yy} {mm} {dd} {seq} (default: GİB, 16 characters)."),
    channel: str = typer.Option(
        "any", "--channel",
        help="Which documents it numbers: any (invoices, no routing) | efatura | earsiv | "
             "edespatch (dispatch notes). With an efatura or earsiv series, the worker asks the "
             "integrator whether the customer is an e-Fatura user before sealing, and numbers "
             "each invoice in the right channel's series."),
    default: bool = typer.Option(
        False, "--default",
        help="Make it the tenant's series for its channel, used when a message names no series."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Define a series (idempotent when the definition is identical)."""
    from gapless.numbers import build_series_spec

    try:
        spec = build_series_spec(tenant, code, prefix=prefix, reset=reset, tz=tz, width=width,
                                 fmt=fmt, channel=channel, default=default)
    except SeriesError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = settings_from(database_url=database_url)
    created, problem = run(_add_series(settings.database_url, spec))
    if problem is not None:
        raise typer.BadParameter(ubl_series_refusal(spec.tenant, problem))
    verb = "added" if created else "exists (identical)"
    echo(f"series {spec.tenant}/{spec.code} {verb}: prefix {spec.prefix}, reset "
         f"{spec.reset.value}, tz {spec.tz}, format {spec.format}, width {spec.width}, "
         f"channel {spec.channel.value}" + (" (default)" if spec.default else ""))


def ubl_series_refusal(tenant: str, problem: str) -> str:
    """The one line that says why a tenant with an issuer profile cannot have a series whose
    numbers GİB forbids (``series add``, ``tenant set``)."""
    return (f"{problem}: tenant {tenant!r} has an issuer profile, so its documents are UBL-TR "
            "with GİB's numbers, and the worker would dead-letter every message of that series")


async def _add_series(database_url: str, spec: object) -> tuple[bool, str | None]:
    """Define the series: (created, None); or (False, why GİB forbids it) for a tenant with an
    issuer profile, nothing written."""
    from gapless.ledger.database import short_lived
    from gapless.ledger.series import add_series
    from gapless.ledger.tenants import profile_in_force
    from gapless.numbers import SeriesSpec, gib_layout_problem

    assert isinstance(spec, SeriesSpec)
    async with short_lived(database_url, actor="operator") as db:
        problem = gib_layout_problem(spec)
        if problem is not None and await profile_in_force(db, spec.tenant) is not None:
            return False, problem
        return await add_series(db, spec), None


@series_app.command("list")
def series_list(
    tenant: str | None = typer.Option(None, "--tenant"),
    code: str | None = typer.Option(None, "--series"),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Every series with the last number of each period."""
    settings = settings_from(database_url=database_url)
    rows = run(_list_series(settings.database_url, tenant, code))
    table = Table(title="series")
    for column in ("tenant", "series", "prefix", "reset", "tz", "channel", "period", "last no",
                   "last number"):
        table.add_column(column, justify="right" if column == "last no" else "left")
    for row in rows:
        table.add_row(row.tenant, row.code, row.prefix, row.reset, row.tz,
                      row.channel + (" (default)" if row.is_default else ""),
                      row.period_key or "-", str(row.last_no) if row.last_no else "0",
                      row.last_number or "-")
    console(width=120).print(table)


async def _list_series(database_url: str, tenant: str | None, code: str | None) -> list[Any]:
    from gapless.ledger.database import short_lived
    from gapless.ledger.series import list_series

    async with short_lived(database_url, actor="operator") as db:
        return await list_series(db, tenant=tenant, code=code)


@series_app.command("bump")
def series_bump(
    tenant: str = typer.Argument(...),
    code: str = typer.Argument(...),
    past: str = typer.Option(..., "--past", help="A printed number of the series (as the audit "
                             "names it): the counter is raised to at least its value."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Raise a counter past a number the integrator holds, so that no seal hands it out again
    (after a database lost seals: docs/operations.md); never lowers a counter."""
    settings = settings_from(database_url=database_url)
    bump = run(_bump(settings.database_url, tenant, code, past))
    where = f"counter {tenant}/{code}/{bump.period_key}"
    before = "no row" if bump.before is None else str(bump.before)
    if bump.before is not None and bump.before >= bump.after:
        echo(f"{where}: already at {bump.after}, past {past}; unchanged")
    else:
        echo(f"{where}: {before} -> {bump.after}; the next seal of this period takes no "
             f"{bump.after + 1}")


async def _bump(database_url: str, tenant: str, code: str, past: str) -> Any:
    from gapless.ledger.counters import bump_counter
    from gapless.ledger.database import short_lived

    async with short_lived(database_url, actor="operator") as db:
        return await bump_counter(db, tenant, code, past)


@series_app.command("next")
def series_next(
    tenant: str = typer.Argument(...),
    code: str = typer.Argument(...),
    at: datetime | None = typer.Option(None, "--at", help="Preview for this moment (ISO 8601)."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Show the next number without consuming it."""
    settings = settings_from(database_url=database_url)
    preview = run(_preview(settings.database_url, tenant, code, at))
    echo(f"{preview.number}  (period {preview.period_key}, no {preview.next_no})")


async def _preview(database_url: str, tenant: str, code: str, at: datetime | None) -> Any:
    from gapless.ledger.database import short_lived
    from gapless.ledger.series import preview_next

    async with short_lived(database_url, actor="operator") as db:
        return await preview_next(db, tenant, code, at)


def register(app: typer.Typer) -> None:
    app.add_typer(series_app, name="series")
