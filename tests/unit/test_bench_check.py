"""bench/check.py's issue suite: a design's CPU is compared with the bare loop's at its time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.check import bare_cpu_at


def bare(at: float, cpu_ms: float) -> tuple[float, SimpleNamespace]:
    return at, SimpleNamespace(cpu_ms=cpu_ms)


def test_the_bare_loop_is_read_on_the_line_between_its_runs() -> None:
    before, after = bare(100.0, 1.2), bare(200.0, 1.8)
    assert bare_cpu_at(100.0, before, after) == pytest.approx(1.2)
    assert bare_cpu_at(150.0, before, after) == pytest.approx(1.5)
    assert bare_cpu_at(175.0, before, after) == pytest.approx(1.65)
    assert bare_cpu_at(200.0, before, after) == pytest.approx(1.8)


def test_a_steady_drift_leaves_every_ratio_as_it_is() -> None:
    # The machine slows by 30 % over a round; a design costing 1.25 × the bare loop at every
    # moment is measured at 1.25 × wherever it runs in the round.
    def pace(at: float) -> float:
        return 1.0 + 0.3 * at / 100

    before, after = bare(0.0, 1.4 * pace(0.0)), bare(100.0, 1.4 * pace(100.0))
    for at in (10.0, 30.0, 50.0, 90.0):
        design_cpu = 1.25 * 1.4 * pace(at)
        assert design_cpu / bare_cpu_at(at, before, after) == pytest.approx(1.25)


def test_runs_at_one_instant_give_their_mean() -> None:
    assert bare_cpu_at(5.0, bare(5.0, 1.0), bare(5.0, 2.0)) == pytest.approx(1.5)
