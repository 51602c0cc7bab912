"""``gapless doctor``'s verdicts from what the checks read, without I/O: the schema and cluster
lines from the database's facts, a check bounded by its deadline, and when the system is healthy
(tests/unit/test_doctor_replication.py: the replication line; tests/integration/test_doctor.py:
the command against real services)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from alembic.script import ScriptDirectory

from gapless.ledger.migrations import alembic_config
from gapless.ops.doctor import (
    FAIL,
    OK,
    SKIP,
    WARN,
    Check,
    DatabaseFacts,
    bounded,
    check_cluster,
    check_schema,
    healthy,
)
from gapless.settings import Settings

SETTINGS = Settings(database_url="postgresql://app:s3cret-pw@db.example:6543/books",
                    cluster_id=3)
HEAD = ScriptDirectory.from_config(alembic_config(SETTINGS.database_url)).get_current_head()


def test_schema_and_cluster_are_skipped_without_the_database() -> None:
    assert check_schema(SETTINGS, None) == Check("schema", SKIP, "needs the database")
    assert check_cluster(SETTINGS, None) == Check("cluster", SKIP, "needs the database")


def test_a_database_without_the_schema_fails_the_schema_and_skips_the_cluster() -> None:
    facts = DatabaseFacts(revision=None, cluster_id=None)
    assert check_schema(SETTINGS, facts) == Check(
        "schema", FAIL, "no gapless schema in this database", "run `gapless migrate`")
    assert check_cluster(SETTINGS, facts) == Check(
        "cluster", SKIP, "no cluster id stored (no gapless schema)")


def test_the_schema_at_head_is_ok() -> None:
    check = check_schema(SETTINGS, DatabaseFacts(HEAD, 3))
    assert check == Check("schema", OK, f"up to date (revision {HEAD})")


def test_a_known_older_revision_is_behind_and_an_unknown_one_ahead() -> None:
    behind = check_schema(SETTINGS, DatabaseFacts("0001", 3))
    assert (behind.status, behind.hint) == (FAIL, "run `gapless migrate`")
    assert behind.detail == (f"behind: the database is at revision 0001, this gapless's head "
                             f"is {HEAD}")
    ahead = check_schema(SETTINGS, DatabaseFacts("9999", 3))
    assert ahead.status == FAIL
    assert ahead.detail.startswith("ahead: the database is at revision 9999")
    assert ahead.hint is not None
    assert "upgrade it" in ahead.hint


def test_the_cluster_id_must_be_the_stored_one() -> None:
    assert check_cluster(SETTINGS, DatabaseFacts(HEAD, 3)) == Check(
        "cluster", OK, "cluster id 3, as stored in the database")
    assert check_cluster(SETTINGS, DatabaseFacts(HEAD, 0)) == Check(
        "cluster", FAIL, "GAPLESS_CLUSTER_ID is 3 but the database belongs to cluster 0",
        "set GAPLESS_CLUSTER_ID=0 or point GAPLESS_DATABASE_URL at the right database")


def test_only_a_failure_makes_the_system_unhealthy() -> None:
    assert healthy([Check("a", OK, ""), Check("b", WARN, "", "h"), Check("c", SKIP, "")])
    assert not healthy([Check("a", OK, ""), Check("b", FAIL, "", "h")])
    assert healthy([])


async def test_a_check_that_does_not_answer_in_time_fails_with_its_hint() -> None:
    never = asyncio.Event()

    async def hangs() -> Check:
        await never.wait()
        return Check("slow", OK, "")

    assert await bounded("slow", 0.01, "look at it", hangs, SETTINGS) == Check(
        "slow", FAIL, "no answer within 0.01 s", "look at it")


@pytest.mark.parametrize(("error", "detail"), [
    (RuntimeError("went wrong\nsecond line"), "RuntimeError: went wrong"),
    (RuntimeError(""), "RuntimeError"),
])
async def test_a_check_that_raises_fails_with_the_first_line_of_its_error(
        error: Exception, detail: str) -> None:
    async def raises() -> Check:
        raise error

    assert await bounded("x", 1.0, "hint", raises, SETTINGS) == Check("x", FAIL, detail, "hint")


async def test_an_unreachable_service_fails_with_its_own_line_and_the_password_masked() -> None:
    async def refused() -> Check:
        raise psycopg.OperationalError(
            'connection failed: connection to server at "10.0.0.1", port 6543 failed: '
            "Connection refused")

    check = await bounded("postgres", 1.0, "generic hint", refused, SETTINGS)
    assert check == Check(
        "postgres", FAIL, "cannot reach the database: PostgreSQL at "
        "postgresql://app:***@db.example:6543/books (connection refused)",
        "is PostgreSQL running? check GAPLESS_DATABASE_URL")
