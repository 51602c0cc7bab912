"""``gapless audit``: are the numbers gap-free and unique (I1–I3), where did each number that is
not ISSUED go, does every chain verify (I8; against signed checkpoints with ``--public-key``), and
(``--integrator``) does the integrator agree (I7)? Exit 1 on any violation.
Findings that are not violations (documents GİB refused after acceptance, or never gave a verdict
on) are listed with what to do, and leave the exit code alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from gapless.cli.chain import CheckpointsOption, PublicKeyOption, load_checkpoints
from gapless.cli.options import DatabaseUrlOption, IntegratorUrlOption, run, settings_from
from gapless.cli.printable import console as text_console
from gapless.cli.printable import echo_json
from gapless.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

    from gapless.ops.audit import AuditReport
    from gapless.ops.checkpoints import Checkpoints


def audit(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    integrator: bool = typer.Option(
        False, "--integrator",
        help="Also compare the ISSUED invoices with the integrator (its ledger if it has one, "
             "else a lookup of every pinned number)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    horizon: float = typer.Option(
        600.0, "--horizon", min=0,
        help="Seconds an invoice may stay SENDING before it counts as stuck (I4)."),
    deep: bool = typer.Option(
        False, "--deep",
        help="Also re-render every printed number from its counter value (slower)."),
    limit: int = typer.Option(50, "--limit", min=0,
                              help="Rows of numbers-not-issued shown in the table (--json: all)."),
    no_chain: bool = typer.Option(
        False, "--no-chain",
        help="Skip the chain's verification (it reads every stored message and document)."),
    public_key: list[Path] | None = PublicKeyOption,
    checkpoints: Path | None = CheckpointsOption,
    database_url: str | None = DatabaseUrlOption,
    integrator_url: str | None = IntegratorUrlOption,
) -> None:
    """Check I1–I3 for every counter, I8 for every chain (and I7 with --integrator); exit 1
    on any violation."""
    settings = settings_from(database_url=database_url, integrator_url=integrator_url)
    if no_chain and (public_key or checkpoints):
        raise typer.BadParameter("--no-chain with checkpoints to check")
    signed = None if no_chain else load_checkpoints(public_key, checkpoints,
                                                    setting=settings.chain_checkpoints)
    report = run(_audit(settings, tenant=tenant, series=series, integrator=integrator,
                        horizon_s=horizon, deep=deep, chain=not no_chain, checkpoints=signed))
    if as_json:
        echo_json(report.as_dict(), indent=2)
    else:
        _print(report, limit=limit)
    if not report.ok:
        raise typer.Exit(1)


async def _audit(settings: Settings, *, tenant: str | None, series: str | None,
                 integrator: bool, horizon_s: float, deep: bool, chain: bool,
                 checkpoints: Checkpoints | None) -> AuditReport:
    from gapless.integrator.accounts import Accounts
    from gapless.ledger.database import short_lived
    from gapless.ops.audit import check_accounts, check_chains, check_database

    async with short_lived(settings.database_url, actor="audit", pool_size=2) as db:
        report = await check_database(db, tenant=tenant, series=series, horizon_s=horizon_s,
                                      deep=deep)
        if chain:
            broken, report.chain = await check_chains(db, tenant=tenant, series=series,
                                                      checkpoints=checkpoints)
            report.add_counted(broken)
        if integrator:
            guard = Accounts.open(settings, name="audit")
            try:
                violations, check = await check_accounts(
                    db, guard, tenant=tenant, series=series,
                    horizon_s=horizon_s, timeout_s=max(settings.integrator_timeout_s, 30.0))
            finally:
                await guard.aclose()
            report.violations.extend(violations)
            report.integrator = check
        return report


def _print(report: AuditReport, *, limit: int) -> None:
    """The report for a person: totals, counters, violations, numbers not issued, the
    integrator's side, and the verdict — every value from the ledger or the integrator shown as
    text (:func:`gapless.cli.printable.console`)."""
    console = text_console()
    numbered = sum(c.numbered for c in report.counters)
    issued = sum(c.issued for c in report.counters)
    console.print(f"audit: {len(report.counters)} counter(s), {numbered} pinned number(s), "
                  f"{issued} issued")
    if report.counters:
        console.print(_counters_table(report))
    if report.violations:
        console.print(_violations_table(report))
        todos = {v.kind: v.todo for v in report.violations if v.todo}
        for kind, todo in todos.items():
            console.print(f"what to do ({kind}): {todo}")
    if report.not_issued:
        _print_not_issued(console, report, limit)
    if report.findings:
        _print_findings(console, report, limit)
    if report.chain is not None:
        chain = report.chain
        line = f"chain: {chain.chains} chain(s), {chain.sealed} sealed number(s) recomputed"
        if chain.checkpoints is not None:
            line += (f"; {chain.checkpoints} signed checkpoint(s), the latest at "
                     f"{chain.latest_checkpoint or '-'}, matched by {chain.anchored} chain(s)")
        console.print(line)
    if report.integrator is not None:
        check = report.integrator
        line = (f"integrator ({check.source}): {check.documents} accepted document(s) "
                "in scope")
        if check.in_flight:
            line += f", {len(check.in_flight)} in flight (SENDING within the horizon)"
        console.print(line)
    if report.ok:
        console.print("audit: clean")
    else:
        kinds = sorted({v.kind for v in report.violations})
        console.print(f"audit: {len(report.violations)} violation(s): {', '.join(kinds)}")


def _counters_table(report: AuditReport) -> Table:
    counters = Table(title="counters", title_justify="left")
    for name in ("tenant", "series", "period", "last no"):
        counters.add_column(name, overflow="fold", justify="right" if name == "last no"
                            else "left")
    for name in ("issued", "not issued", "problems"):
        counters.add_column(name, justify="right")
    for c in report.counters:
        counters.add_row(c.tenant, c.series, c.period_key or "-",
                         "-" if c.last_no is None else str(c.last_no), str(c.issued),
                         str(c.numbered - c.issued), str(c.violations) if c.violations else "")
    return counters


def _violations_table(report: AuditReport) -> Table:
    problems = Table(title="violations", title_justify="left")
    problems.add_column("kind", overflow="fold", max_width=18)
    problems.add_column("where", overflow="fold", max_width=18)
    problems.add_column("numbers", overflow="fold", max_width=16)
    problems.add_column("detail", overflow="fold")
    for v in report.violations:
        where = "/".join(part for part in (v.tenant, v.series, v.period_key) if part)
        problems.add_row(v.kind, where, v.numbers, v.detail)
    return problems


def _print_not_issued(console: Console, report: AuditReport, limit: int) -> None:
    shown = report.not_issued[:limit] if limit else []
    table = Table(title=f"numbers not issued ({len(report.not_issued)})", title_justify="left")
    table.add_column("number", overflow="fold", max_width=18)
    table.add_column("state", max_width=9)
    table.add_column("invoice", overflow="fold", max_width=16)
    table.add_column("reason", overflow="fold")
    for n in shown:
        table.add_row(n.number, n.status, n.invoice_id, n.reason)
    if shown:
        console.print(table)
    if len(shown) < len(report.not_issued):
        console.print(f"... {len(report.not_issued) - len(shown)} more (--limit, --json)")


def _print_findings(console: Console, report: AuditReport, limit: int) -> None:
    """Documents GİB refused (or never decided on): still ISSUED, numbers accounted for."""
    from gapless.ops.audit import FINDING_KINDS

    shown = report.findings[:limit] if limit else []
    table = Table(title=f"findings, not violations ({len(report.findings)}): ISSUED, numbers "
                        "accounted for", title_justify="left")
    table.add_column("kind", max_width=14)
    table.add_column("number", overflow="fold", max_width=18)
    table.add_column("invoice", overflow="fold", max_width=16)
    table.add_column("detail", overflow="fold")
    for f in shown:
        table.add_row(f.kind, f.number, f.invoice_id, f.detail)
    if shown:
        console.print(table)
    if len(shown) < len(report.findings):
        console.print(f"... {len(report.findings) - len(shown)} more (--limit, --json)")
    for kind in sorted({f.kind for f in report.findings}):
        console.print(f"what to do ({kind}): {FINDING_KINDS[kind]}")


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
