"""Shared helpers for the benchmark scripts: a throw-away database, timing, tables."""

from __future__ import annotations

import os
import platform
import statistics
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from gapless.ledger.conninfo import driver_conninfo, with_database
from gapless.ledger.migrations import migrate
from gapless.settings import Settings

BASE_URL = os.environ.get("GAPLESS_DATABASE_URL", Settings().database_url)


def database_url(name: str) -> str:
    return with_database(BASE_URL, name)


def conninfo(url: str) -> str:
    return driver_conninfo(url)


@contextmanager
def bench_database(label: str) -> Iterator[str]:
    """A freshly migrated database for one benchmark run, dropped afterwards."""
    name = f"gapless_bench_{label}_{uuid.uuid4().hex[:8]}"
    url = database_url(name)
    migrate(url, 0)
    try:
        yield url
    finally:
        with psycopg.connect(conninfo(database_url("postgres")), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}")


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Print (and return) a Markdown table, ready to paste into docs/benchmarks.md."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [f"**{title}**", ""]
    for index, row in enumerate(cells):
        padded = (c.ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = "\n".join(lines)
    print(text)
    print()
    return text
