"""Fixtures of the acceptance tier: private PostgreSQL and RabbitMQ servers for the tests that
restart them (tests/private_services.py), and a "service restarts" section in pytest's terminal
summary with what those tests saw."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.private_services import private_postgres, private_rabbitmq

__all__ = ["private_postgres", "private_rabbitmq"]

_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture
def summary_line(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Print a line now (seen with ``-s``) and again in the terminal summary (always seen)."""
    lines = request.config.stash.setdefault(_REPORT, [])

    def add(line: str) -> None:
        print(line)
        lines.append(line)

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("service restarts")
        for line in lines:
            terminalreporter.write_line(line)
