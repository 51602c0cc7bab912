"""What RabbitMQ says of gapless's queues: ready-message counts over AMQP (passive declarations,
current), and the management HTTP API's statistics of one queue (unacked deliveries, ready
messages per priority; published every few seconds, so they may lag the AMQP counts).

Reads only: nothing is declared, created or consumed. The management reader never raises for the
API being absent, unreachable or odd: it returns a note saying why there is no figure.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiormq

from gapless.amqp.connection import connect_once
from gapless.amqp.topology import work_queues
from gapless.constants import PRIORITY_USER, dead_queue_name, user_queue_name
from gapless.settings import Settings
from gapless.urls import split_urls

#: The management API's port on the broker's host when no URL is given.
MANAGEMENT_PORT = 15672
#: How long one request to the management API may take.
MANAGEMENT_TIMEOUT_S = 2.0
NO_MANAGEMENT_NOTE = "per-priority depth needs the management plugin"
#: The management API publishes a queue's statistics periodically (RabbitMQ's
#: collect_statistics_interval, 5 s by default): a queue declared or changed since has none yet.
NO_STATISTICS_NOTE = ("per-priority depth not published yet: the management API refreshes "
                      "queue statistics every few seconds")


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


@dataclass(frozen=True)
class QueueStatistics:
    """The management API's last statistics of one queue."""

    ready: int
    unacked: int
    #: Ready messages as the contract's two classes (``user``, ``batch``); None when the broker
    #: reports no per-priority lengths.
    by_priority: dict[str, int] | None


def management_target(amqp_url: str, management_url: str | None
                      ) -> tuple[str, tuple[str, str]]:
    """The management API base URL and its credentials.

    By default: the broker's host on port 15672, with the AMQP URL's user and password (the
    management UI uses the same users). An explicit ``--management-url`` may carry its own.
    """
    amqp = urllib.parse.urlsplit(split_urls(amqp_url)[0])
    user = urllib.parse.unquote(amqp.username or "guest")
    password = urllib.parse.unquote(amqp.password or "guest")
    if management_url:
        given = urllib.parse.urlsplit(management_url)
        if given.username is not None:
            user = urllib.parse.unquote(given.username)
            password = urllib.parse.unquote(given.password or "")
        netloc = given.netloc.rsplit("@", 1)[-1]
        return urllib.parse.urlunsplit((given.scheme or "http", netloc, given.path.rstrip("/"),
                                        "", "")), (user, password)
    host = amqp.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{MANAGEMENT_PORT}", (user, password)


def amqp_vhost(amqp_url: str) -> str:
    """The virtual host of the (first) AMQP URL: its path, unquoted; ``/`` when it has none."""
    path = urllib.parse.urlsplit(split_urls(amqp_url)[0]).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def split_priorities(priority_lengths: dict[str, Any]) -> dict[str, int]:
    """RabbitMQ's per-priority lengths as the contract's two classes (absent priority = batch)."""
    user = batch = 0
    for priority, length in priority_lengths.items():
        if int(priority) >= PRIORITY_USER:
            user += int(length)
        else:
            batch += int(length)
    return {"user": user, "batch": batch}


async def management_queue(settings: Settings, management_url: str | None,
                           name: str) -> dict[str, Any] | str:
    """What the management API says of queue ``name`` (a JSON object), or a note saying why it
    says nothing. One GET, bounded by MANAGEMENT_TIMEOUT_S."""
    import httpx

    base, auth = management_target(settings.amqp_url, management_url)
    vhost = urllib.parse.quote(amqp_vhost(settings.amqp_url), safe="")
    queue = urllib.parse.quote(name, safe="")
    try:
        async with httpx.AsyncClient(timeout=MANAGEMENT_TIMEOUT_S, auth=auth) as client:
            response = await client.get(f"{base}/api/queues/{vhost}/{queue}")
    except httpx.HTTPError:
        return f"{NO_MANAGEMENT_NOTE} ({base} unreachable)"
    if response.status_code == 404:
        return f"the management API at {base} does not know queue {name!r} yet"
    if response.status_code != 200:
        return f"{NO_MANAGEMENT_NOTE} ({base} answered {response.status_code})"
    try:
        info = response.json()
    except ValueError:
        return f"{NO_MANAGEMENT_NOTE} ({base} did not answer JSON)"
    if not isinstance(info, dict):
        return f"{NO_MANAGEMENT_NOTE} ({base} did not answer a JSON object)"
    return info


async def read_management(settings: Settings, management_url: str | None
                          ) -> QueueStatistics | str:
    """The statistics of the main queue from the management API, or a note.

    What the real API answers (checked against RabbitMQ 3.10 in tests/integration/
    test_status_management.py): ``backing_queue_status.priority_lengths`` counts the *ready*
    messages of each priority (unacked ones are not in it), and all of a queue's statistics are
    absent until the API's next statistics round after the queue was declared — then there is
    nothing to report yet, which is not the same as zero.
    """
    info = await management_queue(settings, management_url, settings.queue)
    if isinstance(info, str):
        return info
    backing = info.get("backing_queue_status")
    if not isinstance(backing, dict) or "messages_ready" not in info:
        return NO_STATISTICS_NOTE
    lengths = backing.get("priority_lengths")
    by_priority = split_priorities(lengths) if isinstance(lengths, dict) else None
    return QueueStatistics(int(info["messages_ready"]),
                           int(info.get("messages_unacknowledged") or 0), by_priority)


async def read_quorum_unacked(settings: Settings, management_url: str | None) -> int | str:
    """Unacked deliveries of both work queues of quorum mode from the management API, or a
    note saying why there is no figure."""
    unacked = 0
    for name in (user_queue_name(settings.queue), settings.queue):
        info = await management_queue(settings, management_url, name)
        if isinstance(info, str):
            return info
        if "messages_unacknowledged" not in info:
            return NO_STATISTICS_NOTE
        unacked += int(info["messages_unacknowledged"] or 0)
    return unacked
