"""The private-server fixtures on a machine without the servers: a skip that names what is
missing (or, with GAPLESS_REQUIRE_PRIVATE_SERVICES=1, a failure), and no temp dir left behind.
Distribution wrappers on the PATH resolve to the real scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import harness
from bench.harness import rabbitmq_scripts
from tests import private_services
from tests.ha.rabbit_cluster import PrivateRabbitCluster
from tests.private_services import (
    PrivatePostgres,
    PrivateRabbitMQ,
    ServiceUnavailable,
    _serving,
    _unavailable,
)


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No server binaries anywhere: an empty PATH and empty distribution directories."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for name in ("GAPLESS_TEST_PG_BIN", "GAPLESS_TEST_RABBITMQ_SBIN"):
        monkeypatch.delenv(name, raising=False)
    for name in ("POSTGRES_LIB_DIR", "RABBITMQ_SBIN_DIR", "ERLANG_LIB_DIR"):
        monkeypatch.setattr(harness, name, empty)
    monkeypatch.setattr(private_services.tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_without_postgresql_the_reason_names_the_binaries_and_the_override(
        bare_machine: Path) -> None:
    with pytest.raises(ServiceUnavailable, match=r"initdb, pg_ctl.*GAPLESS_TEST_PG_BIN"):
        PrivatePostgres()
    assert not list(bare_machine.glob(f"{private_services.TEMP_PREFIX}*"))


def test_without_rabbitmq_the_reason_names_the_script_and_the_override(
        bare_machine: Path) -> None:
    with pytest.raises(ServiceUnavailable,
                       match=r"rabbitmq-server not found.*GAPLESS_TEST_RABBITMQ_SBIN"):
        PrivateRabbitMQ()
    assert not list(bare_machine.glob(f"{private_services.TEMP_PREFIX}*"))


def test_without_rabbitmq_a_cluster_says_why_and_leaves_nothing(bare_machine: Path) -> None:
    with pytest.raises(ServiceUnavailable,
                       match=r"rabbitmq-server not found.*GAPLESS_TEST_RABBITMQ_SBIN"):
        PrivateRabbitCluster()
    assert not list(bare_machine.glob(f"{private_services.TEMP_PREFIX}*"))


def test_a_cluster_that_fails_to_start_is_closed_and_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any failure at start (not only an unavailable server) closes what was made, then
    propagates. No node really starts here: their start fails at once."""
    monkeypatch.setattr(private_services.tempfile, "tempdir", str(tmp_path))

    def fail(node: PrivateRabbitMQ) -> float:
        raise RuntimeError("no start today")

    monkeypatch.setattr(PrivateRabbitMQ, "start", fail)
    fixture = _serving(PrivateRabbitCluster, PrivateRabbitCluster.start)
    with pytest.raises(RuntimeError, match="no start today"):
        next(fixture)  # on a machine without RabbitMQ: the skip of _unavailable instead
    assert not list(tmp_path.glob(f"{private_services.TEMP_PREFIX}*"))


def test_a_wrapper_on_the_path_resolves_to_the_script_beside_it(
        bare_machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian: /usr/sbin/rabbitmqctl -> ../lib/rabbitmq/bin/rabbitmq-script-wrapper, which would
    # switch to the rabbitmq user and its home; the fixtures need the script itself.
    lib = bare_machine / "lib"
    sbin = bare_machine / "sbin"
    lib.mkdir()
    sbin.mkdir()
    (lib / "rabbitmq-script-wrapper").write_text("#!/bin/sh\n")
    for name in ("rabbitmq-server", "rabbitmqctl"):
        (lib / name).write_text("#!/bin/sh\n")
        (lib / name).chmod(0o755)
        (sbin / name).symlink_to(lib / "rabbitmq-script-wrapper")
    (lib / "rabbitmq-script-wrapper").chmod(0o755)
    monkeypatch.setenv("PATH", str(sbin))
    assert rabbitmq_scripts() == (lib / "rabbitmq-server", lib / "rabbitmqctl")


def test_unavailable_skips_unless_the_services_are_required(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAPLESS_REQUIRE_PRIVATE_SERVICES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="private service unavailable: no initdb"):
        _unavailable("no initdb")
    monkeypatch.setenv("GAPLESS_REQUIRE_PRIVATE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match="required but unavailable: no initdb"):
        _unavailable("no initdb")
