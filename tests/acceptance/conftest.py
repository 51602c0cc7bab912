"""Fixtures of the acceptance tier: the real gapless processes of a test (``procs``), and private
PostgreSQL and RabbitMQ servers for the tests that restart them (tests/private_services.py).
What the restart tests saw is reported through the ``summary_line`` fixture (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.helpers import ledger
from tests.private_services import private_postgres, private_rabbitmq
from tests.recovery_support import Processes

__all__ = ["private_postgres", "private_rabbitmq", "procs"]


@pytest.fixture
def procs(integrated_env: dict[str, str], log_dir: Path) -> Iterator[Processes]:
    """Workers, recovery and other ``gapless`` processes of one test (tests.recovery_support.
    Processes), against the test's database, queue and mock integrator; all stopped after it."""
    started = Processes(integrated_env, log_dir)
    yield started
    started.close()


@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    """Series acme/ABC (the series of tests.worker_support.sale)."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
