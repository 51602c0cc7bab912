"""Prometheus metrics of the recovery loop (served with ``gapless recovery --metrics-port P
[--metrics-host H]``).

They live in the default registry next to the integrator guard's own metrics, so one scrape of
``/metrics`` also shows the breaker state (``gapless_breaker_state{name="recovery"}``: 0 closed,
1 half-open, 2 open) and every integrator call recovery made.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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


def serve(port: int, host: str) -> None:
    """Expose ``/metrics`` on ``host:port`` (``GAPLESS_METRICS_HOST`` / ``--metrics-host``,
    loopback unless told), from a daemon thread."""
    start_http_server(port, addr=host)
