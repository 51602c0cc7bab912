"""Poison messages against a real ``gapless worker`` process (one slot), RabbitMQ and
PostgreSQL, in classic and quorum mode: invalid messages whose headers nearly fill the frame,
nest thousands of levels deep, or have a key that is not UTF-8 end in ``<prefix>.dead``; the
valid invoices published behind them — one of them with such headers — are ISSUED; the worker
never loses its connection."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ops.dead import dead_reason
from gapless.settings import Settings
from tests.helpers import await_until
from tests.poison_support import RawText, dead_depth, nested, publish_deep, publish_raw
from tests.recovery_support import Processes, log_events
from tests.worker_support import all_in, drain_dead, rows, sale

DEADLINE_S = 60


@pytest.mark.usefixtures("series")
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_poison_messages_never_stall_a_worker_process(
        engine: AsyncEngine, settings: Settings, procs: Processes, queue_type: str) -> None:
    settings = settings.with_overrides(queue_type=queue_type)
    worker = procs.worker("worker", "--concurrency", "1",
                          env={"GAPLESS_QUEUE_TYPE": queue_type})
    invalid = json.dumps({"invoice_id": "poison", "tenant": "acme"}).encode()
    await publish_raw(settings, invalid, message_id="full", fill=True)
    await publish_deep(settings, invalid, message_id="deep", headers={"x-deep": nested(3000)})
    await publish_raw(settings, invalid, message_id="bad-key",
                      headers={RawText(b"x-\xff"): "v"})
    await publish_raw(settings, json.dumps(sale("good-full")).encode(), message_id="good-full",
                      fill=True)
    await publish_raw(settings, json.dumps(sale("good")).encode(), message_id="good")
    await await_until(lambda: all_in(engine, {"good-full", "good"}, "ISSUED"), DEADLINE_S,
                      message="the valid invoices behind the poison ones ISSUED")
    dead = await drain_dead(settings, 3)
    assert {message.message_id for message in dead} == {"full", "deep", "bad-key"}
    for message in dead:
        assert "required field is missing" in str(dead_reason(dict(message.headers or {})))
    assert set(await rows(engine)) == {"good-full", "good"}
    assert await dead_depth(settings) == 0
    assert worker.alive()
    assert not log_events(worker, "amqp_connection_lost"), worker.output()[-3000:]
    assert len(log_events(worker, "message_dead_lettered")) == 3
