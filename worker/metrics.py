"""Prometheus metrics of the worker (served with ``gapless worker --metrics-port P
[--metrics-host H]``, beside ``/healthz`` and ``/readyz``: gapless.observe).

They live in the default registry, next to the integrator guard's own metrics (breaker state
``gapless_breaker_state{name="worker"}``, per-attempt calls and latency), so one scrape of
``/metrics`` shows both. Labelled series are bound once, here: an update on the hot path is
a lookup in a dict and an increment, never a labels() call that builds its key anew.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from gapless.issuing.outcome import Said

if TYPE_CHECKING:
    from gapless.observe import HealthServer
    from gapless.worker.consumer import Worker

#: What happened to each delivery. ``issued``, ``error``, ``rejected``, ``alarm`` are invoice
#: outcomes; the rest say why a message was acked or requeued without one.
OUTCOMES = ("issued", "error", "rejected", "alarm", "superseded", "dead_lettered",
            "already_final", "busy", "parked", "requeued", "failed")

#: Results of a guarded integrator send (the ``result`` label of INTEGRATOR_SECONDS): what the
#: integrator said (``unavailable``: the breaker refused the call; ``found`` is recovery's).
SEND_RESULTS = tuple(said.value for said in Said if said is not Said.FOUND)

MESSAGES = Counter("gapless_worker_messages_total", "Deliveries handled, by outcome",
                   ["outcome"])
RESERVATION_SECONDS = Histogram(
    "gapless_worker_reservation_seconds",
    "Duration of the claim transaction (invoice row lock, number, lease, commit), one per "
    "statement of the group seal",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
SEAL_BATCH_SIZE = Histogram(
    "gapless_worker_seal_batch_size",
    "Drafts of one tenant claimed in one statement and one commit (the group seal)",
    buckets=(1, 2, 4, 8, 16, 32, 64))
_INTEGRATOR_SECONDS = Histogram(
    "gapless_worker_integrator_seconds",
    "Duration of one guarded integrator send (retries included), by result",
    ["result"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0))
#: The send duration histogram of each result.
INTEGRATOR_SECONDS = {result: _INTEGRATOR_SECONDS.labels(result=result)
                      for result in SEND_RESULTS}
#: Where the recipient answers routing used came from (gapless.issuing.routing).
RECIPIENT_SOURCES = ("memory", "table", "integrator")
_RECIPIENT_ANSWERS = Counter(
    "gapless_worker_recipient_answers_total",
    "Recipient answers routing used, by where they came from: the worker's memory, the shared "
    "table recipients, or the integrator (asked, then stored)", ["source"])
#: The counter of each source.
RECIPIENT_ANSWERS = {source: _RECIPIENT_ANSWERS.labels(source=source)
                     for source in RECIPIENT_SOURCES}
RECIPIENT_MEMORY_LISTENING = Gauge(
    "gapless_worker_recipient_memory_listening",
    "1 while the worker hears the recipient table's change notices (answers kept in memory are "
    "used), 0 while it does not (every answer is read from the table)")
IN_FLIGHT = Gauge("gapless_worker_in_flight", "Deliveries being processed")
CONSUMING = Gauge("gapless_worker_consuming", "1 while the worker takes messages, 0 when paused")

#: Every series exists from the start (rate() needs it).
_MESSAGES = {outcome: MESSAGES.labels(outcome=outcome) for outcome in OUTCOMES}


def count(outcome: str) -> None:
    _MESSAGES[outcome].inc()


def health_server(worker: Worker, host: str, port: int) -> HealthServer:
    """``/metrics``, ``/healthz`` (the worker's task runs) and ``/readyz`` (the database answers
    and the worker is consuming) on ``host:port`` (``GAPLESS_METRICS_HOST`` /
    ``--metrics-host``, loopback unless told)."""
    from gapless.observe import HealthServer, task_alive

    async def database() -> tuple[bool, str]:
        db = worker.database
        if db is None:
            return False, "not connected"
        await db.one("SELECT 1 AS ok")
        return True, "reachable"

    def consuming() -> tuple[bool, str]:
        if worker.consuming:
            return True, "consuming"
        return False, "stopping" if worker.stopping else "paused or not started"

    return HealthServer(host, port, liveness=[("worker", task_alive(lambda: worker.task))],
                        readiness=[("database", database), ("consuming", consuming)])

