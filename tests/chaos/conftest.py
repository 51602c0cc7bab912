"""Fixtures of the chaos suite: the run's knobs, and a seeded mock integrator per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from gapless.logging import configure_logging
from tests.chaos.scenario import ChaosConfig
from tests.mock_client import MockIntegratorClient, running_mock


@pytest.fixture
def chaos_config() -> ChaosConfig:
    """GAPLESS_CHAOS_* knobs (``make chaos``); defaults are the short CI profile."""
    return ChaosConfig.from_env()


@pytest.fixture
def chaos_mock(log_dir: Path, chaos_config: ChaosConfig) -> Iterator[MockIntegratorClient]:
    """``gapless mock-integrator`` seeded with the run's seed (its fault draws replay)."""
    with running_mock(log_dir, seed=chaos_config.seed,
                      env={"GAPLESS_LOG_LEVEL": "warning"}) as client:
        yield client


@pytest.fixture
def chaos_env(gapless_env: dict[str, str], chaos_mock: MockIntegratorClient) -> dict[str, str]:
    return {**gapless_env, "GAPLESS_INTEGRATOR_URL": chaos_mock.url}


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """The test process's own gapless logs (one debug line per publish) at warning level only,
    for this test; the previous structlog configuration is restored after it."""
    previous = structlog.get_config()
    configure_logging("console", "warning")
    yield
    structlog.configure(**previous)
