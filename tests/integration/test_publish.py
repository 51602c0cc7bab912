"""Topology, confirmed publishing, dead-lettering and ``gapless publish`` against real RabbitMQ.

Every test works under its own queue prefix (the ``queue_prefix`` fixture deletes its queues).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from gapless.amqp.connection import BrokerUnavailable
from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher, PublishRefused, dead_letter, publish_invoice
from gapless.amqp.topology import declare_topology
from gapless.constants import (
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    dead_exchange_name,
    dead_queue_name,
)
from gapless.errors import ConfigurationError
from gapless.message import InvalidMessage, parse_message, validate_message
from gapless.settings import Settings
from tests.helpers import await_until, free_port, run_gapless, today


def invoice(invoice_id: str = "shop-42-000981", **changes: Any) -> dict[str, Any]:
    data = {"invoice_id": invoice_id, "tenant": "acme", "series": "ABC", "priority": "user",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}
    data.update(changes)
    return data


@pytest.fixture
def amqp_settings(queue_prefix: str) -> Settings:
    """Settings for this test's queue prefix (no database needed here)."""
    return Settings(queue=queue_prefix)


@pytest.fixture
def amqp_env(amqp_settings: Settings) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    env.update({"GAPLESS_AMQP_URL": amqp_settings.amqp_url, "GAPLESS_QUEUE": amqp_settings.queue,
                "GAPLESS_LOG_FORMAT": "json"})
    return env


@pytest.fixture
async def connection(amqp_settings: Settings) -> AsyncIterator[AbstractRobustConnection]:
    conn = await aio_pika.connect_robust(amqp_settings.amqp_url)
    yield conn
    await conn.close()


async def drain(channel: AbstractChannel, name: str) -> list[AbstractIncomingMessage]:
    """Every message now in queue ``name``, in delivery order, acked."""
    queue = await channel.declare_queue(name, passive=True)
    got = []
    while (message := await queue.get(fail=False)) is not None:
        await message.ack()
        got.append(message)
    return got


# --- topology -------------------------------------------------------------------------------------


async def test_topology_declared_twice_and_by_a_publisher_is_fine(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    prefix = amqp_settings.queue
    [first] = await declare_topology(await connection.channel(), amqp_settings)
    [second] = await declare_topology(await connection.channel(), amqp_settings)
    assert first.name == second.name == prefix
    async with Publisher(amqp_settings) as publisher:
        await publisher.publish(invoice())
    [again] = await declare_topology(await connection.channel(), amqp_settings)
    assert again.declaration_result.message_count == 1
    assert await queue_depths(amqp_settings) == {prefix: 1, dead_queue_name(prefix): 0}


async def test_main_queue_has_exactly_x_max_priority_4_and_the_dead_letter_exchange(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    prefix = amqp_settings.queue
    await declare_topology(await connection.channel(), amqp_settings)
    exact = {"x-max-priority": 4, "x-dead-letter-exchange": dead_exchange_name(prefix)}
    channel = await connection.channel()
    await channel.declare_queue(prefix, durable=True, arguments=exact)  # equal: accepted
    for other in ({"x-max-priority": 5, "x-dead-letter-exchange": dead_exchange_name(prefix)},
                  {"x-max-priority": 4}, {}):
        channel = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
            await channel.declare_queue(prefix, durable=True, arguments=other)


async def test_a_conflicting_existing_queue_is_a_configuration_error(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    await (await connection.channel()).declare_queue(amqp_settings.queue, durable=True)
    with pytest.raises(ConfigurationError, match="exists with different settings"):
        await declare_topology(await connection.channel(), amqp_settings)


async def test_user_messages_overtake_batch_messages_in_the_queue(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        for n in range(5):
            await publisher.publish(invoice(f"batch-{n}", priority="batch"))
        await publisher.publish(invoice("user-1", priority="user"))
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert [m.message_id for m in got] == ["user-1", *(f"batch-{n}" for n in range(5))]


async def test_a_rejected_message_is_dead_lettered_through_the_dlx(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await publisher.publish(invoice())
    channel = await connection.channel()
    queue = await channel.declare_queue(amqp_settings.queue, passive=True)
    message = await queue.get()
    await message.reject(requeue=False)
    await await_until(lambda: _depth_is(amqp_settings, dead_queue_name(amqp_settings.queue), 1),
                      10, message="the rejected message in the dead queue")
    dead = await drain(await connection.channel(), dead_queue_name(amqp_settings.queue))
    assert dead[0].message_id == "shop-42-000981"


async def _depth_is(settings: Settings, name: str, expected: int) -> bool:
    return (await queue_depths(settings))[name] == expected


async def test_queue_depths_of_missing_queues_are_zero(amqp_settings: Settings) -> None:
    prefix = amqp_settings.queue
    assert await queue_depths(amqp_settings) == {prefix: 0, dead_queue_name(prefix): 0}


# --- publishing -----------------------------------------------------------------------------------


async def test_published_messages_land_with_the_contract_properties(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await publisher.publish(invoice("u-1", priority="user"))
        await publisher.publish(invoice("b-1", priority="batch"))
        absent = invoice("n-1")
        del absent["priority"]
        await publisher.publish(absent)
        await publisher.publish(invoice("o-1", priority="batch"), priority="user",
                                headers={"x-source": "test"})
    got = {m.message_id: m for m in await drain(await connection.channel(), amqp_settings.queue)}
    assert {key: m.priority for key, m in got.items()} == {"u-1": 4, "o-1": 4, "b-1": 1, "n-1": 1}
    for message in got.values():
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert message.content_type == "application/json"
        assert message.routing_key == amqp_settings.queue
        assert message.exchange == ""
        parsed = parse_message(message.body, message.content_type)
        assert parsed.invoice_id == message.message_id
    assert got["o-1"].headers == {"x-source": "test"}
    assert json.loads(got["u-1"].body) == invoice("u-1", priority="user")


async def test_raw_bytes_are_published_as_given(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await publisher.publish(b"not json", content_type="text/plain", priority=9,
                                message_id="raw-1")
    [message] = await drain(await connection.channel(), amqp_settings.queue)
    assert (message.body, message.content_type, message.message_id) == (
        b"not json", "text/plain", "raw-1")
    assert message.priority == 9  # the broker keeps it; consumers count it as 4


async def test_many_concurrent_publishes_are_all_confirmed(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await asyncio.gather(*(publisher.publish(invoice(f"c-{n}")) for n in range(300)))
    assert (await queue_depths(amqp_settings))[amqp_settings.queue] == 300


async def test_publish_many_writes_a_batch_whole_and_each_message_arrives_once_as_sent(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    """One call, one write: 1,500 messages (one of them larger than a frame, so split into
    several body frames) are each confirmed, queued once, in order, byte for byte, with the
    contract's properties; the channel's confirm bookkeeping is left empty."""
    big = invoice("big-1", priority="batch", lines=[
        {"description": f"Line {n}: " + "ç" * 180, "quantity": "1", "unit_price": "1.00",
         "vat_rate": "20"} for n in range(400)])
    models = [validate_message(invoice(f"m-{n}", priority="batch"))
              for n in range(1500)]
    models[700] = validate_message(big)
    async with Publisher(amqp_settings) as publisher:
        underlay = await publisher.channel.get_underlay_channel()
        assert isinstance(underlay, aiormq.Channel)
        assert len(models[700].body()) > underlay.connection.connection_tune.frame_max
        assert await publisher.publish_many(models) == [None] * len(models)
        assert not underlay.confirmations
        assert not underlay.message_id_delivery_tag
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert [m.message_id for m in got] == [model.invoice_id for model in models]
    assert [m.body for m in got] == [model.body() for model in models]
    assert {(m.priority, m.delivery_mode, m.content_type, m.app_id) for m in got} == {
        (1, aio_pika.DeliveryMode.PERSISTENT, "application/json", "gapless")}


async def test_publish_many_publishes_again_on_a_fresh_connection_what_a_lost_one_left(
        amqp_settings: Settings) -> None:
    """The connection is closed while a batch's confirms are awaited: every message the old
    connection did not confirm goes out again on a new one, so each is confirmed and queued (at
    least once: a message the broker took before the loss may be there twice, which the worker
    maps onto one invoice)."""
    models = [validate_message(invoice(f"l-{n}", priority="batch"))
              for n in range(3000)]
    async with Publisher(amqp_settings) as publisher:
        underlay = await publisher.channel.get_underlay_channel()
        assert isinstance(underlay, aiormq.Channel)

        async def lose_the_connection() -> None:
            async def awaited() -> bool:
                return bool(underlay.confirmations)
            await await_until(awaited, 10, interval=0.001, message="confirms awaited")
            await underlay.connection.close()

        losing = asyncio.create_task(lose_the_connection())
        outcomes = await publisher.publish_many(models)
        await losing
        assert outcomes == [None] * len(models)
        assert await publisher.channel.get_underlay_channel() is not underlay
    depth = (await queue_depths(amqp_settings))[amqp_settings.queue]
    assert len(models) <= depth < 2 * len(models)
    connection = await aio_pika.connect(amqp_settings.amqp_url)
    async with connection:
        got = await drain(await connection.channel(), amqp_settings.queue)
    assert {m.message_id for m in got} == {model.invoice_id for model in models}


async def test_publish_many_answers_each_message_on_its_own(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    """Quorum mode routes user work to ``<prefix>.user``: with that queue gone, the user
    messages of a batch are refused as unroutable, each in its place, the others confirmed; an
    invoice repeated within the call is published both times."""
    settings = amqp_settings.model_copy(update={"queue_type": "quorum"})
    async with Publisher(settings) as publisher:
        await (await connection.channel()).queue_delete(f"{settings.queue}.user")
        models = [validate_message(invoice(invoice_id, priority=priority))
                  for invoice_id, priority in (("b-1", "batch"), ("u-1", "user"),
                                               ("b-1", "batch"), ("u-2", "user"),
                                               ("b-2", "batch"))]
        outcomes = await publisher.publish_many(models)
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "NoneType", "PublishRefused", "NoneType", "PublishRefused", "NoneType"]
    assert all("unroutable" in str(outcome) for outcome in outcomes if outcome is not None)
    got = await drain(await connection.channel(), settings.queue)
    assert [m.message_id for m in got] == ["b-1", "b-1", "b-2"]


async def test_concurrent_publishes_share_a_write_and_each_gets_its_own_answer(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    """Publishes of one turn of the event loop go out together: a user message whose queue is
    gone (quorum mode) is refused, the others confirmed, an invoice published twice at once is
    queued twice."""
    settings = amqp_settings.model_copy(update={"queue_type": "quorum"})
    async with Publisher(settings) as publisher:
        await (await connection.channel()).queue_delete(f"{settings.queue}.user")
        outcomes = await asyncio.gather(
            publisher.publish(invoice("b-1", priority="batch")),
            publisher.publish(invoice("u-1", priority="user")),
            publisher.publish(invoice("b-1", priority="batch")),
            publisher.publish(invoice("b-2", priority="batch")), return_exceptions=True)
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "NoneType", "PublishRefused", "NoneType", "NoneType"]
    assert "unroutable" in str(outcomes[1])
    got = await drain(await connection.channel(), settings.queue)
    assert [m.message_id for m in got] == ["b-1", "b-1", "b-2"]


async def test_an_unroutable_message_is_refused(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await (await connection.channel()).queue_delete(amqp_settings.queue)
        with pytest.raises(PublishRefused, match="unroutable"):
            await publisher.publish(invoice())


async def test_an_invalid_message_is_not_published(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        with pytest.raises(InvalidMessage, match=r"lines\.0\.quantity: must be a decimal "
                                                 r"string greater than 0"):
            await publisher.publish(invoice(lines=[{"description": "x", "quantity": "-1",
                                                    "unit_price": "1", "vat_rate": "20"}]))
    assert (await queue_depths(amqp_settings))[amqp_settings.queue] == 0


async def test_publish_invoice_publishes_one_confirmed_message(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    await publish_invoice(invoice("api-1"), settings=amqp_settings)
    await publish_invoice(invoice("api-2"), settings=amqp_settings, priority="batch")
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert [(m.message_id, m.priority) for m in got] == [("api-1", 4), ("api-2", 1)]


async def test_publish_invoice_of_an_invalid_message_raises_and_publishes_nothing(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    await declare_topology(await connection.channel(), amqp_settings)
    with pytest.raises(InvalidMessage) as caught:
        await publish_invoice(invoice(currency="lira"), settings=amqp_settings)
    assert caught.value.reason.startswith("currency: must be a 3-letter")
    # it is refused before connecting: an unreachable broker does not change the answer
    nowhere = Settings(queue=amqp_settings.queue,
                       amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    with pytest.raises(InvalidMessage):
        await publish_invoice(invoice(lines=[]), settings=nowhere)
    assert (await queue_depths(amqp_settings))[amqp_settings.queue] == 0


async def test_an_unreachable_broker_is_one_clear_error(amqp_settings: Settings) -> None:
    nowhere = Settings(queue=amqp_settings.queue,
                       amqp_url=f"amqp://guest:secret@127.0.0.1:{free_port()}/")
    with pytest.raises(BrokerUnavailable, match="cannot connect to RabbitMQ") as caught:
        await publish_invoice(invoice(), settings=nowhere)
    assert "secret" not in str(caught.value)


# --- dead-lettering -------------------------------------------------------------------------------


async def test_dead_letter_copies_the_message_with_the_reason(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    async with Publisher(amqp_settings) as publisher:
        await publisher.dead_letter(b'{"broken": ', reason="body is not valid JSON",
                                    headers={"x-source": "shop"}, content_type="application/json",
                                    message_id="m-1", worker="w-1")
    [dead] = await drain(await connection.channel(), dead_queue_name(amqp_settings.queue))
    assert dead.body == b'{"broken": '
    assert (dead.content_type, dead.message_id) == ("application/json", "m-1")
    assert dead.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert dead.headers[HEADER_DEAD_REASON] == "body is not valid JSON"
    assert dead.headers[HEADER_DEAD_WORKER] == "w-1"
    assert dead.headers["x-source"] == "shop"
    assert str(dead.headers[HEADER_DEAD_AT]).startswith("20")
    assert (await queue_depths(amqp_settings))[amqp_settings.queue] == 0


async def test_dead_letter_works_on_a_consumers_own_channel(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    channel = await connection.channel()  # what a worker has: confirms on, no on_return_raises
    await declare_topology(channel, amqp_settings)
    await dead_letter(channel, amqp_settings.queue, b"x", reason="not JSON")
    [dead] = await drain(await connection.channel(), dead_queue_name(amqp_settings.queue))
    assert dead.headers[HEADER_DEAD_REASON] == "not JSON"
    # without the dead queue the copy is refused, so the worker must not ack the original
    await channel.queue_delete(dead_queue_name(amqp_settings.queue))
    with pytest.raises(PublishRefused, match="unroutable"):
        await dead_letter(channel, amqp_settings.queue, b"x", reason="not JSON")


async def test_dead_letter_needs_publisher_confirms(
        connection: AbstractRobustConnection, amqp_settings: Settings) -> None:
    channel = await connection.channel(publisher_confirms=False)
    with pytest.raises(ConfigurationError, match="publisher confirms"):
        await dead_letter(channel, amqp_settings.queue, b"x", reason="r")


# --- gapless publish ------------------------------------------------------------------------------


async def test_cli_demo_publishes_n_unique_valid_batch_invoices(
        connection: AbstractRobustConnection, amqp_settings: Settings,
        amqp_env: dict[str, str]) -> None:
    result = await asyncio.to_thread(run_gapless, ["publish", "--demo", "50"], amqp_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "published 50, confirmed 50, refused 0"
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert len(got) == 50
    messages = [parse_message(m.body, m.content_type) for m in got]
    assert len({m.invoice_id for m in messages}) == 50
    assert {(m.tenant, m.series, m.priority) for m in messages} == {("acme", "ABC", "batch")}
    assert {m.priority for m in got} == {1}
    assert all(m.customer.tax_id != "0000000000" for m in messages)
    assert all(m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT for m in got)


async def test_cli_demo_flags(connection: AbstractRobustConnection, amqp_settings: Settings,
                              amqp_env: dict[str, str]) -> None:
    args = ["publish", "--demo", "10", "--tenant", "globex", "--series", "XYZ", "--priority",
            "user", "--reject-every", "5", "--json"]
    result = await asyncio.to_thread(run_gapless, args, amqp_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"published": 10, "confirmed": 10, "refused": 0,
                                         "refusals": []}
    got = await drain(await connection.channel(), amqp_settings.queue)
    messages = [parse_message(m.body, m.content_type) for m in got]
    assert {(m.tenant, m.series, m.priority) for m in messages} == {("globex", "XYZ", "user")}
    assert {m.priority for m in got} == {4}
    rejected = sorted(m.invoice_id.rsplit("-", 1)[1] for m in messages
                      if m.customer.tax_id == "0000000000")
    assert rejected == ["10", "5"]


async def test_cli_file_publishes_good_lines_and_refuses_bad_ones(
        connection: AbstractRobustConnection, amqp_settings: Settings,
        amqp_env: dict[str, str], tmp_path: Path) -> None:
    bad_quantity = invoice("f-bad", lines=[{"description": "x", "quantity": 2,
                                            "unit_price": "1", "vat_rate": "20"}])
    lines = [json.dumps(invoice("f-1", priority="batch")),
             "",
             "not json",
             json.dumps(invoice("f-2", priority="user")),
             json.dumps(bad_quantity),
             json.dumps(invoice("f-3", priority="batch"))]
    path = tmp_path / "invoices.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = await asyncio.to_thread(run_gapless, ["publish", "--file", str(path)], amqp_env)
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == "published 3, confirmed 3, refused 2"
    assert "refused line 3: body is not valid JSON" in result.stderr
    assert ("refused line 5: lines.0.quantity: must be a decimal string such as"
            in result.stderr)
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert [(m.message_id, m.priority) for m in got] == [("f-2", 4), ("f-1", 1), ("f-3", 1)]


async def test_cli_file_from_stdin_with_json_summary(
        connection: AbstractRobustConnection, amqp_settings: Settings,
        amqp_env: dict[str, str]) -> None:
    text = json.dumps(invoice("s-1")) + "\n" + json.dumps(invoice("s-2")) + "\n"
    result = await asyncio.to_thread(run_gapless, ["publish", "--file", "-", "--json",
                                                   "--priority", "batch"], amqp_env,
                                     input_text=text)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["confirmed"] == 2
    got = await drain(await connection.channel(), amqp_settings.queue)
    assert [(m.message_id, m.priority) for m in got] == [("s-1", 1), ("s-2", 1)]


@pytest.mark.parametrize("args", [
    [],
    ["--demo", "1", "--file", "x.jsonl"],
    ["--demo", "0"],
    ["--demo", "many"],
    ["--demo", "2", "--priority", "urgent"],
    ["--demo", "2", "--rate", "0"],
    ["--demo", "2", "--tenant", "bad tenant"],
    ["--file", "/nonexistent/invoices.jsonl"],
    ["--file", "-", "--reject-every", "2"],
])
async def test_cli_usage_errors_exit_2_with_one_line(
        amqp_settings: Settings, amqp_env: dict[str, str], args: list[str]) -> None:
    result = await asyncio.to_thread(run_gapless, ["publish", *args], amqp_env, timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gapless: error")
    assert await queue_depths(amqp_settings) == {amqp_settings.queue: 0,
                                                 dead_queue_name(amqp_settings.queue): 0}


async def test_cli_with_an_unreachable_broker_exits_1_with_a_clear_error(
        amqp_env: dict[str, str]) -> None:
    env = {**amqp_env, "GAPLESS_AMQP_URL": f"amqp://guest:secret@127.0.0.1:{free_port()}/"}
    result = await asyncio.to_thread(run_gapless, ["publish", "--demo", "3"], env, timeout=60)
    assert result.returncode == 1, result.stderr
    # aiormq logs its own connection error first; the last line is gapless's one-line verdict
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gapless: cannot connect to RabbitMQ at amqp://guest:***@"), last
    assert "secret" not in result.stderr
    assert "Traceback" not in result.stderr
