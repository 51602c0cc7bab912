"""Series and number formats: what a series is (:class:`SeriesSpec`), the layouts GİB accepts,
and a number printed from (or parsed back into) its period and sequence. Pure: no I/O.

The counter behind a series, and the seal that advances it, are SQL: ``schema/current/`` and
:mod:`gapless.ledger.counters`.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import datetime

from gapless.constants import Channel, ResetPeriod
from gapless.errors import SeriesError

TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
PREFIX_RE = re.compile(r"^[A-Z0-9]{1,16}$")
FORMAT_TOKENS = ("{prefix}", "{yyyy}", "{yy}", "{mm}", "{dd}", "{seq}")
_TOKEN_RE = re.compile(r"\{[^{}]*\}")


#: Default number layout per reset period: 3-char prefix + 16 characters in all (GİB e-invoice).
DEFAULT_FORMATS: dict[ResetPeriod, tuple[str, int]] = {
    ResetPeriod.NEVER: ("{prefix}{yyyy}{seq}", 9),
    ResetPeriod.YEARLY: ("{prefix}{yyyy}{seq}", 9),
    ResetPeriod.MONTHLY: ("{prefix}{yyyy}{mm}{seq}", 7),
    ResetPeriod.DAILY: ("{prefix}{yyyy}{mm}{dd}{seq}", 5),
}


#: Date parts a format must carry so that numbers of different periods never print alike.
REQUIRED_TOKENS: dict[ResetPeriod, tuple[str, ...]] = {
    ResetPeriod.NEVER: (),
    ResetPeriod.YEARLY: ("{yyyy}",),
    ResetPeriod.MONTHLY: ("{yyyy}", "{mm}"),
    ResetPeriod.DAILY: ("{yyyy}", "{mm}", "{dd}"),
}


@dataclass(frozen=True)
class SeriesSpec:
    """A validated series definition."""

    tenant: str
    code: str
    prefix: str
    reset: ResetPeriod
    tz: str
    width: int
    format: str
    #: Which documents the series numbers (``any``: no routing) and whether it is the tenant's
    #: default for that channel (used when a message names no series) — as read: a default may
    #: move to another series later (the issuing path asks for the defaults themselves).
    channel: Channel = Channel.ANY
    default: bool = False


def check_tenant(tenant: str) -> str:
    """A tenant name as it may be stored; raises SeriesError with a message fit for a person."""
    if not TENANT_RE.fullmatch(tenant):
        raise SeriesError(f"invalid tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-', "
                          "starting with a letter or digit")
    return tenant


def build_series_spec(tenant: str, code: str, *, prefix: str | None = None,
                      reset: str = "yearly", tz: str = "Europe/Istanbul",
                      width: int | None = None, fmt: str | None = None, channel: str = "any",
                      default: bool = False) -> SeriesSpec:
    """Validate a series definition; raises SeriesError with a message fit for a person."""
    check_tenant(tenant)
    if not CODE_RE.fullmatch(code):
        raise SeriesError(f"invalid series code {code!r}: use 1-32 letters, digits, '_' or '-', "
                          "starting with a letter or digit")
    prefix = code.upper() if prefix is None else prefix
    if not PREFIX_RE.fullmatch(prefix):
        raise SeriesError(f"invalid prefix {prefix!r}: use 1-16 upper-case letters A-Z or digits "
                          "(the GİB e-invoice number takes 3, e.g. ABC)")
    try:
        period = ResetPeriod(reset)
    except ValueError:
        raise SeriesError(
            f"invalid reset {reset!r}: choose never, yearly, monthly or daily") from None
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise SeriesError(f"unknown time zone {tz!r} (use an IANA name such as "
                          "Europe/Istanbul)") from None
    default_fmt, default_width = DEFAULT_FORMATS[period]
    fmt = default_fmt if fmt is None else fmt
    width = default_width if width is None else width
    if not 1 <= width <= 18:
        raise SeriesError(f"invalid width {width}: the sequence takes 1 to 18 digits")
    validate_format(fmt, period)
    try:
        kind = Channel(channel)
    except ValueError:
        raise SeriesError(f"invalid channel {channel!r}: choose any, efatura, earsiv or "
                          "edespatch") from None
    return SeriesSpec(tenant, code, prefix, period, tz, width, fmt, kind, default)


def validate_format(fmt: str, period: ResetPeriod) -> None:
    """A format must print every number of the tenant differently, for ever."""
    unknown = [token for token in _TOKEN_RE.findall(fmt) if token not in FORMAT_TOKENS]
    if unknown:
        raise SeriesError(f"invalid format {fmt!r}: unknown token {unknown[0]}; "
                          f"use {', '.join(FORMAT_TOKENS)}")
    if fmt.count("{seq}") != 1:
        raise SeriesError(f"invalid format {fmt!r}: it must contain {{seq}} exactly once")
    if "{prefix}" not in fmt:
        raise SeriesError(f"invalid format {fmt!r}: it must contain {{prefix}} so that the "
                          "series of one tenant never print the same number")
    missing = [token for token in REQUIRED_TOKENS[period] if token not in fmt]
    if missing:
        raise SeriesError(f"invalid format {fmt!r} for a {period.value} reset: it must contain "
                          f"{', '.join(missing)}, or numbers of two periods would print alike")


def gib_layout_problem(spec: SeriesSpec) -> str | None:
    """Why this series cannot number GİB e-invoices, or None when it can.

    A UBL-TR invoice's ID is a 3-character prefix, the 4-digit year and a 9-digit sequence that
    starts again at 1 every year (e.g. ``ABC2026000000001``): the series must be the default
    layout with a 3-character prefix and a yearly reset.
    """
    if len(spec.prefix) != 3:
        return (f"series {spec.code!r} has prefix {spec.prefix!r}; a GİB e-invoice number needs "
                "a 3-character prefix")
    if spec.reset is not ResetPeriod.YEARLY:
        return (f"series {spec.code!r} resets {spec.reset.value}; GİB e-invoice numbers restart "
                "every year (use --reset yearly)")
    if (spec.format, spec.width) != DEFAULT_FORMATS[ResetPeriod.YEARLY]:
        return (f"series {spec.code!r} prints {spec.format} with {spec.width} digits; a GİB "
                "e-invoice number is {prefix}{yyyy} and 9 digits")
    return None


def render_number(spec: SeriesSpec, local: datetime, no: int) -> str:
    """The Python twin of ``gapless_render`` (used for display and tests)."""
    return (spec.format.replace("{prefix}", spec.prefix)
            .replace("{yyyy}", f"{local.year:04d}").replace("{yy}", f"{local.year % 100:02d}")
            .replace("{mm}", f"{local.month:02d}").replace("{dd}", f"{local.day:02d}")
            .replace("{seq}", str(no).zfill(spec.width)))


#: What each date token of a format reads back as (a named group of its digits).
_TOKEN_PATTERNS = {"{yyyy}": ("yyyy", r"\d{4}"), "{yy}": ("yy", r"\d{2}"),
                   "{mm}": ("mm", r"\d{2}"), "{dd}": ("dd", r"\d{2}")}


def parse_number(spec: SeriesSpec, number: str) -> tuple[str, int] | None:
    """The period key and counter value a printed number of this series stands for, read back
    through its format (the inverse of :func:`render_number`); None when the series cannot
    have printed it. Used to place a number the integrator holds on its counter (the audit,
    ``gapless series bump``)."""
    pattern = ""
    seen: set[str] = set()
    position = 0
    for token in _TOKEN_RE.finditer(spec.format):
        pattern += re.escape(spec.format[position:token.start()])
        position = token.end()
        text = token.group(0)
        if text == "{prefix}":
            pattern += re.escape(spec.prefix)
            continue
        group, digits = ("seq", rf"\d{{{spec.width}}}") if text == "{seq}" else \
            _TOKEN_PATTERNS[text]
        pattern += f"(?P={group})" if group in seen else f"(?P<{group}>{digits})"
        seen.add(group)
    pattern += re.escape(spec.format[position:])
    found = re.fullmatch(pattern, number)
    if found is None:
        return None
    parts = found.groupdict()
    period = {ResetPeriod.NEVER: "all", ResetPeriod.YEARLY: parts.get("yyyy"),
              ResetPeriod.MONTHLY: f"{parts.get('yyyy')}-{parts.get('mm')}",
              ResetPeriod.DAILY: f"{parts.get('yyyy')}-{parts.get('mm')}-{parts.get('dd')}",
              }[spec.reset]
    if period is None or "None" in period:
        return None
    return period, int(parts["seq"])
