"""``gapless status [--watch] [--json]``: the system at a glance, for operators.

Per tenant/series: the last number handed out, invoices ISSUED / SENDING / ERROR / REJECTED and
the age of the oldest SENDING lease (an age above recovery's ``--stuck-after`` means recovery is
not keeping up, or the integrator is down). Then the queue: ready messages (per priority when
RabbitMQ's management API answers; AMQP itself reports only a total), dead letters, and the
circuit breaker of every worker/recovery process whose Prometheus endpoint is given with
``--metrics-url``; without one the breaker state is "unknown", because it lives inside those
processes. Then each tenant's issuer profile in force (tenants without one get JSON documents),
and the event feed: committed events still waiting for a position, and the session holding the
position lock, if any, with how long (docs/api.md: what delays the feed). Last, GİB's verdicts
after acceptance: how many documents GİB refused (and which, with what to do), how many are still
pending, and how many recovery gave up on while pending.

Reads only: one read-only statement per refresh (no locks), a passive queue declaration, and
HTTP GETs.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import typer

from gapless.cli.options import AmqpUrlOption, DatabaseUrlOption, QueueOption, run, settings_from
from gapless.constants import PRIORITY_USER, dead_queue_name, user_queue_name
from gapless.settings import Settings
from gapless.urls import split_urls

MANAGEMENT_PORT = 15672
HTTP_TIMEOUT_S = 2.0
BREAKER_METRIC = "gapless_breaker_state"
BREAKER_STATES = {0: "closed", 1: "half-open", 2: "open"}
NO_MANAGEMENT_NOTE = "per-priority depth needs the management plugin"
#: The management API publishes a queue's statistics periodically (RabbitMQ's
#: collect_statistics_interval, 5 s by default): a queue declared or changed since has none yet.
NO_STATISTICS_NOTE = ("per-priority depth not published yet: the management API refreshes "
                      "queue statistics every few seconds")
#: Documents GİB refused listed by ``status`` (all of them: ``gapless audit --json``).
GIB_REFUSED_SHOWN = 100
#: Of those, the lines of the table view.
GIB_REFUSED_LINES = 10
STALE_STATISTICS_NOTE = ("per-priority depth is the management API's last statistics "
                         "(refreshed every few seconds); the total is current")


@dataclass(frozen=True)
class SeriesStatus:
    tenant: str
    series: str
    period_key: str | None
    last_no: int | None
    last_number: str | None
    received: int
    sending: int
    issued: int
    error: int
    rejected: int
    cancelled: int
    voided: int
    alarms: int
    oldest_sending_age_s: float | None
    #: GİB's verdicts after acceptance: refused; pending and still asked; given up while pending.
    gib_refused: int = 0
    gib_pending: int = 0
    gib_unresolved: int = 0


@dataclass(frozen=True)
class GibRefusal:
    """A document GİB refused after the integrator accepted it: still ISSUED, its number
    accounted for; ``todo`` says what an operator does."""

    tenant: str
    series: str
    number: str
    invoice_id: str
    detail: str | None
    checked_at: str | None
    todo: str


@dataclass(frozen=True)
class QueueStatus:
    name: str
    ready: int | None                       # None: the broker could not be reached
    unacked: int | None = None              # only from the management API
    by_priority: dict[str, int] | None = None
    dead_queue: str = ""
    dead_letters: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class BreakerStatus:
    source: str
    name: str | None
    state: str                               # closed | half-open | open | unreachable | unknown


@dataclass(frozen=True)
class ProfileStatus:
    """A tenant's issuer profile in force (its tax id is left out of the display)."""

    tenant: str
    version: int
    name: str
    tax_office: str
    city: str


@dataclass(frozen=True)
class FeedStatus:
    #: Committed events not yet given a feed position (positioned on the next poll).
    waiting: int
    #: The newest position given (None: no event yet).
    top: int | None
    #: The session holding the position lock and for how long its transaction has been open.
    holder_pid: int | None = None
    holder_s: float | None = None
    holder_state: str | None = None


@dataclass
class Status:
    at: str
    series: list[SeriesStatus]
    queue: QueueStatus
    breakers: list[BreakerStatus] = field(default_factory=list)
    profiles: list[ProfileStatus] = field(default_factory=list)
    feed: FeedStatus | None = None
    #: Documents GIB refused after acceptance, newest first (at most GIB_REFUSED_SHOWN).
    gib_refused: list[GibRefusal] = field(default_factory=list)
    #: Why the queue could not be read (RabbitMQ unreachable); not part of the document.
    broker_error: Exception | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "series": [asdict(row) for row in self.series],
                "queue": asdict(self.queue),
                "breakers": [asdict(breaker) for breaker in self.breakers],
                "profiles": [asdict(profile) for profile in self.profiles],
                "feed": None if self.feed is None else asdict(self.feed),
                "gib_refused": [asdict(refusal) for refusal in self.gib_refused]}


# ---------------------------------------------------------------------------------- collecting


@dataclass(frozen=True)
class DatabaseSide:
    series: list[SeriesStatus]
    profiles: list[ProfileStatus]
    feed: FeedStatus
    gib_refused: list[GibRefusal]


async def read_database(engine: Any, *, tenant: str | None, series: str | None
                        ) -> DatabaseSide:
    """Every series (optionally one tenant / one code) with its counts, the issuer profiles in
    force, the feed's backlog and the documents GİB refused; read-only statements, no locks."""
    from gapless.ledger.invoices import ALARM_PREFIX
    from gapless.ledger.queries import feed as qf
    from gapless.ledger.queries import status as q
    from gapless.ledger.tenants import profiles_in_force
    from gapless.ledger.verdicts import REFUSED_TODO

    async with engine.connect() as conn:
        rows = (await conn.execute(q.SERIES_STATUS, {
            "tenant": tenant, "series": series, "alarm_pattern": ALARM_PREFIX + "%"})).all()
        backlog = (await conn.execute(qf.BACKLOG)).one()
        refused = (await conn.execute(q.GIB_REFUSED, {
            "tenant": tenant, "series": series, "limit": GIB_REFUSED_SHOWN})).all()
    profiles = await profiles_in_force(engine, tenant)
    return DatabaseSide(
        _series_rows(rows),
        [ProfileStatus(tenant=p.tenant, version=p.version, name=p.issuer.name,
                       tax_office=p.issuer.tax_office, city=p.issuer.city) for p in profiles],
        FeedStatus(waiting=backlog.waiting, top=backlog.top, holder_pid=backlog.holder_pid,
                   holder_s=backlog.holder_s, holder_state=backlog.holder_state),
        [GibRefusal(row.tenant, row.series, row.number, row.invoice_id, row.detail,
                    None if row.gib_checked_at is None
                    else row.gib_checked_at.isoformat(timespec="seconds"), REFUSED_TODO)
         for row in refused])


def _series_rows(rows: Any) -> list[SeriesStatus]:
    return [SeriesStatus(
        tenant=row.tenant, series=row.series, period_key=row.period_key, last_no=row.last_no,
        last_number=row.last_number, received=row.received, sending=row.sending,
        issued=row.issued, error=row.error, rejected=row.rejected, cancelled=row.cancelled,
        voided=row.voided, alarms=row.alarms, oldest_sending_age_s=row.oldest_sending_age_s,
        gib_refused=row.gib_refused, gib_pending=row.gib_pending,
        gib_unresolved=row.gib_unresolved)
        for row in rows]


def management_target(amqp_url: str, management_url: str | None
                      ) -> tuple[str, tuple[str, str]]:
    """The management API base URL and its credentials.

    By default: the broker's host on port 15672, with the AMQP URL's user and password (the
    management UI uses the same users). An explicit ``--management-url`` may carry its own.
    """
    amqp = urllib.parse.urlsplit(split_urls(amqp_url)[0])
    user = urllib.parse.unquote(amqp.username or "guest")
    password = urllib.parse.unquote(amqp.password or "guest")
    if management_url:
        given = urllib.parse.urlsplit(management_url)
        if given.username is not None:
            user = urllib.parse.unquote(given.username)
            password = urllib.parse.unquote(given.password or "")
        netloc = given.netloc.rsplit("@", 1)[-1]
        return urllib.parse.urlunsplit((given.scheme or "http", netloc, given.path.rstrip("/"),
                                        "", "")), (user, password)
    host = amqp.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{MANAGEMENT_PORT}", (user, password)


def amqp_vhost(amqp_url: str) -> str:
    path = urllib.parse.urlsplit(split_urls(amqp_url)[0]).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def split_priorities(priority_lengths: dict[str, Any]) -> dict[str, int]:
    """RabbitMQ's per-priority lengths as the contract's two classes (absent priority = batch)."""
    user = batch = 0
    for priority, length in priority_lengths.items():
        if int(priority) >= PRIORITY_USER:
            user += int(length)
        else:
            batch += int(length)
    return {"user": user, "batch": batch}


async def read_management(settings: Settings, management_url: str | None
                          ) -> tuple[int, int, dict[str, int] | None] | str:
    """(ready, unacked, per-priority) of the main queue from the management API, or a note.

    What the real API answers (checked against RabbitMQ 3.10 in tests/integration/
    test_status_management.py): ``backing_queue_status.priority_lengths`` counts the *ready*
    messages of each priority (unacked ones are not in it), and all of a queue's statistics are
    absent until the API's next statistics round after the queue was declared — then there is
    nothing to report yet, which is not the same as zero.
    """
    info = await management_queue(settings, management_url, settings.queue)
    if isinstance(info, str):
        return info
    backing = info.get("backing_queue_status")
    if not isinstance(backing, dict) or "messages_ready" not in info:
        return NO_STATISTICS_NOTE
    lengths = backing.get("priority_lengths")
    by_priority = split_priorities(lengths) if isinstance(lengths, dict) else None
    return (int(info["messages_ready"]), int(info.get("messages_unacknowledged") or 0),
            by_priority)


async def read_quorum_unacked(settings: Settings, management_url: str | None) -> int | str:
    """Unacked deliveries of both work queues of quorum mode from the management API, or a
    note saying why there is no figure."""
    unacked = 0
    for name in (user_queue_name(settings.queue), settings.queue):
        info = await management_queue(settings, management_url, name)
        if isinstance(info, str):
            return info
        if "messages_unacknowledged" not in info:
            return NO_STATISTICS_NOTE
        unacked += int(info["messages_unacknowledged"] or 0)
    return unacked


async def management_queue(settings: Settings, management_url: str | None,
                           name: str) -> dict[str, Any] | str:
    """What the management API says of queue ``name`` (a JSON object), or a note saying why it
    says nothing."""
    import httpx

    base, auth = management_target(settings.amqp_url, management_url)
    vhost = urllib.parse.quote(amqp_vhost(settings.amqp_url), safe="")
    queue = urllib.parse.quote(name, safe="")
    try:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, auth=auth) as client:
            response = await client.get(f"{base}/api/queues/{vhost}/{queue}")
    except httpx.HTTPError:
        return f"{NO_MANAGEMENT_NOTE} ({base} unreachable)"
    if response.status_code == 404:
        return f"the management API at {base} does not know queue {name!r} yet"
    if response.status_code != 200:
        return f"{NO_MANAGEMENT_NOTE} ({base} answered {response.status_code})"
    try:
        info = response.json()
    except ValueError:
        return f"{NO_MANAGEMENT_NOTE} ({base} did not answer JSON)"
    if not isinstance(info, dict):
        return f"{NO_MANAGEMENT_NOTE} ({base} did not answer a JSON object)"
    return info


async def read_queue(settings: Settings, management_url: str | None
                     ) -> tuple[QueueStatus, Exception | None]:
    """Depth of ``<prefix>`` and ``<prefix>.dead`` (AMQP, current), per priority when the
    management API answers; and the error when RabbitMQ could not be reached (the database
    side is still worth showing)."""
    from gapless.amqp.connection import BrokerUnavailable
    from gapless.amqp.management import queue_depths

    dead = dead_queue_name(settings.queue)
    try:
        if settings.queue_type == "quorum":
            depths, unacked = await asyncio.gather(
                queue_depths(settings), read_quorum_unacked(settings, management_url))
        else:
            depths, management = await asyncio.gather(
                queue_depths(settings), read_management(settings, management_url))
    except BrokerUnavailable as exc:
        return QueueStatus(settings.queue, None, dead_queue=dead,
                           note=f"broker unreachable: {exc}".splitlines()[0]), exc
    if settings.queue_type == "quorum":
        # User work has its own queue: the split by priority is the two queues' depths.
        user, batch = depths[user_queue_name(settings.queue)], depths[settings.queue]
        return QueueStatus(
            settings.queue, user + batch, by_priority={"user": user, "batch": batch},
            unacked=unacked if isinstance(unacked, int) else None,
            dead_queue=dead, dead_letters=depths[dead],
            note=unacked if isinstance(unacked, str) else None), None
    ready = depths[settings.queue]
    if isinstance(management, str):
        return QueueStatus(settings.queue, ready, dead_queue=dead, dead_letters=depths[dead],
                           note=management), None
    _, unacked, by_priority = management
    if by_priority is None:
        note: str | None = "the broker reports no per-priority lengths"
    elif sum(by_priority.values()) != ready:
        note = STALE_STATISTICS_NOTE
    else:
        note = None
    return QueueStatus(settings.queue, ready, unacked=unacked, by_priority=by_priority,
                       dead_queue=dead, dead_letters=depths[dead], note=note), None


def metrics_endpoint(url: str) -> str:
    """``host:port`` or a URL; a URL without a path means ``/metrics``."""
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def parse_breakers(source: str, exposition: str) -> list[BreakerStatus]:
    """Every ``gapless_breaker_state{name=…}`` sample of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    found = []
    for family in text_string_to_metric_families(exposition):
        if family.name != BREAKER_METRIC:
            continue
        for sample in family.samples:
            state = BREAKER_STATES.get(int(sample.value), f"state {sample.value:g}")
            found.append(BreakerStatus(source, sample.labels.get("name"), state))
    return found


async def read_breakers(metrics_urls: list[str]) -> list[BreakerStatus]:
    """The breaker states the given processes report; "unreachable" for one that does not
    answer, "unknown" when no endpoint is given (the state lives inside each process)."""
    import httpx

    if not metrics_urls:
        return [BreakerStatus("-", None, "unknown")]

    async def one(client: httpx.AsyncClient, url: str) -> list[BreakerStatus]:
        endpoint = metrics_endpoint(url)
        try:
            response = await client.get(endpoint)
            response.raise_for_status()
        except httpx.HTTPError:
            return [BreakerStatus(endpoint, None, "unreachable")]
        return parse_breakers(endpoint, response.text) or [
            BreakerStatus(endpoint, None, "unknown")]

    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
        results = await asyncio.gather(*(one(client, url) for url in metrics_urls))
    return [breaker for result in results for breaker in result]


async def collect(engine: Any, settings: Settings, *, tenant: str | None, series: str | None,
                  metrics_urls: list[str], management_url: str | None) -> Status:
    # The database first: when it fails, nothing else is left half-done.
    side = await read_database(engine, tenant=tenant, series=series)
    (queue, broker_error), breakers = await asyncio.gather(read_queue(settings, management_url),
                                                           read_breakers(metrics_urls))
    return Status(at=datetime.now(UTC).isoformat(timespec="seconds"), series=side.series,
                  queue=queue, breakers=breakers, profiles=side.profiles, feed=side.feed,
                  gib_refused=side.gib_refused, broker_error=broker_error)


# ---------------------------------------------------------------------------------- rendering


def format_age(seconds: float | None) -> str:
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
        table.add_row(f"{row.tenant}/{row.series}", row.last_number or "-", f"{row.issued:,}",
                      f"{row.sending:,}", error, f"{row.rejected:,}",
                      format_age(row.oldest_sending_age_s))
    if not status.series:
        table.add_row("(no series)", "-", "-", "-", "-", "-", "-")
    return table


def _alarm_lines(lines: Any, series: list[SeriesStatus]) -> None:
    alarms = [f"{row.tenant}/{row.series}: {row.alarms}" for row in series if row.alarms]
    if alarms:
        # An alarm is an ERROR that is never retried by itself: the integrator holds the number
        # for another invoice. A person must look (see the runbook).
        lines.append("alarms (error!): ", style="bold red")
        lines.append(", ".join(alarms) + "\n")


def _queue_lines(lines: Any, queue: QueueStatus) -> None:
    lines.append(f"queue {queue.name}: ", style="bold")
    lines.append(f"{_count(queue.ready)} ready")
    if queue.unacked is not None:
        lines.append(f", {queue.unacked:,} in flight")
    if queue.by_priority is not None:
        lines.append(f" (user {queue.by_priority['user']:,}, "
                     f"batch {queue.by_priority['batch']:,})")
    if queue.note:
        lines.append(f"\n  {queue.note}", style="dim")
    lines.append(f"\ndead letters {queue.dead_queue}: ", style="bold")
    lines.append(_count(queue.dead_letters), style="red" if queue.dead_letters else "")


def _breaker_lines(lines: Any, breakers: list[BreakerStatus]) -> None:
    for breaker in breakers:
        lines.append("\nbreaker", style="bold")
        if breaker.name:
            lines.append(f" {breaker.name}", style="bold")
        style = {"closed": "green", "open": "red", "half-open": "yellow"}.get(breaker.state, "")
        lines.append(": ")
        lines.append(breaker.state, style=style)
        if breaker.source != "-":
            lines.append(f"  {breaker.source}", style="dim")
        elif breaker.state == "unknown":
            lines.append("  (give --metrics-url of each worker/recovery)", style="dim")


def _profile_lines(lines: Any, profiles: list[ProfileStatus]) -> None:
    lines.append("\nissuer profiles: ", style="bold")
    if not profiles:
        lines.append("none (every tenant gets JSON documents)", style="dim")
    for profile in profiles:
        lines.append(f"\n  {profile.tenant} v{profile.version}: {profile.name}, "
                     f"{profile.tax_office} tax office, {profile.city} (UBL-TR)")


def _feed_lines(lines: Any, feed: FeedStatus) -> None:
    lines.append("\nfeed: ", style="bold")
    lines.append(f"top position {_count(feed.top) if feed.top is not None else '-'}, "
                 f"{feed.waiting:,} committed event(s) waiting for a position")
    if feed.holder_pid is not None:
        held = format_age(feed.holder_s)
        lines.append(f"\n  position lock held by pid {feed.holder_pid} ({feed.holder_state}, "
                     f"transaction open {held})", style="yellow" if (feed.holder_s or 0) > 5
                     else "")


def _gib_lines(lines: Any, status: Status) -> None:
    """GİB's verdicts after acceptance: the refused documents (each with what to do), and the
    counts still pending and given up."""
    from gapless.ledger.verdicts import REFUSED_TODO, UNRESOLVED_TODO

    refused = sum(row.gib_refused for row in status.series)
    pending = sum(row.gib_pending for row in status.series)
    unresolved = sum(row.gib_unresolved for row in status.series)
    lines.append("\nGİB after acceptance: ", style="bold")
    lines.append(f"{refused:,} refused", style="bold red" if refused else "")
    lines.append(f", {pending:,} pending, {unresolved:,} given up while pending")
    if refused:
        lines.append(f"\n  refused documents stay ISSUED and keep their numbers: {REFUSED_TODO}",
                     style="dim")
    for refusal in status.gib_refused[:GIB_REFUSED_LINES]:
        lines.append(f"\n  {refusal.number}  {refusal.invoice_id}: "
                     f"{refusal.detail or 'no detail'}")
    if refused > min(len(status.gib_refused), GIB_REFUSED_LINES):
        lines.append(f"\n  … {refused - min(len(status.gib_refused), GIB_REFUSED_LINES):,} "
                     "more (gapless audit --json lists them all)", style="dim")
    if unresolved:
        lines.append(f"\n  given up while pending: {UNRESOLVED_TODO} (gapless audit lists them)",
                     style="dim")


# ---------------------------------------------------------------------------------- command


async def _status(settings: Settings, *, watch: bool, interval: float, as_json: bool,
                  tenant: str | None, series: str | None, metrics_urls: list[str],
                  management_url: str | None) -> None:
    from rich.console import Console
    from rich.live import Live

    from gapless.ledger.database import make_engine

    engine = make_engine(settings.database_url, actor="operator", pool_size=1)
    console = Console()
    try:
        async def snapshot() -> Status:
            return await collect(engine, settings, tenant=tenant, series=series,
                                 metrics_urls=metrics_urls, management_url=management_url)

        if as_json:
            while True:
                # One JSON document per line: with --watch, a JSON Lines stream.
                shown = await snapshot()
                typer.echo(json.dumps(shown.as_dict()))
                if not watch:
                    _fail_if_broker_unreachable(shown)
                    return
                await asyncio.sleep(interval)  # the refresh period, not synchronisation
        if not watch:
            shown = await snapshot()
            console.print(render(shown))
            _fail_if_broker_unreachable(shown)
            return
        with Live(render(await snapshot()), console=console, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval)  # the refresh period, not synchronisation
                live.update(render(await snapshot()), refresh=True)
    finally:
        await engine.dispose()


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
