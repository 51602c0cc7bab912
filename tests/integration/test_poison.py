"""Poison messages against a real worker, RabbitMQ and PostgreSQL: an invalid message whose
headers nearly fill the broker's frame, in classic and quorum mode, ends in ``<prefix>.dead``
and never stalls the queue; a valid one with such headers is issued.

The worker runs in-process (:func:`tests.worker_support.running_worker`); messages are
published raw with aio-pika, as any producer could.
"""

from __future__ import annotations

import json
from typing import Any

import aio_pika
import pytest
from pamqp.frame import marshal
from pamqp.header import ContentHeader
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher, PublishUnconfirmed
from gapless.constants import HEADER_DEAD_HEADERS_CUT, HEADER_DEAD_REASON, dead_queue_name
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.ops.dead import dead_reason
from gapless.settings import Settings
from tests.helpers import await_until, ledger
from tests.mock_client import MockIntegratorClient
from tests.worker_support import all_in, drain_dead, rows, running_worker, sale

#: How long a valid message behind a poison one may take to be ISSUED.
DEADLINE_S = 30
#: What the content header frame of the poison message leaves free of the broker's frame_max:
#: too little for the reason headers a dead-letter copy adds.
SLACK = 48


@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))


@pytest.fixture(params=["classic", "quorum"])
def poison_settings(request: pytest.FixtureRequest, settings: Settings,
                    mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0, queue_type=request.param)


def header_frame_size(message: aio_pika.Message) -> int:
    """The bytes of the content header frame that carries ``message``'s properties."""
    return len(marshal(ContentHeader(0, message.body_size, message.properties), 1))


def filled(message: aio_pika.Message, frame_max: int) -> aio_pika.Message:
    """``message`` with headers added that make its content header frame ``frame_max - SLACK``
    bytes (eight string headers of about 16 KiB each)."""
    fillers = [f"x-filler-{n}" for n in range(8)]
    headers: dict[str, Any] = {**(message.headers or {}), **dict.fromkeys(fillers, "")}

    def with_headers() -> aio_pika.Message:
        return aio_pika.Message(message.body, headers=headers,
                                content_type=message.content_type,
                                message_id=message.message_id,
                                delivery_mode=message.delivery_mode)

    room = frame_max - SLACK - header_frame_size(with_headers())
    for name in fillers:
        headers[name] = "f" * (room // len(fillers))
    headers[fillers[0]] += "f" * (frame_max - SLACK - header_frame_size(with_headers()))
    result = with_headers()
    assert header_frame_size(result) == frame_max - SLACK
    return result


async def publish_raw(settings: Settings, body: bytes, *, message_id: str,
                      headers: dict[str, Any] | None = None, fill: bool = False) -> None:
    """Publish to ``<prefix>`` with confirms, as any producer could; ``fill``: with headers
    that nearly fill the negotiated frame_max."""
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        message = aio_pika.Message(body, headers=headers, content_type="application/json",
                                   message_id=message_id,
                                   delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        if fill:
            underlay = connection.transport.connection
            message = filled(message, underlay.connection_tune.frame_max)
        await channel.default_exchange.publish(message, routing_key=settings.queue)


@pytest.mark.usefixtures("series")
async def test_a_poison_message_is_dead_lettered_and_the_valid_one_behind_it_issued(
        engine: AsyncEngine, poison_settings: Settings) -> None:
    settings = poison_settings
    poison = json.dumps({"invoice_id": "poison-1", "tenant": "acme"}).encode()
    async with running_worker(settings, concurrency=1) as worker:
        await publish_raw(settings, poison, message_id="poison-1", fill=True)
        await publish_raw(settings, json.dumps(sale("good-1")).encode(),
                          message_id="good-1")
        await await_until(lambda: all_in(engine, {"good-1"}, "ISSUED"), DEADLINE_S,
                          message="the valid invoice behind the poison one ISSUED")
        dead = await drain_dead(settings, 1)
        assert worker.consuming
        # Still consuming: a later valid message is issued too.
        await publish_raw(settings, json.dumps(sale("good-2")).encode(),
                          message_id="good-2")
        await await_until(lambda: all_in(engine, {"good-1", "good-2"}, "ISSUED"),
                          DEADLINE_S, message="a later valid invoice ISSUED")
    assert set(await rows(engine)) == {"good-1", "good-2"}  # nothing stored for the poison
    [copy] = dead
    assert copy.message_id == "poison-1"
    assert copy.body == poison
    headers = dict(copy.headers or {})
    assert "required field is missing" in str(dead_reason(headers))
    assert HEADER_DEAD_HEADERS_CUT in headers  # the copy says its headers were cut
    assert await dead_depth(settings) == 0


async def dead_depth(settings: Settings) -> int:
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        return int(queue.declaration_result.message_count or 0)


@pytest.mark.usefixtures("series")
async def test_a_valid_message_with_frame_filling_headers_is_issued(
        engine: AsyncEngine, poison_settings: Settings) -> None:
    settings = poison_settings
    async with running_worker(settings, concurrency=2):
        await publish_raw(settings, json.dumps(sale("big-headers")).encode(),
                          message_id="big-headers", fill=True,
                          headers={"x-nested": {"deep": [1, bytearray(b"\x00\xff"), {"x": 1.5}]},
                                   HEADER_DEAD_REASON: "a producer's own reason"})
        await await_until(lambda: all_in(engine, {"big-headers"}, "ISSUED"), DEADLINE_S,
                          message="the invoice with frame-filling headers ISSUED")
    assert await dead_depth(settings) == 0


@pytest.mark.usefixtures("series")
async def test_a_copy_that_cannot_be_published_leaves_the_message_to_the_broker(
        engine: AsyncEngine, poison_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever stops the copy (here: no confirm after every attempt), the original is
    rejected without requeue, RabbitMQ dead-letters it itself, and the worker goes on."""
    settings = poison_settings
    failed: list[str] = []

    async def unconfirmed(self: Publisher, body: bytes, **kwargs: Any) -> None:
        failed.append(str(kwargs["reason"]))
        raise PublishUnconfirmed("no confirm for a message to the dead queue (test)")

    monkeypatch.setattr(Publisher, "dead_letter", unconfirmed)
    poison = json.dumps({"invoice_id": "poison-2", "tenant": "acme"}).encode()
    async with running_worker(settings, concurrency=1) as worker:
        await publish_raw(settings, poison, message_id="poison-2", fill=True)
        await publish_raw(settings, json.dumps(sale("good-3")).encode(), message_id="good-3")
        await await_until(lambda: all_in(engine, {"good-3"}, "ISSUED"), DEADLINE_S,
                          message="the valid invoice behind the poison one ISSUED")
        [dead] = await drain_dead(settings, 1)
        assert worker.consuming
    assert len(failed) == 1  # tried once, never requeued
    assert dead.message_id == "poison-2"
    assert dead.body == poison
    headers = dict(dead.headers or {})
    assert HEADER_DEAD_REASON not in headers
    assert dead_reason(headers) == f"broker: rejected in {settings.queue}"
    assert set(await rows(engine)) == {"good-3"}
