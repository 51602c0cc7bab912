"""The chaos runner's knobs and load plan (no I/O): what ``make chaos`` asks for is what runs."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from gapless.message import InvalidMessage, parse_message
from tests.chaos.scenario import (
    DEFAULT_FAULTS,
    REJECTED_TAX_ID,
    SERIES,
    ChaosConfig,
    ChaosRun,
    parse_faults,
    plan_load,
)


def test_knobs_come_from_the_make_chaos_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_CHAOS_DURATION", "600")
    monkeypatch.setenv("GAPLESS_CHAOS_INVOICES", "20000")
    monkeypatch.setenv("GAPLESS_CHAOS_WORKERS", "5")
    monkeypatch.setenv("GAPLESS_CHAOS_SEED", "11")
    monkeypatch.setenv("GAPLESS_CHAOS_FAULTS", "default,-outage")

    config = ChaosConfig.from_env()

    assert (config.duration_s, config.invoices, config.workers, config.seed) == (
        600, 20000, 5, 11)
    assert config.faults == DEFAULT_FAULTS - {"outage"}


def test_without_knobs_the_short_profile_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DURATION", "INVOICES", "WORKERS", "SEED", "FAULTS"):
        monkeypatch.delenv(f"GAPLESS_CHAOS_{name}", raising=False)

    config = ChaosConfig.from_env()

    assert (config.duration_s, config.invoices, config.workers) == (90, 1200, 3)
    assert config.faults == DEFAULT_FAULTS


def test_fault_lists_are_parsed_and_unknown_kinds_refused() -> None:
    assert parse_faults("none") == frozenset()
    assert parse_faults("worker_kill, transient") == {"worker_kill", "transient"}
    assert "random_reject" in parse_faults("all")
    with pytest.raises(ValueError, match="unknown chaos fault 'gremlins'"):
        parse_faults("default,gremlins")


def test_the_load_plan_is_seeded_mixed_and_exact() -> None:
    config = ChaosConfig(invoices=1000, seed=3)

    plan = plan_load(config, random.Random(config.seed))
    again = plan_load(config, random.Random(config.seed))

    assert plan == again
    messages = [m for group in plan for m in group.messages]
    kinds = Counter(m.kind for m in messages)
    assert kinds["valid"] == 1000
    assert kinds["duplicate"] > 0
    assert kinds["malformed"] > 0
    valid = [m for m in messages if m.kind == "valid"]
    assert {(m.tenant, m.series) for m in valid} == {(t, s) for t, s, _ in SERIES}
    assert {m.priority for m in valid} == {1, 4}  # batch bursts and user singles
    rejected = [m for m in valid if json.loads(m.body)["customer"]["tax_id"] == REJECTED_TAX_ID]
    assert rejected
    assert all(m.expect == "rejected" for m in rejected)
    assert all(m.expect == "issued" for m in valid if m not in rejected)
    assert plan[-1].at_s < config.load_s
    for message in valid:
        parse_message(message.body, message.content_type)
    for message in (m for m in messages if m.kind == "malformed"):
        if message.malformed == "unknown series":
            continue  # valid in shape: the worker dead-letters it for the series
        with pytest.raises(InvalidMessage):
            parse_message(message.body, message.content_type)


def test_the_fault_schedule_covers_every_kind_each_cycle() -> None:
    run = ChaosRun.__new__(ChaosRun)
    run.config = ChaosConfig(duration_s=90)
    kinds = Counter(kind for _, kind in ChaosRun.schedule(run))
    assert kinds == {"outage": 1, "recovery_kill": 2, "amqp_drop": 2, "pg_terminate": 2}

    run.config = ChaosConfig(duration_s=600, faults=DEFAULT_FAULTS - {"amqp_drop"})
    times = ChaosRun.schedule(run)
    assert Counter(kind for _, kind in times)["outage"] == 7
    assert all(kind != "amqp_drop" for _, kind in times)
    assert max(at for at, _ in times) < 600
