"""bench/check.py's issue suite: a design's CPU is compared with the bare loop's at its time,
on the line through the bare loop's runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.check import bare_cpu_at


def bare(*points: tuple[float, float]) -> list[tuple[float, SimpleNamespace]]:
    return [(at, SimpleNamespace(cpu_ms=cpu_ms)) for at, cpu_ms in points]


def test_runs_on_a_line_are_read_on_it() -> None:
    runs = bare((100.0, 1.2), (200.0, 1.8), (300.0, 2.4))
    assert bare_cpu_at(100.0, runs) == pytest.approx(1.2)
    assert bare_cpu_at(150.0, runs) == pytest.approx(1.5)
    assert bare_cpu_at(275.0, runs) == pytest.approx(2.25)


def test_a_steady_drift_leaves_every_ratio_as_it_is() -> None:
    # The machine slows by 30 % over the run; a design costing 1.25 × the bare loop at every
    # moment is measured at 1.25 × wherever it runs.
    def pace(at: float) -> float:
        return 1.0 + 0.3 * at / 300

    runs = bare(*((at, 1.4 * pace(at)) for at in (0.0, 100.0, 200.0, 300.0)))
    for at in (10.0, 130.0, 250.0, 290.0):
        assert 1.25 * 1.4 * pace(at) / bare_cpu_at(at, runs) == pytest.approx(1.25)


def test_one_noisy_run_moves_the_line_less_than_itself() -> None:
    # Four runs at 1.5 ms but one at 1.2: the line stays nearer 1.5 than that run.
    runs = bare((0.0, 1.5), (100.0, 1.2), (200.0, 1.5), (300.0, 1.5))
    assert 1.35 < bare_cpu_at(100.0, runs) < 1.5


def test_runs_at_one_instant_give_their_mean() -> None:
    assert bare_cpu_at(5.0, bare((5.0, 1.0), (5.0, 2.0))) == pytest.approx(1.5)
