"""The batch endpoint's validation gives the event loop turns: the requests served beside a
batch of a thousand messages do not wait out the whole of it (bench/api_latency.py measures
what that is worth)."""

from __future__ import annotations

import asyncio

from gapless.api.auth import Principal
from gapless.api.invoices import BATCH_TURN, batch_items
from gapless.demo.samples import sample_messages

EVERY_TENANT = Principal(tenant=None, token_index=0)


async def test_validating_a_batch_lets_other_tasks_run_meanwhile() -> None:
    decoded = list(sample_messages(5 * BATCH_TURN, tenant="acme", series="ABC",
                                   priority="batch"))
    turns = 0
    stop = asyncio.Event()

    async def beside() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(beside())
    items = await batch_items(EVERY_TENANT, decoded)
    during = turns
    stop.set()
    await other
    assert [item.code for item in items] == [202] * len(decoded)
    # Without turns the other task would not have run once before the batch was validated.
    assert during >= 4


async def test_a_refused_item_is_refused_alone_among_turns() -> None:
    decoded: list[object] = list(sample_messages(2 * BATCH_TURN + 1, tenant="acme",
                                                 series="ABC", priority="batch"))
    decoded[BATCH_TURN] = {"invoice_id": "x"}
    items = await batch_items(EVERY_TENANT, decoded)
    assert [index for index, item in enumerate(items) if item.code != 202] == [BATCH_TURN]
    assert [item.index for item in items] == list(range(len(decoded)))
