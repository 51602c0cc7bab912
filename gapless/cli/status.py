"""``gapless status [--watch] [--json]``: the system at a glance, for operators.

The snapshot is :mod:`gapless.ops.status`'s (what it shows, and that it only reads); this module
renders it — a table and lines that fit 80 columns, refreshed with ``--watch``, or one JSON
document per snapshot — and fails a one-shot status (exit 1, one line) when RabbitMQ cannot be
reached, after showing what it could read. Values from the database and the broker are printed
as text, never as rich markup.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

from gapless.cli.options import AmqpUrlOption, DatabaseUrlOption, QueueOption, run, settings_from
from gapless.cli.printable import console, echo_json, plain, printable
from gapless.ops.status import (
    BreakerStatus,
    FeedStatus,
    ProfileStatus,
    QueueStatus,
    SeriesStatus,
    Status,
)
from gapless.settings import Settings

#: Of the documents GİB refused in a snapshot, the lines of the table view.
GIB_REFUSED_LINES = 10


# ---------------------------------------------------------------------------------- rendering


def format_age(seconds: float | None) -> str:
    """An age in its two largest units (``42s``, ``3m07s``, ``2h05m``, ``1d03h``); ``-``: none."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"


def _count(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def render(status: Status) -> Any:
    """A rich renderable that fits 80 columns: the series table, then queue, breakers, issuer
    profiles and the feed."""
    from rich.console import Group
    from rich.text import Text

    lines = Text()
    _alarm_lines(lines, status.series)
    _queue_lines(lines, status.queue)
    _breaker_lines(lines, status.breakers)
    _profile_lines(lines, status.profiles)
    if status.feed is not None:
        _feed_lines(lines, status.feed)
    _gib_lines(lines, status)
    _answer_lines(lines, status)
    return Group(_series_table(status), lines)


def _series_table(status: Status) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True,
                  title=f"gapless status  {status.at}",
                  title_justify="left", caption="oldest: age of the oldest SENDING lease",
                  caption_justify="left")
    # Numbers never wrap; a long tenant/series name folds instead, so the table fits 80 columns.
    table.add_column("tenant/series", overflow="fold", min_width=12)
    table.add_column("last number", no_wrap=True)
    for column in ("issued", "sending", "error", "rejected", "oldest"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in status.series:
        error = f"{row.error:,}" + ("!" if row.alarms else "")
        table.add_row(plain(f"{row.tenant}/{row.series}"), plain(row.last_number or "-"),
                      f"{row.issued:,}", f"{row.sending:,}", error, f"{row.rejected:,}",
                      format_age(row.oldest_sending_age_s))
    if not status.series:
        table.add_row("(no series)", "-", "-", "-", "-", "-", "-")
    return table


def _alarm_lines(lines: Any, series: list[SeriesStatus]) -> None:
    alarms = [f"{printable(row.tenant)}/{printable(row.series)}: {row.alarms}"
              for row in series if row.alarms]
    if alarms:
        # An alarm is an ERROR that is never retried by itself: the integrator holds the number
        # for another invoice. A person must look (see the runbook).
        lines.append("alarms (error!): ", style="bold red")
        lines.append(", ".join(alarms) + "\n")


def _queue_lines(lines: Any, queue: QueueStatus) -> None:
    lines.append(f"queue {printable(queue.name)}: ", style="bold")
    lines.append(f"{_count(queue.ready)} ready")
    if queue.unacked is not None:
        lines.append(f", {queue.unacked:,} in flight")
    if queue.by_priority is not None:
        lines.append(f" (user {queue.by_priority['user']:,}, "
                     f"batch {queue.by_priority['batch']:,})")
    if queue.note:
        lines.append(f"\n  {printable(queue.note)}", style="dim")
    lines.append(f"\ndead letters {printable(queue.dead_queue)}: ", style="bold")
    lines.append(_count(queue.dead_letters), style="red" if queue.dead_letters else "")


def _breaker_lines(lines: Any, breakers: list[BreakerStatus]) -> None:
    for breaker in breakers:
        lines.append("\nbreaker", style="bold")
        if breaker.name:
            lines.append(f" {printable(breaker.name)}", style="bold")
        style = {"closed": "green", "open": "red", "half-open": "yellow"}.get(breaker.state, "")
        lines.append(": ")
        lines.append(breaker.state, style=style)
        if breaker.source != "-":
            lines.append(f"  {printable(breaker.source)}", style="dim")
        elif breaker.state == "unknown":
            lines.append("  (give --metrics-url of each worker/recovery)", style="dim")


def _profile_lines(lines: Any, profiles: list[ProfileStatus]) -> None:
    lines.append("\nissuer profiles: ", style="bold")
    if not profiles:
        lines.append("none (every tenant gets JSON documents)", style="dim")
    for profile in profiles:
        lines.append("\n  " + printable(f"{profile.tenant} v{profile.version}: {profile.name}, "
                                         f"{profile.tax_office} tax office, {profile.city} "
                                         "(UBL-TR)"))


def _feed_lines(lines: Any, feed: FeedStatus) -> None:
    lines.append("\nfeed: ", style="bold")
    lines.append(f"top position {_count(feed.top) if feed.top is not None else '-'}, "
                 f"{feed.waiting:,} committed event(s) waiting for a position")
    if feed.holder_pid is not None:
        held = format_age(feed.holder_s)
        lines.append(f"\n  position lock held by pid {feed.holder_pid} "
                     f"({printable(str(feed.holder_state))}, "
                     f"transaction open {held})", style="yellow" if (feed.holder_s or 0) > 5
                     else "")


def _gib_lines(lines: Any, status: Status) -> None:
    """GİB's verdicts after acceptance: the refused documents (each with what to do), and the
    counts still pending and given up."""
    from gapless.ledger.verdicts import REFUSED_TODO, UNRESOLVED_TODO

    totals = status.gib_totals()
    refused, pending, unresolved = totals.refused, totals.pending, totals.unresolved
    lines.append("\nGİB after acceptance: ", style="bold")
    lines.append(f"{refused:,} refused", style="bold red" if refused else "")
    lines.append(f", {pending:,} pending, {unresolved:,} given up while pending")
    if refused:
        lines.append(f"\n  refused documents stay ISSUED and keep their numbers: {REFUSED_TODO}",
                     style="dim")
    for refusal in status.gib_refused[:GIB_REFUSED_LINES]:
        lines.append("\n  " + printable(f"{refusal.number}  {refusal.invoice_id}: "
                                         f"{refusal.detail or 'no detail'}"))
    if refused > min(len(status.gib_refused), GIB_REFUSED_LINES):
        lines.append(f"\n  … {refused - min(len(status.gib_refused), GIB_REFUSED_LINES):,} "
                     "more (gapless audit --json lists them all)", style="dim")
    if unresolved:
        lines.append(f"\n  given up while pending: {UNRESOLVED_TODO} (gapless audit lists them)",
                     style="dim")


def _answer_lines(lines: Any, status: Status) -> None:
    """Receivers' answers awaiting action: the rejections (each with what to do), and how many
    documents went unanswered within their legal window. Nothing when there is neither."""
    rejected = sum(row.answers_rejected for row in status.series)
    unanswered = sum(row.unanswered for row in status.series)
    if not rejected and not unanswered:
        return
    lines.append("\nreceivers' answers: ", style="bold")
    lines.append(f"{rejected:,} rejected", style="bold red" if rejected else "")
    lines.append(f", {unanswered:,} unanswered within the legal window")
    if status.answers_rejected:
        lines.append(f"\n  {status.answers_rejected[0].todo}", style="dim")
    for rejection in status.answers_rejected[:GIB_REFUSED_LINES]:
        lines.append("\n  " + printable(f"{rejection.number}  {rejection.invoice_id}: "
                                         f"{rejection.code}, {rejection.detail}"))
    if rejected > min(len(status.answers_rejected), GIB_REFUSED_LINES):
        lines.append(f"\n  … {rejected - min(len(status.answers_rejected), GIB_REFUSED_LINES):,}"
                     " more (gapless invoice list --answer RED)", style="dim")


# ---------------------------------------------------------------------------------- command


async def _status(settings: Settings, *, watch: bool, interval: float, as_json: bool,
                  tenant: str | None, series: str | None, metrics_urls: list[str],
                  management_url: str | None) -> None:
    from rich.live import Live

    from gapless.ops.status import StatusReader

    out = console()
    async with StatusReader(settings, tenant=tenant, series=series, metrics_urls=metrics_urls,
                            management_url=management_url) as reader:
        snapshot = reader.snapshot
        if as_json:
            while True:
                # One JSON document per line: with --watch, a JSON Lines stream.
                shown = await snapshot()
                echo_json(shown.as_dict())
                if not watch:
                    _fail_if_broker_unreachable(shown)
                    return
                await asyncio.sleep(interval)  # the refresh period, not synchronisation
        if not watch:
            shown = await snapshot()
            out.print(render(shown))
            _fail_if_broker_unreachable(shown)
            return
        with Live(render(await snapshot()), console=out, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval)  # the refresh period, not synchronisation
                live.update(render(await snapshot()), refresh=True)


def _fail_if_broker_unreachable(shown: Status) -> None:
    """A one-shot status shows what it could read, then fails like every command when RabbitMQ
    cannot be reached (one line, exit 1). ``--watch`` keeps going: the note says it."""
    if shown.broker_error is not None:
        raise shown.broker_error


def status(
    watch: bool = typer.Option(False, "--watch", help="Refresh until Ctrl-C."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print JSON (with --watch: one document per line)."),
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    metrics_urls: list[str] = typer.Option(
        [], "--metrics-url",
        help="Prometheus endpoint of a worker or recovery process (repeatable), for the "
             "breaker state, e.g. http://127.0.0.1:9100/metrics."),
    management_url: str | None = typer.Option(
        None, "--management-url",
        help="RabbitMQ management API for per-priority depth (default: the broker's host, "
             "port 15672, with the AMQP credentials)."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Per series: last number, issued, sending, errors, rejections, oldest SENDING; queue depth,
    dead letters and breaker state."""
    settings = settings_from(database_url=database_url, amqp_url=amqp_url, queue=queue)
    try:
        run(_status(settings, watch=watch, interval=interval, as_json=as_json, tenant=tenant,
                    series=series, metrics_urls=list(metrics_urls),
                    management_url=management_url))
    except KeyboardInterrupt:
        if not watch:
            raise
        # Ctrl-C is how --watch ends: a normal exit.


def register(app: typer.Typer) -> None:
    app.command("status")(status)
