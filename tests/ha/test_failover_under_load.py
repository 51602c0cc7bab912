"""Lose a RabbitMQ node and then the PostgreSQL primary under load: nothing lost, no number twice.

The setting of "Beyond one machine" (ARCHITECTURE.md), every part private to this run
(tests/ha/rabbit_cluster.py, tests/ha/pg_pair.py): a three-node RabbitMQ cluster with
``GAPLESS_QUEUE_TYPE=quorum``, every process given all three nodes in ``GAPLESS_AMQP_URL``; a
PostgreSQL primary with a **synchronous** standby, every process given both hosts with
``target_session_attrs=read-write``; two ``gapless worker`` and one ``gapless recovery``;
``gapless mock-integrator`` with transient failures and lost responses.

1,200 invoices are published with confirms (each republished until confirmed). Once the workers
are well into them, the RabbitMQ node the workers are connected to is killed (SIGKILL); later
the PostgreSQL primary crashes (``pg_ctl stop -m immediate``) and the standby is promoted.
Nothing of gapless is restarted. Then: every confirmed publish is one invoice, ISSUED (I4);
I1–I3, I6, I7 and the transitions hold (the chaos checker); the integrator's ledger has each
number once; ``gapless audit --integrator`` and ``gapless chain verify`` pass on the promoted
server. What the test saw goes to the terminal summary.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from gapless.settings import Settings, process_environment
from tests.chaos.checker import Expectations, check
from tests.ha.pg_pair import PrivatePostgresPair, sync_pair
from tests.ha.rabbit_cluster import (
    XDIST_GROUP,
    PrivateRabbitCluster,
    private_rabbit_cluster,
    rabbit_cluster,
)
from tests.helpers import await_until, run_gapless, wait_until
from tests.mock_client import MockIntegratorClient
from tests.restart_support import (
    BROKER_TROUBLE,
    DATABASE_TROUBLE,
    PUBLISH_DEADLINE_S,
    RestartRun,
    count_events,
    logged,
)

__all__ = ["private_rabbit_cluster", "rabbit_cluster", "sync_pair"]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(XDIST_GROUP)]

TOTAL = 1200
#: The RabbitMQ node goes once this many invoices are ISSUED, the PostgreSQL primary at the
#: second mark: both in the middle of consumption.
ISSUED_BEFORE_RABBIT = 250
ISSUED_BEFORE_POSTGRES = 600
SETTLE_S = 150.0


def _fresh_database(pair: PrivatePostgresPair) -> str:
    """A database of this test on the pair, cloned from the pair's migrated template; the
    multi-host URL every process gets."""
    url = pair.clone_template(f"gapless_ha_{uuid.uuid4().hex[:10]}")
    pair.wait_caught_up()
    return url


def _node_in_use(cluster: PrivateRabbitCluster, log: str) -> int:
    """The number of the node a process logged it connected to (``node=127.0.0.1:PORT``)."""
    for number in range(1, len(cluster.nodes) + 1):
        if f'"node": "127.0.0.1:{cluster.node(number).port}"' in log:
            return number
    raise AssertionError(f"no node of the cluster in the worker's log:\n{log[-2000:]}")


@pytest.mark.timeout(480)
async def test_a_rabbitmq_node_and_the_postgres_primary_lost_under_load(
        rabbit_cluster: PrivateRabbitCluster, sync_pair: PrivatePostgresPair,
        mock_integrator: MockIntegratorClient, log_dir: Path,
        summary_line: Callable[[str], None]) -> None:
    started = time.monotonic()
    settings = Settings(database_url=_fresh_database(sync_pair),
                        amqp_url=rabbit_cluster.amqp_url, queue_type="quorum",
                        queue=f"gapless_ha_{uuid.uuid4().hex[:8]}")
    run = RestartRun(settings, mock_integrator, log_dir)
    seen: dict[str, object] = {}
    try:
        await run.start()
        mock_integrator.set_faults(latency_ms=[60, 140], transient_rate=0.05,
                                   lost_response_rate=0.02)
        ids = [f"ha-{n:05d}" for n in range(TOTAL)]
        publishing = asyncio.create_task(run.publish(ids))

        async def issued_at_least(count: int) -> bool:
            return await run.issued() >= count

        # -- a RabbitMQ node: the one the first worker consumes from, killed.
        await await_until(lambda: issued_at_least(ISSUED_BEFORE_RABBIT), 120, interval=0.1,
                          message=f"{ISSUED_BEFORE_RABBIT} invoices ISSUED")
        victim = _node_in_use(rabbit_cluster, run.workers[0].output())
        before = run.log_offsets()
        seen["rabbit node killed after issued"] = await run.issued()
        await asyncio.to_thread(rabbit_cluster.stop_node, victim, "kill")

        def workers_moved() -> bool:
            return all(logged(w, "amqp_reconnected", since=before[w.name])
                       or not logged(w, "amqp_connection_lost", since=before[w.name])
                       for w in run.workers) and \
                any(logged(w, "amqp_connection_lost", since=before[w.name])
                    for w in run.workers)

        await asyncio.to_thread(wait_until, workers_moved, 60, interval=0.1,
                                message="the workers on the lost node to move to another")

        # -- the PostgreSQL primary: crashed, the synchronous standby promoted.
        await await_until(lambda: issued_at_least(ISSUED_BEFORE_POSTGRES), 120, interval=0.1,
                          message=f"{ISSUED_BEFORE_POSTGRES} invoices ISSUED")
        seen["primary crashed after issued"] = await run.issued()
        before = run.log_offsets()
        await asyncio.to_thread(sync_pair.crash_primary)
        promoted_in = await asyncio.to_thread(sync_pair.promote)
        seen["promotion s"] = round(promoted_in, 1)

        await asyncio.wait_for(publishing, PUBLISH_DEADLINE_S + 60)
        assert len(run.history.published) == TOTAL
        settled = True
        try:
            await await_until(run.settled, SETTLE_S, interval=0.25,
                              message=f"{TOTAL} invoices ISSUED after both failovers")
        except AssertionError:
            settled = False  # the checker below names every invoice that is not
        noticed_db = run.noticed(before, DATABASE_TROUBLE)
        dead = [f"{proc.name} exited {proc.proc.returncode}:\n{proc.output()[-3000:]}"
                for proc in run.all_processes if not proc.alive()]
        assert not dead, "a gapless process did not survive:\n" + "\n".join(dead)
        exit_codes = await run.finish()

        report = check(settings.database_url, run.history,
                       Expectations(all_issued=True, error_ok=False))
        numbers = Counter(entry["number"] for entry in run.history.ledger)
        twice = sorted(number for number, times in numbers.items() if times > 1)
        env = {**process_environment(settings), "GAPLESS_INTEGRATOR_URL": mock_integrator.url}
        audit = run_gapless(["audit", "--integrator"], env, timeout=120)
        chain = run_gapless(["chain", "verify"], env, timeout=120)
        events = Counter[str]()
        for proc in run.all_processes:
            events += count_events(proc, (*DATABASE_TROUBLE, *BROKER_TROUBLE, "amqp_reconnected",
                                          "publisher_reconnected", "database_recovered",
                                          "orphan_repaired", "orphan_resent"))
        summary_line(
            f"ha: published {TOTAL} ({run.counts['publish attempts']} attempts, "
            f"{run.counts['publishes unconfirmed (retried)']} unconfirmed and retried), "
            f"confirmed {len(run.history.published)}, issued {report.counts['  ISSUED']}, "
            f"ledger {len(run.history.ledger)} ({len(twice)} numbers twice); RabbitMQ node "
            f"{victim} killed after {seen['rabbit node killed after issued']} issued; primary "
            f"crashed after {seen['primary crashed after issued']} issued, standby promoted in "
            f"{seen['promotion s']}s, noticed by {', '.join(sorted(noticed_db)) or 'none'}; "
            f"logged {', '.join(f'{k} {v}' for k, v in sorted(events.items())) or 'nothing'}; "
            f"audit exit {audit.returncode}, chain verify exit {chain.returncode}; "
            f"exit codes {exit_codes}; {time.monotonic() - started:.0f}s in all")
        print(report.summary())
        report.raise_for_violations()
        assert settled, "not settled, yet the checker found no violation"
        assert report.counts["  ISSUED"] == TOTAL
        assert not twice, f"numbers the integrator holds twice: {twice[:20]}"
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert chain.returncode == 0, chain.stdout + chain.stderr
        assert set(exit_codes.values()) == {0}, exit_codes
    finally:
        await run.close()
        await asyncio.to_thread(rabbit_cluster.ensure_running)
