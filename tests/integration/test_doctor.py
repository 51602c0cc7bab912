"""``gapless doctor`` against the real PostgreSQL and RabbitMQ and the mock integrator: all ok,
then each kind of failure gives its FAIL line (with a hint) and exit 1. (The replication line
against a primary with a standby, synchronous or not: tests/ha/test_pg_failover.py.)"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import create_database, database_url, drop_database
from tests.helpers import free_port, run_gapless, schema_at

PASSWORD = "sekrit-Pa55"
NAMES = ["postgres", "rabbitmq", "integrator", "schema", "cluster", "replication"]
#: The shared server may run with or without a standby: its replication line is ok or WARN.
SERVICES = NAMES[:-1]


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    """(exit code, checks by name from --json, the table's stdout) of two real runs."""
    as_json = run_gapless(["doctor", "--json", *args], env, timeout=60)
    assert as_json.stderr == "", as_json.stderr
    document = json.loads(as_json.stdout)
    assert [check["name"] for check in document["checks"]] == NAMES
    assert document["ok"] is (as_json.returncode == 0)
    table = run_gapless(["doctor", *args], env, timeout=60)
    assert table.returncode == as_json.returncode
    assert [line.split()[1] for line in table.stdout.splitlines()] == NAMES
    assert PASSWORD not in as_json.stdout + table.stdout
    return as_json.returncode, {c["name"]: c for c in document["checks"]}, table.stdout


def line_of(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.split()[1] == name)


def test_all_ok_against_the_real_services(integrated_env: dict[str, str]) -> None:
    code, checks, table = doctor(integrated_env)
    assert code == 0, table
    assert {name: checks[name]["status"] for name in SERVICES} == dict.fromkeys(SERVICES, "ok")
    assert all(line_of(table, name).startswith("ok ") for name in SERVICES)
    # A warning is not a failure: exit 0 with or without a standby.
    replication = checks["replication"]
    assert replication["status"] in ("ok", "warn"), replication
    assert line_of(table, "replication").startswith(
        "ok    replication " if replication["status"] == "ok" else "WARN  replication ")
    if replication["status"] == "warn":
        assert replication["hint"]
    assert checks["schema"]["detail"].startswith("up to date")
    assert "not found" in checks["integrator"]["detail"]


def test_an_unreachable_database_fails_and_skips_what_needs_it(
        integrated_env: dict[str, str]) -> None:
    port = free_port()
    env = {**integrated_env,
           "GAPLESS_DATABASE_URL": f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/gapless"}
    code, checks, table = doctor(env)
    assert code == 1
    assert checks["postgres"]["status"] == "fail"
    assert f"postgres:***@127.0.0.1:{port}" in checks["postgres"]["detail"]
    assert "check GAPLESS_DATABASE_URL" in checks["postgres"]["hint"]
    assert line_of(table, "postgres").startswith("FAIL  postgres")
    assert "hint: is PostgreSQL running?" in line_of(table, "postgres")
    assert (checks["schema"]["status"], checks["cluster"]["status"],
            checks["replication"]["status"]) == ("skip", "skip", "skip")
    assert line_of(table, "replication") == "skip  replication needs the database"
    assert (checks["rabbitmq"]["status"], checks["integrator"]["status"]) == ("ok", "ok")


def test_an_unreachable_broker_fails(integrated_env: dict[str, str]) -> None:
    port = free_port()
    env = {**integrated_env, "GAPLESS_AMQP_URL": f"amqp://guest:{PASSWORD}@127.0.0.1:{port}/"}
    code, checks, table = doctor(env)
    assert code == 1
    assert checks["rabbitmq"] == {
        "name": "rabbitmq", "status": "fail",
        "detail": f"cannot connect to RabbitMQ at amqp://guest:***@127.0.0.1:{port}/ "
                  "(connection refused)",
        "hint": "is RabbitMQ running? check GAPLESS_AMQP_URL"}
    assert line_of(table, "rabbitmq").startswith("FAIL  rabbitmq")
    assert [c["status"] for n, c in checks.items() if n in SERVICES and n != "rabbitmq"] == \
        ["ok"] * 4


def test_an_unreachable_integrator_fails(gapless_env: dict[str, str]) -> None:
    port = free_port()
    env = {**gapless_env, "GAPLESS_INTEGRATOR_URL": f"http://127.0.0.1:{port}"}
    code, checks, _ = doctor(env)
    assert code == 1
    assert checks["integrator"]["status"] == "fail"
    assert checks["integrator"]["detail"] == (f"cannot reach the integrator at "
                                              f"http://127.0.0.1:{port} (connection refused)")
    assert "GAPLESS_INTEGRATOR_URL" in checks["integrator"]["hint"]


def test_an_unreachable_nilvera_is_named_by_its_own_variables(
        gapless_env: dict[str, str]) -> None:
    """The Nilvera adapter sends to GAPLESS_NILVERA_URL: doctor names that URL and variable,
    not the mock's GAPLESS_INTEGRATOR_URL."""
    port = free_port()
    env = {**gapless_env,
           "GAPLESS_INTEGRATOR_ADAPTER": "gapless.integrator.nilvera:NilveraIntegrator",
           "GAPLESS_NILVERA_URL": f"http://127.0.0.1:{port}",
           "GAPLESS_NILVERA_API_KEY": "k" * 24,
           "GAPLESS_INTEGRATOR_URL": "http://127.0.0.1:9"}
    code, checks, _ = doctor(env)
    assert code == 1
    assert checks["integrator"]["status"] == "fail"
    assert f"http://127.0.0.1:{port}" in checks["integrator"]["detail"]
    assert "GAPLESS_NILVERA_URL" in checks["integrator"]["hint"]
    assert "GAPLESS_INTEGRATOR_URL" not in checks["integrator"]["hint"]


@pytest.fixture
def empty_database() -> Iterator[str]:
    name = f"gapless_doctor_{uuid.uuid4().hex[:8]}"
    create_database(name)
    yield name
    drop_database(name)


def test_an_unmigrated_database_fails_the_schema_check(
        integrated_env: dict[str, str], empty_database: str) -> None:
    env = {**integrated_env, "GAPLESS_DATABASE_URL": database_url(empty_database)}
    code, checks, table = doctor(env)
    assert code == 1
    assert checks["postgres"]["status"] == "ok"
    assert checks["schema"] == {"name": "schema", "status": "fail",
                                "detail": "no gapless schema in this database",
                                "hint": "run `gapless migrate`"}
    assert line_of(table, "schema") == ("FAIL  schema      no gapless schema in this database; "
                                        "hint: run `gapless migrate`")
    assert checks["cluster"]["status"] == "skip"


def test_a_foreign_cluster_id_fails_the_cluster_check(integrated_env: dict[str, str]) -> None:
    code, checks, _ = doctor({**integrated_env, "GAPLESS_CLUSTER_ID": "7"})
    assert code == 1
    assert checks["cluster"]["status"] == "fail"
    assert checks["cluster"]["detail"] == ("GAPLESS_CLUSTER_ID is 7 but the database belongs "
                                           "to cluster 0")
    assert checks["cluster"]["hint"].startswith("set GAPLESS_CLUSTER_ID=0")
    assert checks["schema"]["status"] == "ok"


def test_a_schema_behind_asks_for_migrate(integrated_env: dict[str, str], db_url: str) -> None:
    schema_at(db_url, "0002")
    code, checks, _ = doctor(integrated_env)
    assert code == 1
    assert checks["schema"]["status"] == "fail"
    assert checks["schema"]["detail"].startswith("behind: the database is at revision 0002")
    assert checks["schema"]["hint"] == "run `gapless migrate`"


def test_a_schema_ahead_says_this_gapless_is_older(integrated_env: dict[str, str],
                                                   db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    code, checks, _ = doctor(integrated_env)
    assert code == 1
    assert checks["schema"]["detail"].startswith(
        "ahead: the database is at revision 9999_from_the_future")
    assert checks["schema"]["hint"].startswith("this gapless is older than the database")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


def test_every_check_is_bounded_by_the_timeout(gapless_env: dict[str, str],
                                               silent_port: int) -> None:
    env = {**gapless_env,
           "GAPLESS_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{silent_port}/gapless",
           "GAPLESS_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{silent_port}/",
           "GAPLESS_INTEGRATOR_URL": f"http://127.0.0.1:{silent_port}"}
    started = time.monotonic()
    result = run_gapless(["doctor", "--json", "--timeout", "1"], env, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for name in ("postgres", "rabbitmq", "integrator"):
        assert checks[name]["status"] == "fail"
        assert checks[name]["detail"] == "no answer within 1 s"
        assert checks[name]["hint"]
    # The three run at once: about one timeout, plus the interpreter's start-up.
    assert elapsed < 10, elapsed
