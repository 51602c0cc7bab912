"""management: split from gapless.amqp.publisher."""

from __future__ import annotations

import aiormq

from gapless.amqp.connection import connect_once
from gapless.amqp.topology import work_queues
from gapless.constants import (
    dead_queue_name,
)
from gapless.settings import Settings


async def queue_depths(settings: Settings) -> dict[str, int]:
    """Ready-message counts of the work queues and ``<prefix>.dead`` (0 for a missing queue).

    Passive declarations: nothing is created. Each uses its own channel, because the broker
    closes a channel whose passive declare finds no queue.
    """
    names = (*work_queues(settings), dead_queue_name(settings.queue))
    connection = await connect_once(settings)
    depths: dict[str, int] = {}
    async with connection:
        for name in names:
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                depths[name] = 0
                continue
            depths[name] = queue.declaration_result.message_count or 0
            await channel.close()
    return depths
