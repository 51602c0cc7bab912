"""The queue topology (contract), declared idempotently by whoever starts first — the worker,
``gapless publish``, the API — with the same arguments:

* classic mode: queue ``<prefix>`` with ``x-max-priority: 4``; quorum mode: quorum queues
  ``<prefix>`` and ``<prefix>.user`` (at-least-once dead-lettering, a delivery limit);
* fanout exchange ``<prefix>.dlx`` bound to queue ``<prefix>.dead``.

And where a message of a given priority goes (:func:`work_queue`), and the AMQP priority of
``user``/``batch`` (:func:`amqp_priority`).
"""

from __future__ import annotations

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractQueue,
)
from pamqp.common import FieldValue

from gapless.constants import (
    MAX_PRIORITY,
    PRIORITIES,
    PRIORITY_USER,
    dead_exchange_name,
    dead_queue_name,
    user_queue_name,
)
from gapless.errors import ConfigurationError
from gapless.settings import DEFAULT_DELIVERY_LIMIT, QueueType, Settings


def main_queue_arguments(prefix: str, queue_type: QueueType = "classic", *,
                         delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> dict[str, FieldValue]:
    """The arguments of the work queues; every declarer must use exactly these.

    classic: one queue ``<prefix>`` with ``x-max-priority: 4``. quorum: replicated quorum
    queues ``<prefix>`` and ``<prefix>.user`` with at-least-once dead-lettering (which needs
    ``x-overflow: reject-publish``) and a delivery limit, so a message that never reaches an
    outcome (one that kills its worker, say) ends in ``<prefix>.dead`` instead of looping.
    """
    if queue_type == "quorum":
        return {"x-queue-type": "quorum", "x-dead-letter-exchange": dead_exchange_name(prefix),
                "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
                "x-delivery-limit": delivery_limit}
    return {"x-max-priority": MAX_PRIORITY, "x-dead-letter-exchange": dead_exchange_name(prefix)}


def dead_queue_arguments(queue_type: QueueType = "classic") -> dict[str, FieldValue]:
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else {}


def work_queues(settings: Settings) -> tuple[str, ...]:
    """The queues a worker consumes, user work first: ``(<prefix>.user, <prefix>)`` in quorum
    mode, ``(<prefix>,)`` in classic mode (priorities inside one queue)."""
    if settings.queue_type == "quorum":
        return (user_queue_name(settings.queue), settings.queue)
    return (settings.queue,)


def work_queue(settings: Settings, priority: int | None) -> str:
    """Where a message of this AMQP priority goes: in quorum mode user work (4 and above) to
    ``<prefix>.user``, the rest to ``<prefix>``; in classic mode everything to ``<prefix>``."""
    if settings.queue_type == "quorum" and (priority or 0) >= PRIORITY_USER:
        return user_queue_name(settings.queue)
    return settings.queue


async def declare_topology(channel: AbstractChannel, settings: Settings) -> list[AbstractQueue]:
    """Declare the work queues (:func:`work_queues`), exchange ``<prefix>.dlx`` and queue
    ``<prefix>.dead``; the work queues, user work first.

    Idempotent: the worker, ``gapless publish`` and the API all call it with the same arguments.
    Raises ConfigurationError when one exists with other arguments (the broker refuses to
    change them, and closes the channel), e.g. a classic queue of the prefix in quorum mode.
    """
    prefix, queue_type = settings.queue, settings.queue_type
    try:
        dead_exchange = await channel.declare_exchange(
            dead_exchange_name(prefix), aio_pika.ExchangeType.FANOUT, durable=True)
        dead_queue = await channel.declare_queue(dead_queue_name(prefix), durable=True,
                                                 arguments=dead_queue_arguments(queue_type))
        await dead_queue.bind(dead_exchange, routing_key="")
        arguments = main_queue_arguments(prefix, queue_type,
                                         delivery_limit=settings.delivery_limit)
        return [await channel.declare_queue(name, durable=True, arguments=arguments)
                for name in work_queues(settings)]
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise ConfigurationError(
            f"queue or exchange of prefix {prefix!r} exists with different settings "
            f"({exc}); is GAPLESS_QUEUE_TYPE={queue_type} what it was declared with? delete "
            f"it or choose another GAPLESS_QUEUE") from exc


def amqp_priority(priority: str | int | None, default: int | None) -> int | None:
    """``"user"`` → 4, ``"batch"`` → 1, an int as given (0..255), None → ``default``."""
    if priority is None:
        return default
    if isinstance(priority, str):
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be 'user' or 'batch', got {priority!r}")
        return PRIORITIES[priority]
    if not 0 <= priority <= 255:
        raise ValueError(f"an AMQP priority is 0..255, got {priority}")
    return priority
