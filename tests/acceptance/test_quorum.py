"""Quorum mode (``GAPLESS_QUEUE_TYPE=quorum``) against the real broker: replicated quorum queues,
user work on ``<prefix>.user``, at-least-once dead-lettering and a delivery limit.

The shared broker is one node, where a quorum queue has one member; the three-node cluster and
the loss of a node are in tests/ha. What is shown here is what does not need a cluster: the
topology, where each message goes, the priority promise, the delivery limit, and that every
operator command works in this mode.
"""

from __future__ import annotations

import json

import aio_pika
import aiormq
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.harness import issued_before_on
from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher
from gapless.amqp.topology import declare_topology, main_queue_arguments
from gapless.constants import dead_exchange_name, dead_queue_name, user_queue_name
from gapless.errors import ConfigurationError
from gapless.settings import Settings
from tests.conftest import ApiServers
from tests.helpers import await_until, run_gapless
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes
from tests.worker_support import publish_many, rows, sale

QUORUM = {"GAPLESS_QUEUE_TYPE": "quorum"}


@pytest.fixture
def quorum(settings: Settings) -> Settings:
    return settings.with_overrides(queue_type="quorum")


async def test_quorum_topology_routes_user_work_to_its_own_queue(quorum: Settings) -> None:
    prefix = quorum.queue
    async with Publisher(quorum) as publisher:
        await publisher.publish(sale("b-1", priority="batch"))
        await publisher.publish(sale("b-2"))  # no priority: batch
        await publisher.publish(sale("u-1", priority="user"))
        await publisher.publish(b"raw bytes", priority=7)  # above 4 counts as user
    assert await queue_depths(quorum) == {user_queue_name(prefix): 2, prefix: 2,
                                          dead_queue_name(prefix): 0}

    connection = await aio_pika.connect(quorum.amqp_url)
    async with connection:
        # Declared exactly as the contract says: quorum, dead-lettered at least once to .dlx,
        # with a delivery limit; redeclaring with the same arguments is accepted …
        arguments = main_queue_arguments(prefix, "quorum", delivery_limit=quorum.delivery_limit)
        assert arguments["x-queue-type"] == "quorum"
        assert arguments["x-dead-letter-strategy"] == "at-least-once"
        assert arguments["x-dead-letter-exchange"] == dead_exchange_name(prefix)
        for name in (prefix, user_queue_name(prefix)):
            channel = await connection.channel()
            await channel.declare_queue(name, durable=True, arguments=arguments)
        # … and a classic declaration of the same queue is refused by the broker.
        channel = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
            await channel.declare_queue(prefix, durable=True,
                                        arguments=main_queue_arguments(prefix))
        # The other way round, a classic prefix met in quorum mode, is one clear error.
        classic = quorum.with_overrides(queue=prefix + "_classic")
        await declare_topology(await connection.channel(), classic.with_overrides(
            queue_type="classic"))
        with pytest.raises(ConfigurationError, match="GAPLESS_QUEUE_TYPE=quorum"):
            await declare_topology(await connection.channel(), classic)
        channel = await connection.channel()
        for name in (classic.queue, dead_queue_name(classic.queue)):
            await channel.queue_delete(name)
        await channel.exchange_delete(dead_exchange_name(classic.queue))


@pytest.mark.slow
@pytest.mark.usefixtures("series")
async def test_a_user_message_overtakes_a_batch_backlog_in_quorum_mode(
        engine: AsyncEngine, quorum: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[20, 20])
    await publish_many(quorum, [sale(f"batch-{i:04d}", priority="batch") for i in range(1000)])
    await publish_many(quorum, [sale("urgent", priority="user")])  # after the whole backlog
    worker = procs.worker("worker", "--concurrency", "8", env=QUORUM)

    async def urgent_issued() -> bool:
        current = await rows(engine)
        return "urgent" in current and current["urgent"].status == "ISSUED"

    await await_until(urgent_issued, 60, message="the user invoice ISSUED")
    assert worker.terminate(timeout=30) == 0
    before_urgent = await issued_before_on(engine, "urgent")
    print(f"\nquorum mode: the user invoice was issued after {before_urgent} of 1000 batch "
          "invoices")
    assert before_urgent <= 100, before_urgent  # overtook at least 90 % of the backlog


@pytest.mark.usefixtures("series")
async def test_worker_issues_both_queues_and_dead_letters_bad_input_in_quorum_mode(
        engine: AsyncEngine, quorum: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient, gapless_env: dict[str, str]) -> None:
    batch = [sale(f"b-{i}", priority="batch") for i in range(20)]
    user = [sale(f"u-{i}", priority="user") for i in range(5)]
    await publish_many(quorum, batch + user)
    async with Publisher(quorum) as publisher:
        await publisher.publish(b'{"invoice_id": "broken"', priority="user")
    worker = procs.worker("worker", "--concurrency", "4", env=QUORUM)

    async def all_issued() -> bool:
        current = await rows(engine)
        return sum(row.status == "ISSUED" for row in current.values()) == 25

    await await_until(all_issued, 60, message="25 invoices ISSUED")
    env = {**gapless_env, **QUORUM}
    await await_until(lambda: _dead_count(quorum, 1), 30, message="the broken one dead")
    assert worker.terminate(timeout=30) == 0
    numbers = sorted(row.number for row in (await rows(engine)).values())
    assert len(set(numbers)) == len(numbers) == 25
    assert len(mock_integrator.ledger()) == 25

    status = run_gapless(["status", "--json"], env, timeout=60)
    assert status.returncode == 0, status.stderr
    queue = json.loads(status.stdout)["queue"]
    assert queue["ready"] == 0
    assert queue["by_priority"] == {"user": 0, "batch": 0}
    assert queue["dead_letters"] == 1

    listed = run_gapless(["dead", "list"], env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "JSON" in listed.stdout


async def _dead_count(settings: Settings, expected: int) -> bool:
    return (await queue_depths(settings))[dead_queue_name(settings.queue)] == expected


async def test_a_message_redelivered_past_the_delivery_limit_is_dead_lettered(
        quorum: Settings, gapless_env: dict[str, str]) -> None:
    """A message that never reaches an outcome (its worker dies every time) cannot loop for
    ever: after ``GAPLESS_DELIVERY_LIMIT`` deliveries RabbitMQ dead-letters it (at least once),
    `gapless dead list` says why, and `gapless dead replay` puts it back on the user queue."""
    limited = quorum.with_overrides(delivery_limit=2)
    async with Publisher(limited) as publisher:
        await publisher.publish(sale("poison", priority="user"))
    connection = await aio_pika.connect(limited.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(user_queue_name(limited.queue), passive=True)
        deliveries = 0
        while (message := await queue.get(no_ack=False, fail=False)) is not None:
            deliveries += 1
            await message.nack(requeue=True)  # as a worker killed mid-way gives it back
        assert deliveries == 3  # the first delivery and two more, then the limit
    await await_until(lambda: _dead_count(limited, 1), 30, message="the poison message dead")

    env = {**gapless_env, **QUORUM, "GAPLESS_DELIVERY_LIMIT": "2"}
    listed = run_gapless(["dead", "list"], env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "poison" in listed.stdout
    assert "delivery limit" in listed.stdout

    replayed = run_gapless(["dead", "replay", "--all"], env, timeout=60)
    assert replayed.returncode == 0, replayed.stderr
    depths = await queue_depths(limited)
    assert depths[user_queue_name(limited.queue)] == 1
    assert depths[dead_queue_name(limited.queue)] == 0


@pytest.mark.usefixtures("series")  # the API refuses an unknown series at once
async def test_the_api_publishes_user_work_to_the_user_queue_in_quorum_mode(
        api_servers: ApiServers, quorum: Settings) -> None:
    token = "quorum-api-token-" + "x" * 16
    url, _ = api_servers.start(f"*:{token}", env=QUORUM)
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{url}/v1/invoices", json=sale("api-1"),
                                   headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 202, response.text
        health = await http.get(f"{url}/healthz")
        assert health.json() == {"database": "ok", "broker": "ok"}
    depths = await queue_depths(quorum)
    assert depths[user_queue_name(quorum.queue)] == 1
    assert depths[quorum.queue] == 0


async def test_gapless_publish_routes_by_priority_in_quorum_mode(
        quorum: Settings, gapless_env: dict[str, str]) -> None:
    env = {**gapless_env, **QUORUM}
    for priority, count in (("user", 3), ("batch", 4)):
        result = run_gapless(["publish", "--demo", str(count), "--priority", priority,
                              "--tenant", "acme", "--series", "ABC"], env, timeout=60)
        assert result.returncode == 0, result.stderr
    depths = await queue_depths(quorum)
    assert depths[user_queue_name(quorum.queue)] == 3
    assert depths[quorum.queue] == 4
