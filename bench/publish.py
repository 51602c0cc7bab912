"""Benchmark: ``gapless publish --file`` against a raw confirmed publisher of the same lines.

    .venv/bin/python bench/publish.py [--messages 20000] [--repeat 2] [--in-flight 1024]

RabbitMQ is real; each run has a queue prefix of its own (deleted afterwards). A JSON Lines file
of ``--messages`` valid invoices (``bench/issue.py``'s message, each its own ``invoice_id``) is
written once, then, interleaved ``--repeat`` times:

* **gapless publish --file** — the command as an operator runs it (a subprocess): every line
  parsed and validated against the contract, published persistent with publisher confirms
  (pipelined, ``--in-flight`` awaited at once), the summary printed. Measured: the command's wall
  time and its CPU time (user + system, from the child's resource usage), start-up included, and
  the same command on a one-line file (its start-up alone) to give the rate after start-up.
* **raw** — a minimal aio-pika publisher in this script sending the file's lines as they are
  (no parsing, no validation), persistent, one ``publish`` coroutine per message, confirms
  pipelined the same way.
* **raw-write** — the broker's ceiling here: the lines as they are, ``--in-flight`` messages at a
  time marshalled with pamqp into one write on aiormq's channel (its delivery tags and confirm
  futures), each chunk's confirms awaited before the next. Nothing in front of the broker can
  publish faster on this machine than this does.

Every run's queue is read back by its depth: all ``--messages`` queued, none twice.

Goal (issue 29): ≥ 10,000 messages/s per process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aio_pika
import aiormq
from aiormq.abc import ChannelFrame
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from bench.harness import (
    GAPLESS,
    ROOT,
    clean_env,
    delete_queues,
    machine,
    median,
    print_table,
    queue_depth,
    queue_prefix,
    settings_of,
)
from bench.issue import invoice
from gapless.amqp.topology import declare_topology

GOAL = 10_000


def write_lines(path: Path, count: int, label: str) -> None:
    with path.open("w") as out:
        for index in range(count):
            out.write(json.dumps(invoice(f"{label}-{index}")) + "\n")


def run_command(env: dict[str, str], path: Path, in_flight: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``gapless publish --file path``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([*GAPLESS, "publish", "--file", str(path), "--no-progress", "--in-flight",
                    str(in_flight)], env=env, cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


async def raw_publish(env: dict[str, str], lines: list[bytes],
                      in_flight: int) -> tuple[float, float]:
    """Wall and CPU seconds of publishing the lines as they are, confirms pipelined."""
    settings = settings_of(env)
    connection = await aio_pika.connect(settings.amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await declare_topology(channel, settings)
        slots = asyncio.Semaphore(in_flight)
        cpu_before = time.process_time()
        started = time.perf_counter()

        async def send(body: bytes) -> None:
            try:
                await channel.default_exchange.publish(
                    aio_pika.Message(body, content_type="application/json",
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=settings.queue, mandatory=True)
            finally:
                slots.release()

        tasks = []
        for body in lines:
            await slots.acquire()
            tasks.append(asyncio.create_task(send(body)))
        await asyncio.gather(*tasks)
        return time.perf_counter() - started, time.process_time() - cpu_before
    finally:
        await connection.close()


async def raw_write(env: dict[str, str], lines: list[bytes],
                    in_flight: int) -> tuple[float, float]:
    """Wall and CPU seconds of publishing the lines in chunks of ``in_flight``, each chunk one
    write to the connection, its confirms awaited before the next chunk."""
    settings = settings_of(env)
    connection = await aio_pika.connect(settings.amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await declare_topology(channel, settings)
        underlay = await channel.get_underlay_channel()
        assert isinstance(underlay, aiormq.Channel)
        cpu_before = time.process_time()
        started = time.perf_counter()
        for start in range(0, len(lines), in_flight):
            chunk = lines[start:start + in_flight]
            frames: list[object] = []
            for index, body in enumerate(chunk, start):
                properties = commands.Basic.Properties(
                    content_type="application/json", delivery_mode=2, message_id=f"w-{index}")
                frames += [commands.Basic.Publish(exchange="", routing_key=settings.queue,
                                                  mandatory=True),
                           ContentHeader(body_size=len(body), properties=properties),
                           ContentBody(body)]
            write = ChannelFrame.marshall(channel_number=underlay.number,
                                          frames=frames)  # type: ignore[arg-type]
            confirms = []
            async with underlay.lock:
                for index in range(start, start + len(chunk)):
                    underlay.delivery_tag += 1
                    confirm = asyncio.get_running_loop().create_future()
                    underlay.confirmations[underlay.delivery_tag] = confirm
                    underlay.message_id_delivery_tag[f"w-{index}"] = underlay.delivery_tag
                    confirms.append(confirm)
                await underlay.write_queue.put(write)
            await asyncio.gather(*confirms)
        return time.perf_counter() - started, time.process_time() - cpu_before
    finally:
        await connection.close()


def one_run(design: str, path: Path, count: int, in_flight: int) -> tuple[float, float]:
    env = {**clean_env(), "GAPLESS_QUEUE": queue_prefix(f"publish_{design}"),
           "GAPLESS_LOG_LEVEL": "warning"}
    try:
        if design == "gapless":
            wall, cpu = run_command(env, path, in_flight)
        else:
            raw = raw_publish if design == "raw" else raw_write
            wall, cpu = asyncio.run(raw(env, path.read_bytes().splitlines(), in_flight))
        depth = asyncio.run(queue_depth(env))
        if depth != count:
            raise SystemExit(f"{design}: {depth} messages queued, expected {count}")
        return wall, cpu
    finally:
        asyncio.run(delete_queues(settings_of(env)))


def measure(messages: int, repeat: int, in_flight: int,
            designs: tuple[str, ...] = ("gapless", "raw", "raw-write"),
            ) -> tuple[dict[str, list[tuple[float, float]]], float]:
    """``repeat`` interleaved runs of each design on a file of ``messages`` lines: each run's
    (wall, CPU) seconds by design, and the command's start-up alone (median, seconds)."""
    with tempfile.TemporaryDirectory(prefix="gapless-bench-publish-") as folder:
        path, one = Path(folder) / "invoices.jsonl", Path(folder) / "one.jsonl"
        write_lines(path, messages, f"p{os.getpid()}")
        write_lines(one, 1, f"s{os.getpid()}")
        runs: dict[str, list[tuple[float, float]]] = {design: [] for design in designs}
        startup: list[float] = []
        for _ in range(repeat):
            for design, results in runs.items():
                results.append(one_run(design, path, messages, in_flight))
                print(f"  {design}: {messages / results[-1][0]:,.0f}/s", file=sys.stderr,
                      flush=True)
            startup.append(one_run("gapless", one, 1, in_flight)[0])
    return runs, median(startup)


def after_start_up(messages: int, wall: float, start_s: float) -> float:
    """Messages per second of the command once started (its start-up alone taken off)."""
    return messages / (wall - start_s) if wall > start_s else messages / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=1024)
    args = parser.parse_args()
    runs, start_s = measure(args.messages, args.repeat, args.in_flight)
    rows = []
    for design, results in runs.items():
        wall, cpu = median([r[0] for r in results]), median([r[1] for r in results])
        after_start = (after_start_up(args.messages, wall, start_s) if design == "gapless"
                       else args.messages / wall)
        rows.append((design, f"{args.messages / wall:,.0f}", f"{after_start:,.0f}",
                     f"{1000 * cpu / args.messages:.3f}",
                     f"{min(args.messages / r[0] for r in results):,.0f}–"
                     f"{max(args.messages / r[0] for r in results):,.0f}"))
    print(f"machine: {machine()}; {args.messages} messages, {args.in_flight} confirms in flight, "
          f"{args.repeat} runs each, interleaved (medians); gapless start-up alone "
          f"{start_s:.2f} s\n")
    print_table("Publishing a JSON Lines file with confirms (higher is better)",
                ["publisher", "messages/s (whole command)", "messages/s after start-up",
                 "CPU ms per message", "messages/s range"], rows)
    gapless_rate = float(rows[0][2].replace(",", ""))
    verdict = "met" if gapless_rate >= GOAL else "NOT met"
    print(f"goal: gapless publish --file ≥ {GOAL:,} messages/s after start-up: {verdict} "
          f"({gapless_rate:,.0f}/s; in the same run, without validation, the raw publisher "
          f"{rows[1][2]}/s and the broker's ceiling, raw-write, {rows[2][2]}/s)")


if __name__ == "__main__":
    main()
