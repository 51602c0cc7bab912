"""The system at a glance, for operators: the snapshot behind ``gapless status``.

Per tenant/series: the last number handed out, invoices ISSUED / SENDING / ERROR / REJECTED and
the age of the oldest SENDING lease (an age above recovery's ``--stuck-after`` means recovery is
not keeping up, or the integrator is down). Then the queue: ready messages (per priority when
RabbitMQ's management API answers; AMQP itself reports only a total), dead letters, and the
circuit breaker of every worker/recovery process whose Prometheus endpoint is given; without one
the breaker state is "unknown", because it lives inside those processes. Then each tenant's
issuer profile in force (tenants without one get JSON documents), and the event feed: committed
events still waiting for a position, and the session holding the position lock, if any, with how
long (docs/api.md: what delays the feed). Last, GİB's verdicts after acceptance: how many
documents GİB refused (and which, with what to do), how many are still pending, and how many
recovery gave up on while pending.

Reads only: read-only statements per snapshot (no locks), passive queue declarations, and HTTP
GETs. The database is read first: when it fails, the snapshot fails. RabbitMQ that cannot be
reached does not: the snapshot says so and carries the error (:attr:`Status.broker_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from gapless.amqp.management import QueueStatistics
from gapless.constants import dead_queue_name, user_queue_name
from gapless.settings import Settings

if TYPE_CHECKING:
    from gapless.ledger.database import Database

#: How long one request to a process's metrics endpoint may take.
HTTP_TIMEOUT_S = 2.0
BREAKER_METRIC = "gapless_breaker_state"
BREAKER_STATES = {0: "closed", 1: "half-open", 2: "open"}
#: Documents GİB refused listed in a snapshot (all of them: ``gapless audit --json``).
GIB_REFUSED_SHOWN = 100
STALE_STATISTICS_NOTE = ("per-priority depth is the management API's last statistics "
                         "(refreshed every few seconds); the total is current")
NO_PRIORITY_LENGTHS_NOTE = "the broker reports no per-priority lengths"


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
    #: Receivers' answers: rejections (RED, or KISMIKABUL rejecting a quantity); documents
    #: unanswered within their legal window.
    answers_rejected: int = 0
    unanswered: int = 0


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
class AnswerRejection:
    """A document its receiver rejected (RED), or rejected quantities of (KISMIKABUL): still
    ISSUED, its number accounted for; ``todo`` says what an operator does."""

    tenant: str
    series: str
    number: str
    invoice_id: str
    document: str
    code: str
    at: str | None
    #: The rejected lines of a dispatch note (``line 2: rejected 3 (damaged)``), or the reason.
    detail: str
    todo: str


#: What an operator does about a rejection by the receiver.
ANSWER_REJECTED_TODO = ("settle it with the customer: a return or a corrected document (the "
                        "number stays accounted for; gapless never resends an answered "
                        "document)")


@dataclass(frozen=True)
class GibTotals:
    """GİB's verdicts after acceptance, summed over the series shown."""

    refused: int
    pending: int
    unresolved: int


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
    """One snapshot; :meth:`as_dict` is the document ``gapless status --json`` prints."""

    at: str
    series: list[SeriesStatus]
    queue: QueueStatus
    breakers: list[BreakerStatus] = field(default_factory=list)
    profiles: list[ProfileStatus] = field(default_factory=list)
    feed: FeedStatus | None = None
    #: Documents GIB refused after acceptance, newest first (at most GIB_REFUSED_SHOWN).
    gib_refused: list[GibRefusal] = field(default_factory=list)
    #: Documents their receivers rejected, newest answer first (at most GIB_REFUSED_SHOWN).
    answers_rejected: list[AnswerRejection] = field(default_factory=list)
    #: Why the queue could not be read (RabbitMQ unreachable); not part of the document.
    broker_error: Exception | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "series": [asdict(row) for row in self.series],
                "queue": asdict(self.queue),
                "breakers": [asdict(breaker) for breaker in self.breakers],
                "profiles": [asdict(profile) for profile in self.profiles],
                "feed": None if self.feed is None else asdict(self.feed),
                "gib_refused": [asdict(refusal) for refusal in self.gib_refused],
                "answers_rejected": [asdict(rejection) for rejection in self.answers_rejected]}

    def gib_totals(self) -> GibTotals:
        return GibTotals(refused=sum(row.gib_refused for row in self.series),
                         pending=sum(row.gib_pending for row in self.series),
                         unresolved=sum(row.gib_unresolved for row in self.series))


# ---------------------------------------------------------------------------------- database


@dataclass(frozen=True)
class DatabaseSide:
    series: list[SeriesStatus]
    profiles: list[ProfileStatus]
    feed: FeedStatus
    gib_refused: list[GibRefusal]
    answers_rejected: list[AnswerRejection] = field(default_factory=list)


async def read_database(db: Database, *, tenant: str | None, series: str | None
                        ) -> DatabaseSide:
    """Every series (optionally one tenant / one code) with its counts, the issuer profiles in
    force, the feed's backlog and the documents GİB refused; read-only statements, no locks."""
    from gapless.ledger.invoices import ALARM_PREFIX
    from gapless.ledger.queries import feed as qf
    from gapless.ledger.queries import status as q
    from gapless.ledger.tenants import profiles_in_force
    from gapless.ledger.verdicts import REFUSED_TODO

    rows = await db.all(q.SERIES_STATUS, {
        "tenant": tenant, "series": series, "alarm_pattern": ALARM_PREFIX + "%"})
    backlog = await db.one(qf.BACKLOG)
    refused = await db.all(q.GIB_REFUSED, {
        "tenant": tenant, "series": series, "limit": GIB_REFUSED_SHOWN})
    rejected = await db.all(q.ANSWERS_REJECTED, {
        "tenant": tenant, "series": series, "limit": GIB_REFUSED_SHOWN})
    profiles = await profiles_in_force(db, tenant)
    return DatabaseSide(
        series_rows(rows),
        [ProfileStatus(tenant=p.tenant, version=p.version, name=p.issuer.name,
                       tax_office=p.issuer.tax_office, city=p.issuer.city) for p in profiles],
        FeedStatus(waiting=backlog.waiting, top=backlog.top, holder_pid=backlog.holder_pid,
                   holder_s=backlog.holder_s, holder_state=backlog.holder_state),
        gib_refusals(refused, REFUSED_TODO), answer_rejections(rejected))


def series_rows(rows: Sequence[Any]) -> list[SeriesStatus]:
    """The rows of ``queries.status.SERIES_STATUS`` as SeriesStatus, in their order."""
    return [SeriesStatus(
        tenant=row.tenant, series=row.series, period_key=row.period_key, last_no=row.last_no,
        last_number=row.last_number, received=row.received, sending=row.sending,
        issued=row.issued, error=row.error, rejected=row.rejected, cancelled=row.cancelled,
        voided=row.voided, alarms=row.alarms, oldest_sending_age_s=row.oldest_sending_age_s,
        gib_refused=row.gib_refused, gib_pending=row.gib_pending,
        gib_unresolved=row.gib_unresolved, answers_rejected=row.answers_rejected,
        unanswered=row.unanswered)
        for row in rows]


def gib_refusals(rows: Sequence[Any], todo: str) -> list[GibRefusal]:
    """The rows of ``queries.status.GIB_REFUSED`` as GibRefusal (when GİB answered: ISO 8601,
    to the second), each with what to do."""
    return [GibRefusal(row.tenant, row.series, row.number, row.invoice_id, row.detail,
                       None if row.gib_checked_at is None
                       else row.gib_checked_at.isoformat(timespec="seconds"), todo)
            for row in rows]


def answer_rejections(rows: Sequence[Any]) -> list[AnswerRejection]:
    """The rows of ``queries.status.ANSWERS_REJECTED`` as AnswerRejection."""
    found = []
    for row in rows:
        answer = json.loads(row.answer)
        lines = [f"line {line.get('line')}: rejected {line.get('rejected')}"
                 + (f" ({line['reason']})" if line.get("reason") else "")
                 for line in answer.get("lines") or () if line.get("rejected") not in ("0", 0)]
        found.append(AnswerRejection(row.tenant, row.series, row.number, row.invoice_id,
                                     row.document, answer.get("code", "?"), answer.get("at"),
                                     "; ".join(lines) or "the whole document",
                                     ANSWER_REJECTED_TODO))
    return found


# ---------------------------------------------------------------------------------- queue


def classic_queue_status(queue: str, depths: dict[str, int],
                         management: QueueStatistics | str) -> QueueStatus:
    """The queue line of classic mode: the AMQP depths (current) of ``queue`` and its dead
    queue, with the management API's statistics (or the note saying why there are none). The
    per-priority split is the API's last round: when it does not add up to the current total,
    a note says so."""
    dead = dead_queue_name(queue)
    ready = depths[queue]
    if isinstance(management, str):
        return QueueStatus(queue, ready, dead_queue=dead, dead_letters=depths[dead],
                           note=management)
    by_priority = management.by_priority
    if by_priority is None:
        note: str | None = NO_PRIORITY_LENGTHS_NOTE
    elif sum(by_priority.values()) != ready:
        note = STALE_STATISTICS_NOTE
    else:
        note = None
    return QueueStatus(queue, ready, unacked=management.unacked, by_priority=by_priority,
                       dead_queue=dead, dead_letters=depths[dead], note=note)


def quorum_queue_status(queue: str, depths: dict[str, int], unacked: int | str) -> QueueStatus:
    """The queue line of quorum mode: user work has its own queue, so the split by priority is
    the two work queues' depths; ``unacked`` is the management API's figure, or the note saying
    why there is none."""
    dead = dead_queue_name(queue)
    user, batch = depths[user_queue_name(queue)], depths[queue]
    return QueueStatus(
        queue, user + batch, by_priority={"user": user, "batch": batch},
        unacked=unacked if isinstance(unacked, int) else None,
        dead_queue=dead, dead_letters=depths[dead],
        note=unacked if isinstance(unacked, str) else None)


def unreachable_queue_status(queue: str, error: Exception) -> QueueStatus:
    """The queue line when RabbitMQ cannot be reached: no figures, the reason's first line."""
    return QueueStatus(queue, None, dead_queue=dead_queue_name(queue),
                       note=f"broker unreachable: {error}".splitlines()[0])


async def read_queue(settings: Settings, management_url: str | None
                     ) -> tuple[QueueStatus, Exception | None]:
    """Depth of ``<prefix>`` and ``<prefix>.dead`` (AMQP, current), per priority when the
    management API answers; and the error when RabbitMQ could not be reached (the database
    side is still worth showing)."""
    from gapless.amqp.connection import BrokerUnavailable
    from gapless.amqp.management import queue_depths, read_management, read_quorum_unacked

    try:
        if settings.queue_type == "quorum":
            depths, unacked = await asyncio.gather(
                queue_depths(settings), read_quorum_unacked(settings, management_url))
            return quorum_queue_status(settings.queue, depths, unacked), None
        depths, management = await asyncio.gather(
            queue_depths(settings), read_management(settings, management_url))
    except BrokerUnavailable as exc:
        return unreachable_queue_status(settings.queue, exc), exc
    return classic_queue_status(settings.queue, depths, management), None


# ---------------------------------------------------------------------------------- breakers


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


# ---------------------------------------------------------------------------------- snapshot


async def collect(db: Database, settings: Settings, *, tenant: str | None, series: str | None,
                  metrics_urls: list[str], management_url: str | None) -> Status:
    """One snapshot: the database first (when it fails, nothing else is left half-done), then
    the queue and the breakers at once."""
    side = await read_database(db, tenant=tenant, series=series)
    (queue, broker_error), breakers = await asyncio.gather(read_queue(settings, management_url),
                                                           read_breakers(metrics_urls))
    return Status(at=datetime.now(UTC).isoformat(timespec="seconds"), series=side.series,
                  queue=queue, breakers=breakers, profiles=side.profiles, feed=side.feed,
                  gib_refused=side.gib_refused, answers_rejected=side.answers_rejected,
                  broker_error=broker_error)


class StatusReader:
    """Snapshots of one system, as often as asked, over one database connection (pool of one,
    actor ``operator``) that ``async with`` opens and closes."""

    def __init__(self, settings: Settings, *, tenant: str | None = None,
                 series: str | None = None, metrics_urls: Sequence[str] = (),
                 management_url: str | None = None) -> None:
        self.settings = settings
        self.tenant = tenant
        self.series = series
        self.metrics_urls = list(metrics_urls)
        self.management_url = management_url
        self._stack = contextlib.AsyncExitStack()
        self._db: Database | None = None

    async def __aenter__(self) -> StatusReader:
        from gapless.ledger.database import short_lived

        self._db = await self._stack.enter_async_context(
            short_lived(self.settings.database_url, actor="operator"))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._stack.aclose()

    async def snapshot(self) -> Status:
        """The system now (:func:`collect`)."""
        assert self._db is not None, "use StatusReader in an async with block"
        return await collect(self._db, self.settings, tenant=self.tenant,
                             series=self.series, metrics_urls=self.metrics_urls,
                             management_url=self.management_url)
