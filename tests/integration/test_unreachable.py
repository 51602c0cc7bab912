"""Every command answers an unreachable PostgreSQL, RabbitMQ or integrator the same way: one
``gapless:`` line on stderr naming the service, its URL without the password, and what to check;
exit 1; nothing else on stderr (no traceback, no library log line), in JSON log mode as well.

"Unreachable" is a closed port on 127.0.0.1 (nothing listens: connection refused). Each URL
carries a password, which must not appear anywhere in the output. The other services are the
real ones (the test's own database and queue prefix).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from tests.helpers import ROOT, free_port, run_gapless
from tests.mock_client import MockIntegratorClient

PASSWORD = "sekrit-Pa55"
API_TOKEN = "unreachable-test-token-0123456789"


@dataclass(frozen=True)
class Closed:
    """A service URL at a closed port, and how the report must show it."""

    variable: str
    url: str
    shown: str
    service: str

    def check(self, result: subprocess.CompletedProcess[str]) -> str:
        """The one line, after checking everything the contract says about it."""
        assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        line = lines[0]
        assert line.startswith("gapless: "), line
        assert self.service in line, line
        assert f" at {self.shown} (" in line, line
        assert f"check {self.variable}" in line, line
        assert PASSWORD not in result.stderr + result.stdout
        assert "Traceback" not in result.stderr
        return line


def closed_database() -> Closed:
    port = free_port()
    return Closed("GAPLESS_DATABASE_URL",
                  f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/gapless_unreachable",
                  f"postgresql://postgres:***@127.0.0.1:{port}/gapless_unreachable",
                  "PostgreSQL")


def closed_broker() -> Closed:
    port = free_port()
    return Closed("GAPLESS_AMQP_URL", f"amqp://guest:{PASSWORD}@127.0.0.1:{port}/",
                  f"amqp://guest:***@127.0.0.1:{port}/", "RabbitMQ")


def closed_integrator() -> Closed:
    port = free_port()
    return Closed("GAPLESS_INTEGRATOR_URL", f"http://gapless:{PASSWORD}@127.0.0.1:{port}",
                  f"http://gapless:***@127.0.0.1:{port}", "integrator")


def with_closed(env: dict[str, str], closed: Closed, log_format: str = "json"
                ) -> dict[str, str]:
    return {**env, closed.variable: closed.url, "GAPLESS_LOG_FORMAT": log_format,
            "GAPLESS_API_TOKEN": API_TOKEN}


def api_args() -> list[str]:
    return ["api", "--port", str(free_port())]


# --------------------------------------------------------------------------------- PostgreSQL

DATABASE_COMMANDS = [
    ["migrate"],
    ["series", "add", "acme", "ABC"],
    ["series", "list"],
    ["series", "next", "acme", "ABC"],
    ["audit"],
    ["audit", "--integrator"],
    ["tenant", "set", "acme", "--tax-id", "1234567808", "--name", "Acme", "--tax-office", "K",
     "--street", "S", "--district", "D", "--city", "C"],
    ["tenant", "show", "acme"],
    ["invoice", "show", "shop-1"],
    ["invoice", "show", "shop-1", "--document"],
    ["invoice", "void", "shop-1", "--reason", "typo"],
    ["invoice", "cancel", "shop-1"],
    ["status"],
    ["status", "--json"],
    ["recovery"],
    ["recovery", "--once"],
    ["api"],
    ["demo", "--invoices", "1"],
]


@pytest.mark.parametrize("args", DATABASE_COMMANDS, ids=" ".join)
def test_unreachable_database(args: list[str], gapless_env: dict[str, str]) -> None:
    closed = closed_database()
    argv = api_args() if args == ["api"] else args
    result = run_gapless(argv, with_closed(gapless_env, closed), timeout=60)
    line = closed.check(result)
    assert line.startswith("gapless: cannot reach the database: PostgreSQL at "), line
    assert line.endswith("(connection refused); is PostgreSQL running? check "
                         "GAPLESS_DATABASE_URL"), line


def test_unreachable_database_for_invoice_retry(gapless_env: dict[str, str],
                                                mock_integrator: MockIntegratorClient) -> None:
    closed = closed_database()
    env = {**with_closed(gapless_env, closed), "GAPLESS_INTEGRATOR_URL": mock_integrator.url}
    closed.check(run_gapless(["invoice", "retry", "shop-1"], env, timeout=60))


def test_unreachable_database_for_a_command_written_later(gapless_env: dict[str, str]) -> None:
    """The mechanism is the CLI's, not each command's: a new command that only opens an engine
    (as `gapless tenant` does) gets the same one line without a line of its own."""
    script = textwrap.dedent("""
        from gapless.cli import app, main
        from gapless.cli.options import DatabaseUrlOption, run, settings_from


        @app.command("written-later")
        def written_later(database_url: str | None = DatabaseUrlOption) -> None:
            settings = settings_from(database_url=database_url)

            async def read() -> None:
                from gapless.ledger.database import make_engine

                engine = make_engine(settings.database_url, actor="operator", pool_size=1)
                try:
                    async with engine.begin() as conn:
                        await conn.exec_driver_sql("SELECT 1")
                finally:
                    await engine.dispose()

            run(read())


        main(["written-later"])
    """)
    closed = closed_database()
    result = subprocess.run([sys.executable, "-c", script], env=with_closed(gapless_env, closed),
                            capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    closed.check(result)


def test_unreachable_database_for_the_worker(gapless_env: dict[str, str]) -> None:
    """The worker rides out a database that is briefly away (a restart, a terminated backend)
    for 15 s, saying so in its own log events; then it gives up with the same one line. Its
    retry events are the only other lines: no library line, no traceback."""
    closed = closed_database()
    result = run_gapless(["worker"], with_closed(gapless_env, closed), timeout=90)
    assert result.returncode == 1, result.stderr
    *retries, line = result.stderr.strip().splitlines()
    assert retries
    assert {json.loads(retry)["event"] for retry in retries} == {"database_unavailable_at_start"}
    closed.check(subprocess.CompletedProcess(result.args, 1, result.stdout, line))


# ----------------------------------------------------------------------------------- RabbitMQ

BROKER_COMMANDS = [
    ["publish", "--demo", "1"],
    ["dead", "list"],
    ["dead", "replay", "--all"],
    ["worker"],
    ["api"],
    ["demo", "--invoices", "1"],
]


@pytest.mark.parametrize("log_format", ["json", "console"])
@pytest.mark.parametrize("args", BROKER_COMMANDS, ids=" ".join)
def test_unreachable_broker(args: list[str], log_format: str,
                            gapless_env: dict[str, str]) -> None:
    """aio-pika/aiormq log their own line for a failed connection; it must not show."""
    closed = closed_broker()
    argv = api_args() if args == ["api"] else args
    result = run_gapless(argv, with_closed(gapless_env, closed, log_format), timeout=60)
    line = closed.check(result)
    assert line == (f"gapless: cannot connect to RabbitMQ at {closed.shown} (connection "
                    "refused); is RabbitMQ running? check GAPLESS_AMQP_URL")


def test_unreachable_broker_for_status_still_shows_the_database(
        gapless_env: dict[str, str]) -> None:
    """status shows what it could read (the series), then fails like every command."""
    closed = closed_broker()
    env = with_closed(gapless_env, closed)
    assert run_gapless(["series", "add", "acme", "ABC"], gapless_env, timeout=60).returncode == 0
    result = run_gapless(["status", "--json"], env, timeout=60)
    closed.check(result)
    document = json.loads(result.stdout)
    assert [(row["tenant"], row["series"]) for row in document["series"]] == [("acme", "ABC")]
    assert document["queue"]["ready"] is None
    assert document["queue"]["note"].startswith("broker unreachable: cannot connect to RabbitMQ")
    table = run_gapless(["status"], env, timeout=60)
    closed.check(table)
    assert "acme/ABC" in table.stdout


# --------------------------------------------------------------------------------- integrator

#: Recovery is not here: an unreachable integrator is its normal business (each orphan's
#: attempt is recorded as a transient ERROR and retried later; the breaker skips rounds), with
#: --once as well. The worker likewise pauses consuming until a probe is answered.
INTEGRATOR_COMMANDS = [
    ["audit", "--integrator"],
    ["invoice", "retry", "shop-1"],
]


@pytest.mark.parametrize("args", INTEGRATOR_COMMANDS, ids=" ".join)
def test_unreachable_integrator(args: list[str], gapless_env: dict[str, str]) -> None:
    closed = closed_integrator()
    line = closed.check(run_gapless(args, with_closed(gapless_env, closed), timeout=60))
    assert line == (f"gapless: cannot reach the integrator at {closed.shown} (connection "
                    "refused); is the integrator running? check GAPLESS_INTEGRATOR_URL")
