"""``gapless demo`` end to end: a small run must settle, survive its kill -9, and pass the audit."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections import Counter

import psycopg
import pytest

from gapless.demo.runner import DemoConfig, demo_load
from gapless.demo.samples import REJECTED_TAX_ID
from tests.conftest import admin_conninfo
from tests.helpers import run_gapless

pytestmark = pytest.mark.slow


def database_exists(name: str) -> bool:
    with psycopg.connect(admin_conninfo(), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (name,)).fetchone() is not None


def issued_by_kind(stdout: str) -> Counter[tuple[str, str]]:
    """The summary's "issued by kind (N):" table: (type, profile) -> count; N is their sum."""
    lines = stdout.splitlines()
    titles = [(i, re.fullmatch(r"  issued by kind \((\d+)\):", line))
              for i, line in enumerate(lines) if line.startswith("  issued by kind")]
    assert len(titles) == 1, stdout
    at, title = titles[0]
    assert title is not None, stdout
    assert lines[at + 1].split() == ["type", "profile", "issued"]
    kinds: Counter[tuple[str, str]] = Counter()
    for line in lines[at + 2:]:
        row = re.fullmatch(r"    ([A-Z]+) +([A-Z]+) +(\d+)", line)
        if row is None:
            break
        kinds[(row.group(1), row.group(2))] = int(row.group(3))
    assert sum(kinds.values()) == int(title.group(1))
    return kinds


def expected_kinds(invoices: int) -> Counter[tuple[str, str]]:
    """(type, profile) of the demo's issued documents: its seeded load less the rejected ones
    (the ids differ per run; the kinds do not); a dispatch note by its despatch type and
    profile."""
    kinds: Counter[tuple[str, str]] = Counter()
    for message in demo_load(invoices, DemoConfig().seed, "test"):
        if message["customer"]["tax_id"] == REJECTED_TAX_ID:
            continue
        if message.get("document") == "despatch":
            kinds[(message["despatch"]["type"], "TEMELIRSALIYE")] += 1
        else:
            kinds[(message.get("type", "SATIS"), message.get("profile", "TEMELFATURA"))] += 1
    return kinds


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_demo_settles_survives_a_killed_worker_and_passes_the_audit(queue_type: str) -> None:
    database = f"gapless_demo_t_{uuid.uuid4().hex[:8]}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    for key in ("GAPLESS_DATABASE_URL", "GAPLESS_AMQP_URL"):  # the servers, if configured
        if key in os.environ:
            env[key] = os.environ[key]
    env["GAPLESS_QUEUE_TYPE"] = queue_type
    env["COLUMNS"] = "80"
    # The logs in a folder of the test's own, short enough for the 80-column check below.
    with tempfile.TemporaryDirectory(prefix="gdemo-") as logs:
        result = run_gapless(["demo", "--invoices", "200", "--workers", "2",
                              "--database", database, "--log-dir", logs], env, timeout=280)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^audit: clean$", result.stdout, re.MULTILINE), output
    assert re.search(r"^demo: 200/200 invoices settled in [0-9.]+s", result.stdout,
                     re.MULTILINE), output
    summary = re.search(r"(\d+) issued, (\d+) rejected, (\d+) error", result.stdout)
    assert summary is not None
    issued, rejected, errors = map(int, summary.groups())
    # Every 100th invoice carries the tax id the integrator always rejects (unless a dispatch
    # note took its place).
    kinds = expected_kinds(200)
    assert (issued, rejected, errors) == (sum(kinds.values()), 200 - sum(kinds.values()), 0)
    assert f"integrator (ledger): {issued} accepted document(s)" in result.stdout
    # The issued documents by kind, read from the database: exactly the published mix (the
    # demo's load is seeded), without the rejected ones — dispatch notes among them.
    assert issued_by_kind(result.stdout) == kinds, output
    assert sum(count for (kind, _), count in kinds.items() if kind in ("SEVK", "MATBUDAN")) > 10
    # The worker was killed midway and came back; progress went to stderr.
    assert re.search(r"kill -9 worker-1 \(pid \d+\)", result.stderr), output
    assert "worker-1 restarted" in result.stderr
    assert "settled" in result.stderr
    # Readable in an 80-column terminal.
    too_wide = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    # Without --keep the run leaves no database behind.
    assert not database_exists(database)


def test_demo_refuses_to_drop_a_database_that_is_not_a_demo() -> None:
    result = run_gapless(["demo", "--database", "gapless"], dict(os.environ))
    assert result.returncode == 2
    assert "must start with 'gapless_demo'" in result.stderr
