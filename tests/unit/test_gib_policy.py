"""When recovery asks GİB's verdict again: exponential from the first wait, capped per channel,
given up at the give-up age (pure: no I/O)."""

from __future__ import annotations

import pytest

from gapless.ledger.verdicts import GibPolicy
from gapless.settings import Settings

POLICY = GibPolicy(first_s=60, max_efatura_s=3600, max_earsiv_s=21600, give_up_s=7 * 86400)


@pytest.mark.parametrize("channel", ["efatura", "earsiv"])
def test_the_wait_doubles_the_age_from_a_minute_with_jitter_below(channel: str) -> None:
    for age, full in [(0, 60), (30, 60), (60, 60), (120, 120), (480, 480), (1800, 1800)]:
        for _ in range(50):
            wait = POLICY.next_in(channel, age)
            assert wait is not None
            assert 0.8 * full <= wait <= full, (age, wait)


def test_the_wait_is_capped_per_channel() -> None:
    day = 86400.0
    for _ in range(50):
        efatura, earsiv = POLICY.next_in("efatura", day), POLICY.next_in("earsiv", day)
        assert efatura is not None
        assert 0.8 * 3600 <= efatura <= 3600
        assert earsiv is not None
        assert 0.8 * 21600 <= earsiv <= 21600


def test_the_last_question_falls_at_the_give_up_age_then_recovery_gives_up() -> None:
    give_up = POLICY.give_up_s
    assert POLICY.next_in("earsiv", give_up - 100) == pytest.approx(100, abs=1e-9)
    assert POLICY.next_in("earsiv", give_up) is None
    assert POLICY.next_in("efatura", give_up + 1) is None


def test_a_document_asked_on_the_schedule_is_asked_a_few_dozen_times_over_the_week() -> None:
    asked = {}
    for channel in ("efatura", "earsiv"):
        age, count = POLICY.first_s, 0
        while (wait := POLICY.next_in(channel, age)) is not None:
            age += wait
            count += 1
        asked[channel] = count
    assert 150 < asked["efatura"] < 220  # hourly after the first hour
    assert 25 < asked["earsiv"] < 45     # every six hours after the first few


def test_the_policy_comes_from_the_settings() -> None:
    settings = Settings(gib_poll_first_s=5, gib_poll_max_efatura_s=50, gib_poll_max_earsiv_s=500,
                        gib_poll_give_up_s=5000, gib_poll_batch=7)
    policy = GibPolicy.from_settings(settings)
    assert (policy.first_s, policy.max_efatura_s, policy.max_earsiv_s, policy.give_up_s,
            policy.batch) == (5, 50, 500, 5000, 7)
    assert (GibPolicy.from_settings(Settings()).first_s, Settings().gib_poll_give_up_s) == (
        60, 7 * 86400)
