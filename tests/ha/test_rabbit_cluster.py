"""The private three-node RabbitMQ cluster (tests/ha/rabbit_cluster.py) is a real cluster, and a
quorum queue on it keeps every confirmed message through a crash of its leader.

The broker is driven with aio-pika directly (the gapless processes are not involved): a quorum
queue gets a member on every node; messages published persistent with publisher confirms are all
consumable from another node after the leader's node is killed (SIGKILL, nothing flushed); the
killed node, started again on its data, rejoins the cluster and the queue.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aio_pika
import pytest

from tests.ha.rabbit_cluster import (
    XDIST_GROUP,
    PrivateRabbitCluster,
    private_rabbit_cluster,
    rabbit_cluster,
)
from tests.helpers import wait_until
from tests.private_services import amqp_listening

__all__ = ["private_rabbit_cluster", "rabbit_cluster"]

#: The tests on the session's cluster run in one xdist process (``--dist loadgroup``).
on_the_cluster = pytest.mark.xdist_group(XDIST_GROUP)

#: Messages published before the leader is killed.
MESSAGES = 1000
#: Publishes awaiting their confirm at once.
PUBLISH_WINDOW = 100
#: How long consuming every message may take (a new leader is elected first).
CONSUME_S = 60.0


@pytest.fixture
async def quorum_queue(rabbit_cluster: PrivateRabbitCluster) -> AsyncIterator[str]:
    """A quorum queue of this test (declared via node 1; a member on every node), deleted
    after it through a node that runs."""
    name = f"gapless_ha_{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(rabbit_cluster.node(1).amqp_url, timeout=10)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
    yield name
    running = rabbit_cluster.up()
    if running:
        connection = await aio_pika.connect(rabbit_cluster.node(running[0]).amqp_url,
                                            timeout=10)
        async with connection:
            channel = await connection.channel()
            await channel.queue_delete(name)


async def publish_confirmed(url: str, queue: str, bodies: list[bytes]) -> None:
    """Publish every body persistent to ``queue``; returns once the broker confirmed each (a
    nack or a return raises)."""
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        for start in range(0, len(bodies), PUBLISH_WINDOW):
            await asyncio.gather(*(
                channel.default_exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue, mandatory=True)
                for body in bodies[start:start + PUBLISH_WINDOW]))


async def consume(url: str, queue: str, count: int, timeout: float) -> list[bytes]:
    """Consume (and ack) ``count`` messages of ``queue``; their bodies in delivery order."""
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=PUBLISH_WINDOW)
        declared = await channel.declare_queue(queue, passive=True)
        bodies: list[bytes] = []
        enough = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            bodies.append(message.body)
            await message.ack()
            if len(bodies) >= count:
                enough.set()

        tag = await declared.consume(on_message)
        try:
            async with asyncio.timeout(timeout):
                await enough.wait()
        except TimeoutError:
            raise AssertionError(f"{len(bodies)} of {count} messages consumed within "
                                 f"{timeout:g}s") from None
        await declared.cancel(tag)
        return bodies


@on_the_cluster
def test_three_nodes_of_this_run_form_one_cluster(
        rabbit_cluster: PrivateRabbitCluster, summary_line: Callable[[str], None]) -> None:
    cluster = rabbit_cluster
    names = cluster.names
    assert len(set(names)) == 3
    assert all(name.startswith("gapless-ha-") and name.endswith("@localhost") for name in names)
    for index in (1, 2, 3):
        status = cluster.cluster_status(via=index)
        assert set(status["running_nodes"]) == set(names), f"node {index}'s view"
        assert set(status["disk_nodes"]) == set(names), f"node {index}'s view"
    # Ports of their own, one private epmd (never the machine's 4369).
    ports = [port for node in cluster.nodes for port in (node.port, node.dist_port)]
    assert len(set(ports)) == 6
    assert {node.epmd_port for node in cluster.nodes} == {cluster.epmd.port}
    assert cluster.epmd.port != 4369
    assert cluster.amqp_url == ",".join(f"amqp://guest:guest@127.0.0.1:{node.port}/"
                                        for node in cluster.nodes)
    assert all(amqp_listening(node.port) for node in cluster.nodes)
    assert cluster.start_s is not None
    summary_line(f"private RabbitMQ cluster: 3 nodes clustered in {cluster.start_s:.1f}s")


@on_the_cluster
async def test_a_quorum_queue_has_a_member_on_every_node(
        rabbit_cluster: PrivateRabbitCluster, quorum_queue: str) -> None:
    row = await asyncio.to_thread(rabbit_cluster.wait_quorum_members, quorum_queue, 3)
    assert row["type"] == "quorum"
    assert set(row["members"]) == set(rabbit_cluster.names)
    assert row["leader"] in rabbit_cluster.names


@on_the_cluster
async def test_confirmed_messages_survive_a_kill_of_the_leader_node(
        rabbit_cluster: PrivateRabbitCluster, quorum_queue: str) -> None:
    cluster = rabbit_cluster
    await asyncio.to_thread(cluster.wait_quorum_members, quorum_queue, 3)
    leader = await asyncio.to_thread(cluster.quorum_leader, quorum_queue)
    others = [index for index in (1, 2, 3) if index != leader]
    bodies = [f"message-{number}".encode() for number in range(MESSAGES)]
    # Through a follower: the leader commits each message on a majority before the confirm.
    await publish_confirmed(cluster.node(others[0]).amqp_url, quorum_queue, bodies)

    await asyncio.to_thread(cluster.stop_node, leader, "kill")
    row = await asyncio.to_thread(cluster.wait_quorum_members, quorum_queue, 3, online=2)
    assert row["leader"] != cluster.node(leader).node, "a new leader among the survivors"
    consumed = await consume(cluster.node(others[1]).amqp_url, quorum_queue, MESSAGES,
                             CONSUME_S)
    assert sorted(consumed) == sorted(bodies), "every confirmed message, once"

    # The killed node comes back on its data, rejoins the cluster and the queue, and serves it.
    await asyncio.to_thread(cluster.start_node, leader)
    assert set(await asyncio.to_thread(cluster.running_nodes, leader)) == set(cluster.names)
    row = await asyncio.to_thread(cluster.wait_quorum_members, quorum_queue, 3)
    assert set(row["online"]) == set(cluster.names)
    await publish_confirmed(cluster.node(leader).amqp_url, quorum_queue, [b"after"])
    assert await consume(cluster.node(others[0]).amqp_url, quorum_queue, 1, CONSUME_S) == \
        [b"after"]


def test_close_leaves_no_process_and_no_file() -> None:
    """A cluster of its own (one node, to be quick), closed while it runs: every process of the
    node's process group (the script, the Erlang VM, its helpers) and the epmd are gone, and so
    are the temp dirs."""
    cluster = PrivateRabbitCluster(size=1)
    try:
        cluster.start()
        group = cluster.node(1).server_pid
        epmd = cluster.epmd.pid
        roots = [node.root for node in cluster.nodes]
        assert group is not None
        assert epmd is not None
        assert len(processes_in_group(group)) >= 2  # the script and the VM at least
    finally:
        cluster.close()
    assert not Path(f"/proc/{epmd}").exists()
    wait_until(lambda: not processes_in_group(group), 10,
               message=f"no process left in group {group}")
    assert not any(root.exists() for root in roots)
    assert cluster.up() == []


def processes_in_group(pgid: int) -> list[int]:
    """The processes (zombies included, until reaped) whose process group is ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp …; comm may hold spaces, so split after its ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            found.append(int(stat.parent.name))
    return found
