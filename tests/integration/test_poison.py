"""Poison messages against a real worker, RabbitMQ and PostgreSQL, in classic and quorum mode:
an invalid message whose headers nearly fill the broker's frame, nest thousands of levels deep,
or are not UTF-8 ends in ``<prefix>.dead`` and never stalls the queue (the worker has one slot);
so does one whose copy cannot be published (the broker dead-letters it); a valid one with such
headers is issued.

The worker runs in-process (:func:`tests.worker_support.running_worker`); messages are
published raw with aio-pika, as any producer could (tests/poison_support.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher, PublishUnconfirmed
from gapless.constants import HEADER_DEAD_HEADERS_CUT, HEADER_DEAD_REASON
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.ops.dead import dead_reason
from gapless.settings import Settings
from tests.helpers import await_until, ledger
from tests.mock_client import MockIntegratorClient
from tests.poison_support import RawText, dead_depth, nested, publish_deep, publish_raw
from tests.worker_support import all_in, drain_dead, rows, running_worker, sale

#: How long a valid message behind a poison one may take to be ISSUED.
DEADLINE_S = 30
@pytest.fixture
async def series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))


@pytest.fixture(params=["classic", "quorum"])
def poison_settings(request: pytest.FixtureRequest, settings: Settings,
                    mock_integrator: MockIntegratorClient) -> Settings:
    return settings.with_overrides(integrator_url=mock_integrator.url, retry_wait_s=0.05,
                                   retry_max_s=5.0, queue_type=request.param)


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


@pytest.mark.usefixtures("series")
async def test_headers_pamqp_cannot_decode_neither_end_the_connection_nor_stall_the_queue(
        engine: AsyncEngine, poison_settings: Settings) -> None:
    """A header nested 3000 levels deep and a key that is not UTF-8 used to end the consumer's
    connection in its reader, before the worker saw the message; a string header that is not
    UTF-8 made the dead-letter copy fail to encode."""
    settings = poison_settings
    invalid = json.dumps({"invoice_id": "poison", "tenant": "acme"}).encode()
    async with running_worker(settings, concurrency=1) as worker:
        await publish_deep(settings, invalid, message_id="deep", headers={"x-deep": nested(3000)})
        await publish_raw(settings, invalid, message_id="bad-key",
                          headers={RawText(b"x-\xff\xfe"): "v"})
        await publish_raw(settings, invalid, message_id="bad-text",
                          headers={"x-text": RawText(b"\xff\xfe")})
        await publish_deep(settings, json.dumps(sale("good-deep")).encode(),
                           message_id="good-deep",
                           headers={"x-deep": nested(3000), RawText(b"\xff"): RawText(b"\xff")})
        await publish_raw(settings, json.dumps(sale("good-after")).encode(),
                          message_id="good-after")
        await await_until(lambda: all_in(engine, {"good-deep", "good-after"}, "ISSUED"),
                          DEADLINE_S, message="the valid invoices behind the poison ones ISSUED")
        dead = await drain_dead(settings, 3)
        assert worker.consuming
    by_id = {message.message_id: dict(message.headers or {}) for message in dead}
    assert set(by_id) == {"deep", "bad-key", "bad-text"}
    for headers in by_id.values():
        assert "required field is missing" in str(dead_reason(headers))
    assert by_id["bad-text"]["x-text"] == bytearray(b"\xff\xfe")  # kept, as a byte array
    assert by_id["bad-key"]["x-\ufffd\ufffd"] == "v"
    assert "nested deeper than 32 levels" in json.dumps(by_id["deep"]["x-deep"])
    assert set(await rows(engine)) == {"good-deep", "good-after"}


@pytest.mark.usefixtures("series")
async def test_the_dead_letter_publisher_reconnects_after_losing_its_connection(
        engine: AsyncEngine, poison_settings: Settings) -> None:
    settings = poison_settings
    invalid = json.dumps({"invoice_id": "poison-3", "tenant": "acme"}).encode()
    async with running_worker(settings, concurrency=1) as worker:
        publisher = worker._dead_letters  # its connection is what is lost
        assert publisher is not None
        lost = publisher._connection
        assert lost is not None
        await lost.close()  # the publisher still holds its channel, closed with it
        assert publisher.channel.is_closed
        await publish_raw(settings, invalid, message_id="poison-3")
        await publish_raw(settings, json.dumps(sale("good-4")).encode(), message_id="good-4")
        await await_until(lambda: all_in(engine, {"good-4"}, "ISSUED"), DEADLINE_S,
                          message="the valid invoice behind the poison one ISSUED")
        [dead] = await drain_dead(settings, 1)
    assert "required field is missing" in str(dead.headers[HEADER_DEAD_REASON])  # our copy
