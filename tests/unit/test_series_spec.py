from __future__ import annotations

from datetime import datetime

import pytest

from gapless.constants import ResetPeriod
from gapless.errors import SeriesError
from gapless.numbers import build_series_spec, parse_number, render_number


def test_default_is_the_gib_number() -> None:
    spec = build_series_spec("acme", "ABC")
    assert (spec.prefix, spec.reset, spec.tz, spec.width) == ("ABC", ResetPeriod.YEARLY,
                                                              "Europe/Istanbul", 9)
    number = render_number(spec, datetime(2026, 11, 22), 1)
    assert number == "ABC2026000000001"
    assert len(number) == 16


@pytest.mark.parametrize(("reset", "expected"), [
    ("never", "ABC2026000000042"),
    ("yearly", "ABC2026000000042"),
    ("monthly", "ABC2026110000042"),
    ("daily", "ABC2026112200042"),
])
def test_defaults_per_reset_carry_the_period_and_stay_16_characters(reset: str,
                                                                    expected: str) -> None:
    spec = build_series_spec("acme", "ABC", reset=reset)
    assert render_number(spec, datetime(2026, 11, 22), 42) == expected


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"prefix": "ab"}, "invalid prefix 'ab'"),
    ({"prefix": "A B"}, "invalid prefix"),
    ({"prefix": "ABC\n"}, "invalid prefix"),
    ({"reset": "weekly"}, "invalid reset 'weekly'"),
    ({"tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({"width": 0}, "invalid width 0"),
    ({"width": 19}, "invalid width 19"),
    ({"reset": "monthly", "fmt": "{prefix}{yyyy}{seq}"}, "must contain {mm}"),
    ({"reset": "daily", "fmt": "{prefix}{yyyy}{mm}{seq}"}, "must contain {dd}"),
    ({"reset": "yearly", "fmt": "{prefix}{seq}"}, "must contain {yyyy}"),
    ({"fmt": "{yyyy}{seq}"}, "must contain {prefix}"),
    ({"fmt": "{prefix}{yyyy}"}, "must contain {seq} exactly once"),
    ({"fmt": "{prefix}{seq}{seq}"}, "must contain {seq} exactly once"),
    ({"fmt": "{prefix}{year}{seq}"}, "unknown token {year}"),
])
def test_invalid_definitions_get_a_clear_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SeriesError, match=message.replace("{", r"\{").replace("}", r"\}")):
        build_series_spec("acme", "ABC", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tenant", "code"), [("", "ABC"), ("ac me", "ABC"), ("acme", ""),
                                              ("acme", "A/B"), ("-x", "ABC"), ("acme\n", "ABC"),
                                              ("acme", "ABC\n")])
def test_invalid_tenants_and_codes_are_refused(tenant: str, code: str) -> None:
    with pytest.raises(SeriesError, match=r"invalid (tenant|series code)"):
        build_series_spec(tenant, code, prefix="ABC")


def test_never_resetting_series_may_omit_the_year() -> None:
    spec = build_series_spec("acme", "R", prefix="R", reset="never", fmt="{prefix}{seq}", width=6)
    assert render_number(spec, datetime(2030, 1, 1), 7) == "R000007"


@pytest.mark.parametrize(("reset", "fmt", "width", "period"), [
    ("never", None, None, "all"),
    ("yearly", None, None, "2026"),
    ("monthly", None, None, "2026-11"),
    ("daily", None, None, "2026-11-25"),
    ("yearly", "{prefix}-{yyyy}/{yy}-{seq}", 6, "2026"),
    ("daily", "{dd}.{mm}.{yyyy}-{prefix}{seq}", 4, "2026-11-25"),
])
@pytest.mark.parametrize("no", [1, 61, 999])
def test_a_printed_number_reads_back_to_its_period_and_counter_value(
        reset: str, fmt: str | None, width: int | None, period: str, no: int) -> None:
    spec = build_series_spec("acme", "ABC", reset=reset, fmt=fmt, width=width)
    printed = render_number(spec, datetime(2026, 11, 25, 9, 30), no)
    assert parse_number(spec, printed) == (period, no)


@pytest.mark.parametrize("number", ["XYZ2026000000061", "ABC202600000061", "ABC20260000000610",
                                    "abc2026000000061", "ABC2026000000061 ", "ABCx026000000061"])
def test_a_number_the_series_cannot_have_printed_reads_back_as_none(number: str) -> None:
    assert parse_number(build_series_spec("acme", "ABC"), number) is None
