"""``gapless status`` per-priority queue depth against RabbitMQ's real management API.

The plugin ships with RabbitMQ but is often not enabled. The set-up enables it when the broker
is this machine's (``rabbitmq-plugins enable`` needs no broker restart), waits for the API to
answer, and disables it again afterwards if it was off; the tests that need it are skipped, with
the reason, when it cannot be enabled or does not answer. Messages are published to the test's
own queue with no consumer (or one that holds a delivery unacked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aio_pika
import httpx
import pytest
from aio_pika.abc import AbstractIncomingMessage

from gapless.amqp.management import NO_MANAGEMENT_NOTE, amqp_vhost, management_target
from gapless.amqp.publisher import Publisher
from gapless.settings import Settings
from tests.helpers import await_until, free_port, run_gapless, wait_until

MESSAGE = {"tenant": "acme", "series": "ABC", "issue_date": "2026-11-22", "currency": "TRY",
           "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
           "lines": [{"description": "Widget", "quantity": "1", "unit_price": "10.00",
                      "vat_rate": "20"}]}
PLUGIN = "rabbitmq_management"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _answers(base: str, auth: tuple[str, str]) -> bool:
    try:
        return httpx.get(f"{base}/api/overview", auth=auth, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def management_api() -> Iterator[tuple[str, tuple[str, str]]]:
    """(base URL, credentials) of the broker's management API, enabled here if need be."""
    amqp_url = Settings().amqp_url
    base, auth = management_target(amqp_url, None)
    if _answers(base, auth):
        yield base, auth
        return
    if urllib.parse.urlsplit(amqp_url).hostname not in LOOPBACK:
        pytest.skip(f"the management API at {base} does not answer, and the broker is not "
                    "this machine's, so its plugin cannot be enabled from here")
    plugins = shutil.which("rabbitmq-plugins")
    if plugins is None:
        pytest.skip("the management API does not answer and rabbitmq-plugins is not installed")
    enabled = subprocess.run([plugins, "enable", PLUGIN], capture_output=True, text=True,
                             timeout=120, check=False)
    if enabled.returncode != 0:
        reason = (enabled.stderr or enabled.stdout).strip().splitlines()
        pytest.skip(f"cannot enable {PLUGIN}: {reason[-1] if reason else enabled.returncode}")
    try:
        try:
            wait_until(lambda: _answers(base, auth), 60,
                       message=f"the management API at {base} to answer")
        except AssertionError as exc:
            pytest.skip(f"{PLUGIN} is enabled but {base} does not answer: {exc}")
        yield base, auth
    finally:  # leave the shared broker as it was found
        subprocess.run([plugins, "disable", PLUGIN], capture_output=True, timeout=120,
                       check=False)


async def queue_statistics(management: tuple[str, tuple[str, str]], queue: str
                           ) -> dict[str, Any]:
    base, auth = management
    vhost = urllib.parse.quote(amqp_vhost(Settings().amqp_url), safe="")
    async with httpx.AsyncClient(auth=auth, timeout=5) as client:
        response = await client.get(f"{base}/api/queues/{vhost}/{urllib.parse.quote(queue)}")
    return response.json() if response.status_code == 200 else {}


async def statistics_show(management: tuple[str, tuple[str, str]], queue: str, *,
                          ready: int, unacked: int) -> None:
    """Until the API's periodic statistics (every 5 s by default) show this state."""
    async def shown() -> bool:
        info = await queue_statistics(management, queue)
        backing = info.get("backing_queue_status") or {}
        return (info.get("messages_ready") == ready and backing.get("len") == ready
                and info.get("messages_unacknowledged") == unacked)

    await await_until(shown, 30, interval=0.5,
                      message=f"management statistics of {queue}: {ready} ready, "
                              f"{unacked} unacked")


async def publish_mix(settings: Settings) -> None:
    """2 user, 3 batch, and 1 raw message without a priority property (counts as batch)."""
    async with Publisher(settings) as publisher:
        for n in range(2):
            await publisher.publish({**MESSAGE, "invoice_id": f"u-{n}"}, priority="user")
        for n in range(3):
            await publisher.publish({**MESSAGE, "invoice_id": f"b-{n}"}, priority="batch")
        await publisher.publish(b'{"not": "an invoice"}')


async def status_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = await asyncio.to_thread(run_gapless, ["status", "--json", *args], env, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["queue"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def holding(settings: Settings) -> AsyncIterator[list[AbstractIncomingMessage]]:
    """A consumer with prefetch 1 that never acks: one delivery stays unacked until the end."""
    connection = await aio_pika.connect(settings.amqp_url)
    held: list[AbstractIncomingMessage] = []
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1)
        queue = await channel.declare_queue(settings.queue, passive=True)
        await queue.consume(held.append, no_ack=False)
        yield held
    finally:
        await connection.close()  # the held delivery goes back to the queue


async def test_status_splits_ready_messages_by_priority(
        management_api: tuple[str, tuple[str, str]], settings: Settings,
        gapless_env: dict[str, str]) -> None:
    await publish_mix(settings)
    await statistics_show(management_api, settings.queue, ready=6, unacked=0)
    queue = await status_json(gapless_env)
    assert queue["ready"] == 6
    assert queue["unacked"] == 0
    assert queue["by_priority"] == {"user": 2, "batch": 4}
    assert queue["note"] is None

    table = await asyncio.to_thread(run_gapless, ["status"], {**gapless_env, "COLUMNS": "100"},
                                    timeout=60)
    assert f"queue {settings.queue}: 6 ready, 0 in flight (user 2, batch 4)" in table.stdout


async def test_per_priority_depth_counts_ready_messages_only(
        management_api: tuple[str, tuple[str, str]], settings: Settings,
        gapless_env: dict[str, str]) -> None:
    """A delivery held unacked leaves the per-priority lengths: the broker hands out the
    highest priority first, so one user message is in flight."""
    await publish_mix(settings)
    async with holding(settings) as held:
        async def delivered() -> bool:
            return bool(held)

        await await_until(delivered, 10, message="one delivery to the holding consumer")
        assert held[0].priority == 4
        await statistics_show(management_api, settings.queue, ready=5, unacked=1)
        queue = await status_json(gapless_env)
    assert queue["ready"] == 5
    assert queue["unacked"] == 1
    assert queue["by_priority"] == {"user": 1, "batch": 4}


async def test_without_the_management_api_status_gives_the_total_and_says_why(
        settings: Settings, gapless_env: dict[str, str]) -> None:
    await publish_mix(settings)
    port = free_port()
    queue = await status_json(gapless_env, "--management-url", f"http://127.0.0.1:{port}")
    assert queue["ready"] == 6
    assert queue["by_priority"] is None
    assert queue["unacked"] is None
    assert queue["note"] == f"{NO_MANAGEMENT_NOTE} (http://127.0.0.1:{port} unreachable)"
