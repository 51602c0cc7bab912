"""Prometheus metrics of the recovery loop (served with ``gapless recovery --metrics-port P
[--metrics-host H]``, beside ``/healthz`` and ``/readyz``: gapless.observe).

They live in the default registry next to the integrator guard's own metrics, so one scrape of
``/metrics`` also shows the breaker state (``gapless_breaker_state{name="recovery"}``: 0 closed,
1 half-open, 2 open) and every integrator call recovery made.

Recovery is also the process that exports the states an operator acts on, read from the database
and the broker after a round (at most every :data:`STATE_REFRESH_S`, so the cost is one grouped
count per refresh whatever the scrape rate): ERROR invoices awaiting a retry or an operator,
alarms, REJECTED invoices, GİB refusals and documents GİB left unanswered, the oldest SENDING
lease's age, per tenant and series (the queries of ``gapless status``), and the depth of
``<prefix>.dead``. docs/observability.md lists every metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from gapless.logging import get_logger

if TYPE_CHECKING:
    from gapless.ledger.database import Database
    from gapless.observe import HealthServer
    from gapless.recovery.loop import RecoveryLoop
    from gapless.settings import Settings

log = get_logger("gapless.recovery")

#: What became of each claimed orphan (see ``recovery.reconcile.Outcome``).
OUTCOMES = ("repaired", "resent", "alarm", "rejected", "error", "parked", "released",
            "superseded", "failed")
ROUND_RESULTS = ("completed", "skipped", "failed")

ROUNDS = Counter("gapless_recovery_rounds_total", "Recovery rounds, by result", ["result"])
ROUND_SECONDS = Histogram(
    "gapless_recovery_round_seconds", "Duration of a recovery round (claim and reconcile)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
FOUND = Counter("gapless_recovery_orphans_found_total",
                "Orphans claimed, by the status they were found in", ["was"])
ORPHANS = Counter("gapless_recovery_orphans_total", "Claimed orphans, by outcome", ["outcome"])
REPAIRED = Counter("gapless_recovery_orphans_repaired_total",
                   "Orphans the integrator already had for them: ISSUED without a send")
RESENT = Counter("gapless_recovery_orphans_resent_total",
                 "Orphans the integrator did not have: resent with their number and ISSUED")
ALARMS = Counter("gapless_recovery_alarms_total",
                 "Orphans whose number the integrator holds for another invoice")
ERRORS = Counter("gapless_recovery_errors_total",
                 "Orphans left ERROR after a transient integrator failure (parked included)")
IN_FLIGHT = Gauge("gapless_recovery_in_flight", "Orphans being reconciled")

# -- the states an operator acts on (refreshed by StateGauges) --------------------------------

#: The shortest time between two refreshes of the state gauges (each is one grouped count).
STATE_REFRESH_S = 15.0
#: How long one side (database, broker) of a refresh may take before it counts as failed.
STATE_READ_TIMEOUT_S = 10.0
SERIES_LABELS = ("tenant", "series")
ERRORS_AWAITING_RETRY = Gauge(
    "gapless_errors_awaiting_retry",
    "ERROR invoices (not alarms) recovery will retry (due, attempts below --max-attempts)",
    SERIES_LABELS)
ERRORS_AWAITING_OPERATOR = Gauge(
    "gapless_errors_awaiting_operator",
    "ERROR invoices (not alarms) parked (no retry time, or at --max-attempts): an operator acts",
    SERIES_LABELS)
ALARMS_OPEN = Gauge("gapless_alarms",
                    "ERROR invoices whose number the integrator holds for another invoice",
                    SERIES_LABELS)
REJECTED_INVOICES = Gauge("gapless_rejected_invoices",
                          "REJECTED invoices (the integrator refused them; numbers voided or "
                          "awaiting a correction)", SERIES_LABELS)
GIB_REFUSED = Gauge("gapless_gib_refused",
                    "ISSUED documents GİB refused after acceptance (gapless audit lists them)",
                    SERIES_LABELS)
GIB_UNRESOLVED = Gauge("gapless_gib_unresolved",
                       "ISSUED documents GİB never answered within the verdict window "
                       "(recovery stopped asking)", SERIES_LABELS)
ANSWERS_REJECTED = Gauge("gapless_answers_rejected",
                         "ISSUED documents their receiver rejected (RED, or KISMIKABUL rejecting "
                         "a quantity): an operator settles them", SERIES_LABELS)
UNANSWERED = Gauge("gapless_unanswered_past_window",
                   "Dispatch notes and TICARIFATURA invoices not answered within their legal "
                   "window", SERIES_LABELS)
OLDEST_SENDING_AGE = Gauge("gapless_oldest_sending_age_seconds",
                           "Age of the oldest SENDING lease (0: none)", SERIES_LABELS)
DEAD_LETTERS = Gauge("gapless_dead_letters", "Messages in the dead-letter queue <prefix>.dead",
                     ["queue"])
STATE_REFRESHED = Gauge("gapless_state_refreshed_timestamp_seconds",
                        "When the state gauges were last read (Unix time; 0: never)")
STATE_REFRESH_FAILURES = Counter("gapless_state_refresh_failures_total",
                                 "State gauge refreshes that failed, by source", ["source"])
LAST_ROUND = Gauge("gapless_recovery_last_round_timestamp_seconds",
                   "When the last recovery round ended (Unix time; 0: none yet)")
for _source in ("database", "broker"):
    STATE_REFRESH_FAILURES.labels(source=_source)

_SERIES_GAUGES = (ERRORS_AWAITING_RETRY, ERRORS_AWAITING_OPERATOR, ALARMS_OPEN,
                  REJECTED_INVOICES, GIB_REFUSED, GIB_UNRESOLVED, ANSWERS_REJECTED, UNANSWERED,
                  OLDEST_SENDING_AGE)


class StateGauges:
    """Reads the operator's states into the gauges above, at most every ``min_interval_s``.

    The database side is ``gapless status``'s per-series query plus one count of ERROR rows by
    attempts; the broker side is a passive declare of ``<prefix>.dead``; each bounded by
    STATE_READ_TIMEOUT_S. A failing side keeps its previous values (and counts the failure); the
    other side is still refreshed.
    """

    def __init__(self, db: Database, settings: Settings, *, max_attempts: int,
                 min_interval_s: float = STATE_REFRESH_S) -> None:
        self.db = db
        self.settings = settings
        self.max_attempts = max_attempts
        self.min_interval_s = min_interval_s
        self._last: float | None = None
        self._task: asyncio.Task[None] | None = None

    def maybe_refresh(self) -> None:
        """Start a refresh in the background unless one runs or the last began less than
        ``min_interval_s`` ago: a slow database or an unreachable broker never delays a round."""
        now = time.monotonic()
        if self._task is not None and not self._task.done():
            return
        if self._last is not None and now - self._last < self.min_interval_s:
            return
        self._last = now
        self._task = asyncio.create_task(self.refresh(), name="state-gauges")

    async def aclose(self) -> None:
        """Cancel a refresh still running."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> None:
        from gapless.ledger.invoices import ALARM_PREFIX
        from gapless.ledger.queries import status as q

        alarm_pattern = ALARM_PREFIX + "%"
        try:
            async with asyncio.timeout(STATE_READ_TIMEOUT_S):
                rows = await self.db.all(q.SERIES_STATUS, {
                    "tenant": None, "series": None, "alarm_pattern": alarm_pattern})
                errors = await self.db.all(q.ERRORS_BY_ACTOR, {
                    "max_attempts": self.max_attempts, "alarm_pattern": alarm_pattern})
        except Exception as exc:
            STATE_REFRESH_FAILURES.labels(source="database").inc()
            log.warning("state_gauges_failed", source="database", error=type(exc).__name__)
        else:
            by_actor = {(row.tenant, row.series): row for row in errors}
            # No await from here on: a scrape (same event loop) sees all or nothing.
            for gauge in _SERIES_GAUGES:
                gauge.clear()
            for row in rows:
                key = (row.tenant, row.series)
                actor = by_actor.get(key)
                ERRORS_AWAITING_RETRY.labels(*key).set(0 if actor is None else actor.awaiting_retry)
                ERRORS_AWAITING_OPERATOR.labels(*key).set(
                    0 if actor is None else actor.awaiting_operator)
                ALARMS_OPEN.labels(*key).set(row.alarms)
                REJECTED_INVOICES.labels(*key).set(row.rejected)
                GIB_REFUSED.labels(*key).set(row.gib_refused)
                GIB_UNRESOLVED.labels(*key).set(row.gib_unresolved)
                ANSWERS_REJECTED.labels(*key).set(row.answers_rejected)
                UNANSWERED.labels(*key).set(row.unanswered)
                OLDEST_SENDING_AGE.labels(*key).set(row.oldest_sending_age_s or 0.0)
            STATE_REFRESHED.set(time.time())
        await self._refresh_dead_letters()

    async def _refresh_dead_letters(self) -> None:
        from gapless.amqp.management import queue_depths
        from gapless.constants import dead_queue_name

        dead = dead_queue_name(self.settings.queue)
        try:
            async with asyncio.timeout(STATE_READ_TIMEOUT_S):
                depths = await queue_depths(self.settings)
        except Exception as exc:
            STATE_REFRESH_FAILURES.labels(source="broker").inc()
            log.warning("state_gauges_failed", source="broker", error=type(exc).__name__)
            return
        DEAD_LETTERS.labels(queue=dead).set(depths[dead])


for _was in ("SENDING", "ERROR"):
    FOUND.labels(was=_was)
for _outcome in OUTCOMES:
    ORPHANS.labels(outcome=_outcome)  # every series exists from the start (rate() needs it)
for _result in ROUND_RESULTS:
    ROUNDS.labels(result=_result)


def count(outcome: str) -> None:
    """Count one orphan's outcome (and the headline counter it belongs to)."""
    ORPHANS.labels(outcome=outcome).inc()
    if outcome == "repaired":
        REPAIRED.inc()
    elif outcome == "resent":
        RESENT.inc()
    elif outcome == "alarm":
        ALARMS.inc()
    elif outcome in ("error", "parked"):
        ERRORS.inc()


#: /readyz fails when no round has ended within this many intervals (plus CHECK_GRACE_S).
READY_INTERVALS = 3
CHECK_GRACE_S = 30.0


def health_server(loop: RecoveryLoop, host: str, port: int) -> HealthServer:
    """``/metrics``, ``/healthz`` (the loop's task runs) and ``/readyz`` (the database answers
    and a round ended within READY_INTERVALS intervals) for ``loop``."""
    from gapless.observe import HealthServer, task_alive

    async def database() -> tuple[bool, str]:
        await loop.db.one("SELECT 1 AS ok")
        return True, "reachable"

    def rounds() -> tuple[bool, str]:
        if loop.last_round_end is None:
            return False, "no round ended yet"
        age = time.monotonic() - loop.last_round_end
        limit = READY_INTERVALS * loop.options.interval_s + CHECK_GRACE_S
        return age <= limit, f"last round ended {age:.0f} s ago (limit {limit:.0f} s)"

    return HealthServer(host, port, liveness=[("loop", task_alive(lambda: loop.task))],
                        readiness=[("database", database), ("rounds", rounds)])

