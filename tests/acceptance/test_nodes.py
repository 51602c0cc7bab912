"""Several RabbitMQ nodes in ``GAPLESS_AMQP_URL``: the first that answers is used, and a process
moves to the next when its node goes.

Each "node" here is a TCP forwarder to the shared broker that the test cuts (so the shared broker
is never touched); the real three-node cluster, with a node killed under load, is in tests/ha.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.connection import BrokerUnavailable, connect_once
from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from gapless.urls import node_urls, redact_url
from tests.helpers import TcpProxy, await_until, free_port, ledger, today
from tests.recovery_support import Processes, log_events
from tests.worker_support import rows

pytestmark = pytest.mark.xdist_group("nodes")


def invoice(invoice_id: str) -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": "acme", "series": "ABC",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "1", "unit_price": "5.00",
                       "vat_rate": "20"}]}


@pytest.fixture
def nodes(settings: Settings) -> Iterator[tuple[TcpProxy, TcpProxy]]:
    """Two "nodes": forwarders to the shared broker, each of which the test may cut."""
    port = make_url(settings.amqp_url).port or 5672
    first, second = TcpProxy(port), TcpProxy(port)
    first.start()
    second.start()
    yield first, second
    first.cut()
    second.cut()


def node_list(*ports: int, password: str = "guest") -> str:
    return ",".join(f"amqp://guest:{password}@127.0.0.1:{port}/" for port in ports)


async def test_the_first_node_that_answers_is_used(settings: Settings,
                                                   nodes: tuple[TcpProxy, TcpProxy]) -> None:
    _, second = nodes
    dead = free_port()
    listed = settings.with_overrides(amqp_url=node_list(dead, second.port))
    connection = await connect_once(listed)
    await connection.close()
    async with Publisher(listed) as publisher:
        assert publisher.node == f"127.0.0.1:{second.port}"
        await publisher.publish(invoice("one"))
    assert (await queue_depths(listed))[settings.queue] == 1


async def test_no_node_answering_is_one_error_naming_every_node_without_passwords(
        settings: Settings) -> None:
    ports = free_port(), free_port()
    nowhere = settings.with_overrides(amqp_url=node_list(*ports, password="s3cret"))
    with pytest.raises(BrokerUnavailable) as caught:
        await connect_once(nowhere)
    message = str(caught.value)
    assert "s3cret" not in message
    assert all(f"127.0.0.1:{port}" in message for port in ports)
    assert redact_url(nowhere.amqp_url) == node_list(*ports, password="***")


async def test_a_publisher_whose_node_goes_publishes_on_the_next(
        settings: Settings, nodes: tuple[TcpProxy, TcpProxy]) -> None:
    first, second = nodes
    listed = settings.with_overrides(amqp_url=node_list(first.port, second.port),
                                     confirm_timeout_s=5.0)
    async with Publisher(listed) as publisher:
        assert publisher.node == f"127.0.0.1:{first.port}"
        await publisher.publish(invoice("before"))
        first.cut()
        await publisher.publish(invoice("after"))  # no error: a fresh connection to the next
        assert publisher.node == f"127.0.0.1:{second.port}"
    assert (await queue_depths(listed))[settings.queue] == 2


@pytest.mark.slow
async def test_a_worker_whose_node_goes_moves_to_the_next_and_loses_nothing(
        engine: AsyncEngine, settings: Settings, nodes: tuple[TcpProxy, TcpProxy],
        procs: Processes) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    first, second = nodes
    listed = settings.with_overrides(amqp_url=node_list(first.port, second.port))
    assert len(node_urls(listed.amqp_url)) == 2
    worker = procs.worker("worker", "--concurrency", "4",
                          env={"GAPLESS_AMQP_URL": listed.amqp_url})

    async def issued(count: int) -> bool:
        return sum(row.status == "ISSUED" for row in (await rows(engine)).values()) == count

    async with Publisher(settings) as publisher:  # the producer uses the broker directly
        for n in range(10):
            await publisher.publish(invoice(f"a-{n}"))
        await await_until(lambda: issued(10), 60, message="10 invoices issued via node 1")
        first.cut()
        for n in range(10):
            await publisher.publish(invoice(f"b-{n}"))
    await await_until(lambda: issued(20), 60, message="10 more issued via node 2")
    reconnected = log_events(worker, "amqp_reconnected")
    assert reconnected, worker.output()[-3000:]
    assert reconnected[-1]["node"] == f"127.0.0.1:{second.port}"
    assert worker.terminate(timeout=30) == 0
    numbers = [row.number for row in (await rows(engine)).values()]
    assert len(set(numbers)) == len(numbers) == 20
    assert "guest:guest" not in worker.output()
