"""``gapless tenant set|show``: a tenant's issuer profile (the supplier party of its documents).

A tenant with a profile gets UBL-TR 2.1 documents; one without keeps the message's JSON. ``set``
adds a version when something changed (identical: nothing written); invoices already sealed keep
the version they were sealed with.

``set`` checks, before anything is written (a usage error, exit 2, naming the flag and never
echoing the number): the tax id's check digit — a 10-digit VKN or an 11-digit TCKN, with
python-stdnum — and that none of the tenant's series prints numbers GİB forbids (a UBL-TR
tenant's messages of such a series would be dead-lettered; ``--force`` sets the profile anyway,
with a warning per series).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from gapless.cli.options import DatabaseUrlOption, run, settings_from
from gapless.cli.printable import console, echo, echo_json
from gapless.settings import Settings

tenant_app = typer.Typer(help="Issuer profiles: who issues a tenant's documents.",
                         no_args_is_help=True)

TenantArgument = typer.Argument(..., metavar="TENANT", help="The tenant (company).")


@tenant_app.command("set")
def tenant_set(
    tenant: str = TenantArgument,
    tax_id: str = typer.Option(..., "--tax-id", help="VKN (10 digits) or TCKN (11 digits)."),
    name: str = typer.Option(..., "--name", help="Registered name (title)."),
    tax_office: str = typer.Option(..., "--tax-office", help="Tax office (vergi dairesi)."),
    street: str = typer.Option(..., "--street", help="Street and number."),
    district: str = typer.Option(..., "--district", help="District (ilçe)."),
    city: str = typer.Option(..., "--city", help="City (il)."),
    country: str = typer.Option("Türkiye", "--country", help="Country name."),
    postal_zone: str | None = typer.Option(None, "--postal-zone", help="Postal code."),
    email: str | None = typer.Option(None, "--email", help="Contact e-mail."),
    force: bool = typer.Option(
        False, "--force",
        help="Set the profile although a series of the tenant cannot print GİB's numbers (its "
             "messages will be dead-lettered)."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Set the tenant's issuer profile: its documents become UBL-TR 2.1."""
    from gapless.documents import IssuerError, build_issuer
    from gapless.errors import SeriesError
    from gapless.numbers import check_tenant

    try:
        check_tenant(tenant)
        issuer = build_issuer(tax_id=tax_id, name=name, tax_office=tax_office, street=street,
                              district=district, city=city, country=country,
                              postal_zone=postal_zone, email=email)
    except (SeriesError, IssuerError) as exc:
        raise typer.BadParameter(str(exc)) from None
    check_tax_id(issuer.tax_id)
    settings = settings_from(database_url=database_url)
    written, version, problems = run(_set(settings, tenant, issuer, force=force))
    if not written:
        from gapless.cli.series import ubl_series_refusal

        more = f" (and {len(problems) - 1} more series)" if len(problems) > 1 else ""
        raise typer.BadParameter(f"{ubl_series_refusal(tenant, problems[0])}{more}; define a "
                                 "GİB series (3-character prefix, --reset yearly) for its "
                                 "messages, or give --force")
    if version is None:
        echo(f"tenant {tenant}: profile unchanged (identical to the one in force)")
    else:
        echo(f"tenant {tenant}: profile version {version} in force; its invoices sealed "
             "from now on get UBL-TR 2.1 documents")
    if problems:
        from gapless.cli.series import ubl_series_refusal

        for problem in problems:  # only with --force
            echo(f"warning: {ubl_series_refusal(tenant, problem)}", err=True)


def check_tax_id(tax_id: str) -> None:
    """A usage error unless ``tax_id`` is a VKN (10 digits) or a TCKN (11 digits) whose check
    digits match (python-stdnum's ``stdnum.tr.vkn`` and ``stdnum.tr.tckimlik``). The message
    names the flag, never the number."""
    from stdnum.exceptions import ValidationError
    from stdnum.tr import tckimlik, vkn

    kind, module = ("TCKN", tckimlik) if len(tax_id) == 11 else ("VKN", vkn)
    try:
        module.validate(tax_id)
    except ValidationError:
        raise typer.BadParameter(
            f"--tax-id: not a valid {kind}: its check digit does not match (a typing "
            "mistake? take the number from the tax registration)") from None


async def _set(settings: Settings, tenant: str, issuer: Any, *,
               force: bool) -> tuple[bool, int | None, list[str]]:
    """Write the profile unless one of the tenant's series cannot print GİB's numbers and not
    ``force``: (written, the new version or None when identical, why each such series cannot)."""
    from gapless.ledger.database import short_lived
    from gapless.ledger.series import list_series, series_spec
    from gapless.ledger.tenants import set_profile
    from gapless.numbers import gib_layout_problem

    async with short_lived(settings.database_url, actor="operator") as db:
        rows = await list_series(db, tenant=tenant)  # a row per counter period: one per series
        problems = list(dict.fromkeys(
            problem for row in rows
            if (problem := gib_layout_problem(series_spec(row))) is not None))
        if problems and not force:
            return False, None, problems
        return True, await set_profile(db, tenant, issuer), problems


@tenant_app.command("show")
def tenant_show(
    tenant: str | None = typer.Argument(None, metavar="[TENANT]",
                                        help="One tenant (default: every tenant with a profile)."),
    as_json: bool = typer.Option(False, "--json", help="JSON on stdout."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """The issuer profile in force (tax ids are shown: this is the operator's own data)."""
    settings = settings_from(database_url=database_url)
    profiles = run(_profiles(settings, tenant))
    if tenant is not None and not profiles:
        echo(f"tenant {tenant}: no issuer profile (its documents are the message's JSON)")
        raise typer.Exit(1)
    if as_json:
        echo_json([_as_dict(p) for p in profiles], indent=2, ensure_ascii=False)
        return
    table = Table(title="issuer profiles", title_justify="left")
    for column in ("tenant", "version", "tax id", "name", "tax office", "address", "e-mail"):
        table.add_column(column, overflow="fold")
    for profile in profiles:
        issuer = profile.issuer
        address = ", ".join(part for part in (issuer.street, issuer.district, issuer.city,
                                              issuer.postal_zone, issuer.country) if part)
        table.add_row(profile.tenant, str(profile.version), issuer.tax_id, issuer.name,
                      issuer.tax_office, address, issuer.email or "-")
    console(width=120).print(table)


def _as_dict(profile: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {"tenant": profile.tenant, "version": profile.version,
            **asdict(profile.issuer), "created_at": profile.created_at.isoformat()}


async def _profiles(settings: Settings, tenant: str | None) -> list[Any]:
    from gapless.ledger.database import short_lived
    from gapless.ledger.tenants import profiles_in_force

    async with short_lived(settings.database_url, actor="operator") as db:
        return await profiles_in_force(db, tenant)


def register(app: typer.Typer) -> None:
    app.add_typer(tenant_app, name="tenant")
