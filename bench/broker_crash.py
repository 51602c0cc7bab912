"""Probe: does a single RabbitMQ node keep a confirmed backlog through a crash (SIGKILL)?

    .venv/bin/python bench/broker_crash.py [--rounds 20] [--versions 1,2] [--no-load]

Not a speed benchmark, and no gapless code runs: plain aio-pika against a private RabbitMQ node
(``bench.harness.PrivateRabbitCluster`` of one node: its own ports, data directory and epmd), so
that what it finds is the broker's. Each round, on a new durable classic queue with
``x-max-priority: 4`` (gapless's classic work queue) and the given ``x-queue-version``:

1. 600 persistent messages, priorities 1-4, each publish awaited until the broker confirms it;
2. a consumer on another connection (prefetch 32) acks each delivery 200 ms after it arrives;
3. 0.5 s later the node is killed (SIGKILL of its process group), then started again on the same
   data directory;
4. the queue is looked up passively (does it still exist?) and its message count read.

Every message not acked before the kill was confirmed, so each must be back (a few more may
be back, acked too late). A round *lost* its backlog when fewer than that came back. With
``--load`` (the default) two busy loops keep both cores of the machine occupied, as a test run
does. The table says, per queue version, in how many rounds the queue itself was gone after the
restart and in how many the backlog was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aio_pika
import aiormq

from bench.harness import PrivateRabbitCluster, machine, print_table

MESSAGES = 600
PREFETCH = 32
ACK_AFTER_S = 0.2
KILL_AFTER_S = 0.5


@dataclass
class Round:
    owed: int
    back: int
    queue_gone: bool

    @property
    def lost(self) -> bool:
        return self.back < self.owed


async def crash_round(node: PrivateRabbitCluster, name: str, version: int) -> Round:
    arguments = {"x-max-priority": 4, "x-queue-version": version}
    publisher = await aio_pika.connect(node.amqp_url)
    channel = await publisher.channel(publisher_confirms=True)
    await channel.declare_queue(name, durable=True, arguments=arguments)
    for n in range(MESSAGES):
        await channel.default_exchange.publish(
            aio_pika.Message(b'{"n": %d}' % n, delivery_mode=2, priority=1 + n % 4),
            routing_key=name)
    consumer = await aio_pika.connect(node.amqp_url)
    consuming = await consumer.channel()
    await consuming.set_qos(prefetch_count=PREFETCH)
    queue = await consuming.declare_queue(name, durable=True, arguments=arguments)
    acked = 0

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal acked
        await asyncio.sleep(ACK_AFTER_S)
        await message.ack()
        acked += 1

    await queue.consume(on_message)
    await asyncio.sleep(KILL_AFTER_S)
    await asyncio.to_thread(node.kill_node, 0)
    owed = MESSAGES - acked
    for connection in (publisher, consumer):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 2)
    await asyncio.to_thread(node.start_node, 0)
    connection = await aio_pika.connect(node.amqp_url)
    async with connection:
        queue_gone = False
        try:
            await (await connection.channel()).declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            queue_gone = True
        channel = await connection.channel()
        back = await channel.declare_queue(name, durable=True, arguments=arguments)
        assert back.declaration_result.message_count is not None
        count = back.declaration_result.message_count
        await channel.queue_delete(name)
    return Round(owed, count, queue_gone)


async def probe(rounds: int, versions: list[int]) -> list[list[object]]:
    node = PrivateRabbitCluster(size=1)
    node.start()
    results: dict[int, list[Round]] = {version: [] for version in versions}
    try:
        for index in range(rounds):
            for version in versions:  # interleaved: the same conditions for each version
                done = await crash_round(node, f"crash-probe-{index}-v{version}", version)
                results[version].append(done)
                print(f"round {index + 1}, version {version}: {done.owed} owed, {done.back} "
                      f"back{', queue gone' if done.queue_gone else ''}", file=sys.stderr)
    finally:
        node.close()
    return [[f"classic v{version}", len(done), sum(r.queue_gone for r in done),
             sum(r.lost for r in done), sum(not r.lost for r in done)]
            for version, done in results.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--versions", default="1,2")
    parser.add_argument("--no-load", action="store_true",
                        help="do not keep the cores busy with two busy loops")
    args = parser.parse_args()
    # The killed node's connections end with a reset; aiormq logs each with its traceback.
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)
    versions = [int(v) for v in args.versions.split(",")]
    load = [] if args.no_load else [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        rows = asyncio.run(probe(args.rounds, versions))
    finally:
        for busy in load:
            busy.kill()
    print_table(f"A single RabbitMQ node killed with a confirmed backlog ({machine()}, "
                f"{'two busy loops' if load else 'no other load'})",
                ["queue", "rounds", "queue gone after the restart", "backlog lost",
                 "backlog kept"], rows)


if __name__ == "__main__":
    main()
