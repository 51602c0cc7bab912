"""A misspelt ``GAPLESS_*`` variable is named at start-up with the closest known name, never
ignored in silence; every variable gapless or its tools read is known."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gapless.settings import Settings, UnknownVariable, known_variables, unknown_variables
from tests.helpers import run_gapless

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PATH": "/usr/bin:/bin"}


def test_every_settings_field_is_known_by_its_variable() -> None:
    known = known_variables()
    for field in Settings.model_fields:
        assert f"GAPLESS_{field.upper()}" in known


def test_a_misspelt_name_gets_the_closest_known_one() -> None:
    environ = {"GAPLESS_QUEUE_TPYE": "quorum", "GAPLESS_DATABSE_URL": "postgresql://x/y",
               "GAPLESS_ZZZ": "1", "GAPLESS_QUEUE": "ok", "HOME": "/root",
               "GAPLESS_CHAOS_DURATON": "60"}
    assert unknown_variables(environ) == [
        UnknownVariable("GAPLESS_CHAOS_DURATON", "GAPLESS_CHAOS_DURATION"),
        UnknownVariable("GAPLESS_DATABSE_URL", "GAPLESS_DATABASE_URL"),
        UnknownVariable("GAPLESS_QUEUE_TPYE", "GAPLESS_QUEUE_TYPE"),
        UnknownVariable("GAPLESS_ZZZ", None),
    ]
    assert unknown_variables(environ)[2].line() == (
        "unknown setting GAPLESS_QUEUE_TPYE (did you mean GAPLESS_QUEUE_TYPE?)")
    assert unknown_variables(environ)[3].line() == "unknown setting GAPLESS_ZZZ"


def test_names_are_compared_as_settings_reads_them_case_insensitively() -> None:
    assert unknown_variables({"gapless_queue": "x", "Gapless_Lease_S": "10"}) == []


def test_names_read_elsewhere_may_be_declared_known() -> None:
    environ = {"GAPLESS_ACME_NILVERA_KEY": "secret", "GAPLESS_QUEUE": "ok"}
    assert [v.name for v in unknown_variables(environ)] == ["GAPLESS_ACME_NILVERA_KEY"]
    assert unknown_variables(environ, also_known=["gapless_acme_nilvera_key"]) == []


def _variables_read_in_the_repository() -> set[str]:
    """Every GAPLESS_* name written in the code and tools (docs excluded: they may quote a
    misspelling); names cut at a placeholder (``GAPLESS_CHAOS_{name}``) are families."""
    found: set[str] = set()
    pattern = re.compile(r"(?<![A-Za-z0-9_])GAPLESS_[A-Z0-9_]*[A-Z0-9]")
    for folder in ("gapless", "worker", "recovery", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "test_unknown_settings.py":
                continue
            found.update(pattern.findall(path.read_text(encoding="utf-8")))
    for name in ("Makefile", "docker-compose.yml"):
        found.update(pattern.findall((ROOT / name).read_text(encoding="utf-8")))
    return found


def test_every_variable_the_repository_reads_is_known() -> None:
    known = known_variables()
    families = ("GAPLESS_CHAOS", "GAPLESS_GIB_POLL", "GAPLESS_API", "GAPLESS_TEST",
                "GAPLESS_DESIGNS", "GAPLESS_PROGRAMS")  # prose and Python names, not variables
    missing = sorted(name for name in _variables_read_in_the_repository()
                     if name not in known and name not in families)
    assert missing == []


def test_a_command_names_the_unknown_variable_on_stderr_and_goes_on() -> None:
    result = run_gapless(["id", "decode", "5"], {**ENV, "GAPLESS_QUEUE_TPYE": "quorum-secret"},
                         timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "id 5: cluster 0, local 5"
    assert result.stderr.strip().splitlines() == [
        "gapless: unknown setting GAPLESS_QUEUE_TPYE (did you mean GAPLESS_QUEUE_TYPE?)"]
    assert "quorum-secret" not in result.stderr  # the name, never the value


def test_with_json_logs_the_warning_is_a_json_event() -> None:
    result = run_gapless(["id", "decode", "5"], {**ENV, "GAPLESS_LOG_FORMAT": "json",
                                                 "GAPLESS_LEASE": "60"}, timeout=30)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.strip().splitlines()
    event = json.loads(line)
    assert (event["event"], event["level"], event["variable"], event["did_you_mean"]) == (
        "unknown_setting", "warning", "GAPLESS_LEASE", "GAPLESS_LEASE_S")


def test_known_variables_say_nothing() -> None:
    result = run_gapless(["id", "decode", "5"], {**ENV, "GAPLESS_QUEUE_TYPE": "quorum",
                                                 "GAPLESS_WORKER_HOOKS": ""}, timeout=30)
    assert (result.returncode, result.stderr) == (0, "")


def test_the_secret_variables_an_accounts_file_names_are_known(tmp_path: Path) -> None:
    """A per-tenant key may live in a GAPLESS_… variable: the accounts file names it, so it is
    read, and start-up does not call it unknown (an unrelated misspelling still is)."""
    accounts = tmp_path / "integrators.toml"
    accounts.write_text('[tenants.acme]\nadapter = "nilvera"\nurl = "http://127.0.0.1:9"\n'
                        'api_key_env = "GAPLESS_ACME_NILVERA_KEY"\n')
    env = {**ENV, "GAPLESS_INTEGRATORS_FILE": str(accounts),
           "GAPLESS_ACME_NILVERA_KEY": "secret-value"}
    result = run_gapless(["id", "decode", "5"], env, timeout=30)
    assert (result.returncode, result.stderr) == (0, "")
    result = run_gapless(["id", "decode", "5"], {**env, "GAPLESS_LEASE": "60"}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        "gapless: unknown setting GAPLESS_LEASE (did you mean GAPLESS_LEASE_S?)"]
    assert "secret-value" not in result.stderr
