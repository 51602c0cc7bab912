"""The chaos scenario: I1–I7 hold with the whole system running as real processes while things
fail (see tests/chaos/scenario.py for what is injected, and README.md beside it for the knobs).

Short profile (the defaults, run by ``make test`` and CI): 90 s, 1,200 invoices, 3 workers.
Long profile: ``make chaos DURATION=600 INVOICES=20000``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gapless.settings import Settings
from tests.chaos.checker import Expectations, check
from tests.chaos.scenario import ChaosConfig, ChaosRun
from tests.helpers import run_gapless
from tests.mock_client import MockIntegratorClient

CONFIG = ChaosConfig.from_env()

#: What the issue asks a run of at least a minute to have injected ("must be shown").
MINIMUM_FAULTS = {"worker_kill": 5, "recovery_kill": 1, "amqp_drop": 1, "pg_terminate": 1,
                  "integrator_outage": 1}
FAULT_OF_COUNTER = {"integrator_outage": "outage"}


@pytest.mark.chaos
@pytest.mark.usefixtures("quiet_logs")
@pytest.mark.timeout(CONFIG.test_timeout_s)
async def test_invariants_hold_under_crashes_faults_and_bad_input(
        chaos_config: ChaosConfig, settings: Settings, chaos_env: dict[str, str],
        chaos_mock: MockIntegratorClient, log_dir: Path) -> None:
    run = ChaosRun(chaos_config, settings, chaos_env, chaos_mock, log_dir)
    try:
        await run.run()
        exit_codes = await run.finish()
    finally:
        await run.close()

    report = check(settings.database_url, run.history, Expectations(error_ok=False))
    print(f"\nchaos run: {chaos_config.describe()}; process logs in {log_dir}")
    print(report.summary())
    for note in run.notes:
        print(f"note: {note}")
    report.raise_for_violations()

    assert len(run.history.published) >= chaos_config.invoices
    if chaos_config.duration_s >= 60:
        for counter, minimum in MINIMUM_FAULTS.items():
            if FAULT_OF_COUNTER.get(counter, counter) in chaos_config.faults:
                assert run.faults[counter] >= minimum, (counter, run.faults)
    assert not run.cluster.unexpected_exits, run.cluster.unexpected_exits
    assert set(exit_codes.values()) == {0}, f"graceful stop failed: {exit_codes}"

    audit = run_gapless(["audit", "--integrator", "--json"], chaos_env, timeout=300)
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-2000:]
    chain = run_gapless(["chain", "verify"], chaos_env, timeout=300)  # I8 after the crashes
    assert chain.returncode == 0, chain.stdout[-4000:] + chain.stderr[-2000:]
