"""``gapless status``'s snapshot from what it read, without I/O: database rows into series and
refusals, AMQP depths and the management API's statistics into the queue line, Prometheus text
into breakers, and the endpoints derived from the settings (tests/integration/test_status.py:
the command against a real database and broker)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import asdict, fields
from datetime import UTC, datetime

import pytest

from gapless.amqp.management import (
    QueueStatistics,
    amqp_vhost,
    management_target,
    split_priorities,
)
from gapless.ops.status import (
    STALE_STATISTICS_NOTE,
    BreakerStatus,
    GibRefusal,
    GibTotals,
    QueueStatus,
    SeriesStatus,
    Status,
    classic_queue_status,
    gib_refusals,
    metrics_endpoint,
    parse_breakers,
    quorum_queue_status,
    series_rows,
    unreachable_queue_status,
)

SeriesRow = namedtuple("SeriesRow", [field.name for field in fields(SeriesStatus)])
RefusedRow = namedtuple("RefusedRow", "tenant series number invoice_id detail gib_checked_at")
DEPTHS = {"q": 7, "q.user": 2, "q.dead": 3}


def series(tenant: str = "acme", code: str = "ABC", *, refused: int = 0, pending: int = 0,
           unresolved: int = 0) -> SeriesStatus:
    return SeriesStatus(tenant, code, "2026", 12, "ABC2026000000012", 0, 1, 10, 1, 0, 0, 0, 0,
                        4.5, refused, pending, unresolved)


def test_series_rows_keep_every_column_and_the_order() -> None:
    first, second = series("acme", "ABC", refused=1), series("beta", "XYZ", pending=2)
    rows = [SeriesRow(**asdict(first)), SeriesRow(**asdict(second))]
    assert series_rows(rows) == [first, second]


def test_refusals_say_when_to_the_second_and_what_to_do() -> None:
    checked = datetime(2026, 11, 20, 9, 30, 15, 123456, tzinfo=UTC)
    rows = [RefusedRow("acme", "ABC", "ABC2026000000001", "inv-1", "bad tax id", checked),
            RefusedRow("acme", "ABC", "ABC2026000000002", "inv-2", None, None)]
    assert gib_refusals(rows, "fix it") == [
        GibRefusal("acme", "ABC", "ABC2026000000001", "inv-1", "bad tax id",
                   "2026-11-20T09:30:15+00:00", "fix it"),
        GibRefusal("acme", "ABC", "ABC2026000000002", "inv-2", None, None, "fix it")]


def test_gib_totals_sum_the_series_shown() -> None:
    status = Status("now", [series(refused=1, pending=2), series(refused=3, unresolved=4)],
                    unreachable_queue_status("q", RuntimeError("down")))
    assert status.gib_totals() == GibTotals(refused=4, pending=2, unresolved=4)


def test_the_json_document_has_the_contract_keys_and_never_the_broker_error() -> None:
    status = Status("2026-11-20T09:30:15+00:00", [series()],
                    unreachable_queue_status("q", RuntimeError("down")),
                    breakers=[BreakerStatus("-", None, "unknown")],
                    broker_error=RuntimeError("down"))
    document = status.as_dict()
    assert list(document) == ["at", "series", "queue", "breakers", "profiles", "feed",
                              "gib_refused", "answers_rejected"]
    assert document["queue"] == {"name": "q", "ready": None, "unacked": None,
                                 "by_priority": None, "dead_queue": "q.dead",
                                 "dead_letters": None, "note": "broker unreachable: down"}
    assert document["series"][0]["oldest_sending_age_s"] == 4.5
    assert document["feed"] is None


def test_an_unreachable_broker_is_noted_on_one_line() -> None:
    queue = unreachable_queue_status("q", RuntimeError("cannot connect\nsecond line"))
    assert queue == QueueStatus("q", None, dead_queue="q.dead",
                                note="broker unreachable: cannot connect")


def test_classic_mode_splits_by_priority_when_the_statistics_add_up() -> None:
    statistics = QueueStatistics(ready=7, unacked=1, by_priority={"user": 4, "batch": 3})
    assert classic_queue_status("q", DEPTHS, statistics) == QueueStatus(
        "q", 7, unacked=1, by_priority={"user": 4, "batch": 3}, dead_queue="q.dead",
        dead_letters=3, note=None)


def test_classic_mode_says_when_the_statistics_lag_the_current_total() -> None:
    statistics = QueueStatistics(ready=5, unacked=0, by_priority={"user": 4, "batch": 1})
    queue = classic_queue_status("q", DEPTHS, statistics)
    assert (queue.ready, queue.by_priority, queue.note) == (
        7, {"user": 4, "batch": 1}, STALE_STATISTICS_NOTE)


def test_classic_mode_without_per_priority_lengths_or_without_the_api() -> None:
    queue = classic_queue_status("q", DEPTHS, QueueStatistics(7, 2, None))
    assert (queue.unacked, queue.by_priority, queue.note) == (
        2, None, "the broker reports no per-priority lengths")
    queue = classic_queue_status("q", DEPTHS, "no API here")
    assert queue == QueueStatus("q", 7, dead_queue="q.dead", dead_letters=3,
                                note="no API here")


def test_quorum_mode_splits_by_the_two_work_queues() -> None:
    assert quorum_queue_status("q", DEPTHS, 5) == QueueStatus(
        "q", 9, unacked=5, by_priority={"user": 2, "batch": 7}, dead_queue="q.dead",
        dead_letters=3, note=None)
    queue = quorum_queue_status("q", DEPTHS, "no statistics yet")
    assert (queue.ready, queue.unacked, queue.note) == (9, None, "no statistics yet")


EXPOSITION = """\
# HELP gapless_breaker_state Circuit breaker state.
# TYPE gapless_breaker_state gauge
gapless_breaker_state{name="integrator"} 2.0
gapless_breaker_state{name="other"} 7.0
# TYPE other_metric gauge
other_metric 1.0
"""


def test_breakers_are_read_from_the_prometheus_text() -> None:
    assert parse_breakers("http://w:9100/metrics", EXPOSITION) == [
        BreakerStatus("http://w:9100/metrics", "integrator", "open"),
        BreakerStatus("http://w:9100/metrics", "other", "state 7")]
    assert parse_breakers("src", "# nothing\n") == []


def test_endpoints_derive_from_the_settings() -> None:
    assert management_target("amqp://u:p%40ss@broker:5672/prod", None) == (
        "http://broker:15672", ("u", "p@ss"))
    assert management_target("amqp://u:p@broker/", "https://admin:pw@mq.example:443/rmq/") == (
        "https://mq.example:443/rmq", ("admin", "pw"))
    assert management_target("amqp://[::1]:5672/", None) == (
        "http://[::1]:15672", ("guest", "guest"))
    assert metrics_endpoint("10.0.0.5:9100") == "http://10.0.0.5:9100/metrics"
    assert metrics_endpoint("http://w:9100/custom") == "http://w:9100/custom"
    assert split_priorities({"0": 1, "1": 2, "2": 0, "3": 0, "4": 5}) == {"user": 5, "batch": 3}


@pytest.mark.parametrize(("url", "vhost"), [
    ("amqp://u:p@broker:5672/", "/"), ("amqp://u:p@broker:5672", "/"),
    ("amqp://u:p@broker:5672/prod", "prod"), ("amqp://u:p@broker/%2Fdev", "/dev"),
    ("amqp://a:1/one,amqp://b:2/two", "one"),
])
def test_the_vhost_is_the_first_urls_path(url: str, vhost: str) -> None:
    assert amqp_vhost(url) == vhost
