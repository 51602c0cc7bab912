"""Cluster-encoded ids: ids made under two cluster ids never collide, decode back, and rows from
two regional databases copy into one without key conflicts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from gapless.errors import ClusterMismatchError, NotMigratedError
from gapless.ids import decode_id
from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.database import check_cluster, make_engine
from gapless.ledger.migrations import migrate
from tests.conftest import RUN_ID, create_database, database_url, drop_database
from tests.helpers import ledger, run_gapless, schema_at

EVENT_COLUMNS = ("invoice_events (id, invoice_pk, invoice_id, tenant, series, kind, from_status, "
                 "to_status, number, attempts, detail, actor, created_at)")


def conninfo(url: str) -> str:
    return driver_conninfo(url)


@pytest.fixture
def regional() -> Iterator[dict[int, str]]:
    """Three databases migrated with cluster ids 1, 2 and 3 (3 is the merge target)."""
    names = {c: f"gapless_cl{c}_{RUN_ID}_{uuid.uuid4().hex[:6]}" for c in (1, 2, 3)}
    urls = {c: database_url(name) for c, name in names.items()}
    for cluster, url in urls.items():
        migrate(url, cluster)
    yield urls
    for name in names.values():
        drop_database(name)


def fill(url: str, region: str, count: int) -> list[int]:
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('acme', %s, %s)",
                     (region, region))
        for i in range(count):
            with conn.transaction():
                conn.execute("INSERT INTO invoices (invoice_id, tenant, series) "
                             "VALUES (%s, 'acme', %s)", (f"{region}-{i}", region))
                conn.execute("SELECT * FROM reserve_number(%s)", (f"{region}-{i}",))
        return [row[0] for row in conn.execute("SELECT id FROM invoices ORDER BY id")]


def test_ids_of_two_clusters_never_collide_and_decode_back(regional: dict[int, str]) -> None:
    one = fill(regional[1], "EU1", 50)
    two = fill(regional[2], "AS1", 50)
    assert not set(one) & set(two)
    assert {decode_id(i).cluster_id for i in one} == {1}
    assert {decode_id(i).cluster_id for i in two} == {2}
    assert [decode_id(i).local for i in one] == list(range(1, 51))
    assert [decode_id(i).local for i in two] == list(range(1, 51))


def test_rows_of_two_regions_copy_into_one_database(regional: dict[int, str]) -> None:
    fill(regional[1], "EU1", 20)
    fill(regional[2], "AS1", 20)
    with psycopg.connect(conninfo(regional[3])) as target:
        # A merge copies history as it is: triggers off, as for any replication.
        target.execute("SET session_replication_role = replica")
        for cluster in (1, 2):
            with psycopg.connect(conninfo(regional[cluster])) as source:
                for table in ("series", "number_counters", "invoices", EVENT_COLUMNS):
                    with source.cursor().copy(f"COPY {table} TO STDOUT") as out, \
                            target.cursor().copy(f"COPY {table} FROM STDIN") as into:
                        for chunk in out:
                            into.write(chunk)
        target.commit()
        # Feed positions are local to a database: the target gives merged events its own.
        target.execute("SET session_replication_role = DEFAULT")
        positioned = target.execute("SELECT gapless_feed_assign()").fetchone()
        target.commit()
        counts = target.execute(
            "SELECT count(*), count(DISTINCT id) FROM invoices").fetchone()
        clusters = [row[0] for row in target.execute(
            "SELECT DISTINCT (id >> 48)::int FROM invoices ORDER BY 1")]
        events = target.execute(
            "SELECT count(*), count(DISTINCT id) FROM invoice_events").fetchone()
    assert counts == (40, 40)
    assert clusters == [1, 2]
    assert events is not None
    assert events[0] == events[1] > 0
    assert positioned == (events[0],)


def test_a_process_whose_cluster_id_disagrees_refuses_to_start(regional: dict[int, str]) -> None:
    async def check(configured: int) -> int:
        engine = make_engine(regional[1])
        try:
            return await check_cluster(ledger(engine), configured)
        finally:
            await engine.dispose()

    assert asyncio.run(check(1)) == 1
    with pytest.raises(ClusterMismatchError, match="GAPLESS_CLUSTER_ID is 5 but this database "
                                                   "belongs to cluster 1"):
        asyncio.run(check(5))
    with pytest.raises(ClusterMismatchError):
        migrate(regional[1], 2)


def test_an_unmigrated_database_is_reported_clearly() -> None:
    name = f"gapless_empty_{RUN_ID}_{uuid.uuid4().hex[:6]}"
    create_database(name)
    try:
        async def check() -> int:
            engine = make_engine(database_url(name))
            try:
                return await check_cluster(ledger(engine), 0)
            finally:
                await engine.dispose()

        with pytest.raises(NotMigratedError, match="run `gapless migrate`"):
            asyncio.run(check())
    finally:
        drop_database(name)


def test_migrate_refuses_a_bad_or_different_cluster_id(regional: dict[int, str]) -> None:
    env = {"GAPLESS_DATABASE_URL": regional[1], "PATH": "/usr/bin:/bin"}
    bad = run_gapless(["migrate", "--cluster-id", "32768"], env)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "between 0 and 32767" in bad.stderr
    other = run_gapless(["migrate"], {**env, "GAPLESS_CLUSTER_ID": "7"})
    assert other.returncode == 1
    assert "belongs to cluster 1" in other.stderr


def test_ids_continue_across_the_upgrade_to_plain_nextval(regional: dict[int, str]) -> None:
    """Schema 0006 moves the cluster id into the id sequences: a database that made ids through
    gapless_next_id() under 0005 goes on with the same cluster and the next local part, and
    gapless_next_id() keeps giving such ids to SQL callers."""
    url = regional[1]
    schema_at(url, "0005")
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("INSERT INTO gapless_config (cluster_id) VALUES (1)")
    before = fill(url, "EU1", 3)
    migrate(url, 1)
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        for i in range(3, 5):
            conn.execute("INSERT INTO invoices (invoice_id, tenant, series) "
                         "VALUES (%s, 'acme', 'EU1')", (f"EU1-{i}",))
        after = [row[0] for row in conn.execute("SELECT id FROM invoices ORDER BY id")]
        called = conn.execute("SELECT gapless_next_id('invoices_local_seq')").fetchone()
        events = [row[0] for row in conn.execute("SELECT id FROM invoice_events ORDER BY id")]
    assert after[:3] == before
    assert [decode_id(i) for i in after] == [(1, n) for n in range(1, 6)]
    assert called is not None
    assert decode_id(called[0]) == (1, 6)
    assert {decode_id(i).cluster_id for i in events} == {1}
    assert [decode_id(i).local for i in events] == list(range(1, len(events) + 1))
