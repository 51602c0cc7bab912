"""The RabbitMQ nodes of ``GAPLESS_AMQP_URL`` and the connections that move between them.

``GAPLESS_AMQP_URL`` is one URL or several, separated by commas: the nodes of one cluster. Every
process connects to the first node that answers and, when its node goes, to the next one, in
turn (contract, "Beyond one machine").

* :func:`node_urls` splits the setting (:func:`gapless.urls.redact_url` shows it without
  any password).
* :class:`NodesConnection` is aio-pika's robust connection (channels, QoS, queues and consumers
  restored after a reconnect) whose every reconnection attempt takes the next node. The worker
  uses it: unacked deliveries die with their channel, the broker redelivers them, and the
  database makes a redelivery harmless.
* :func:`open_robust` and :func:`open_plain` try the nodes in turn for the first connection and
  raise one error naming all of them when none answers. Publishers use plain connections and
  open a fresh one (the next node) after any publish whose confirm did not arrive, see
  :mod:`gapless.amqp.publisher`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractConnection
from aio_pika.robust_connection import RobustConnection
from yarl import URL

from gapless.logging import get_logger
from gapless.urls import node_label, node_urls

log = get_logger(__name__)


#: Seconds to wait for one node to accept a connection.
CONNECT_TIMEOUT_S = 10.0


#: Seconds between two reconnection attempts of a robust connection (each to the next node).
RECONNECT_INTERVAL_S = 1.0


class NodesConnection(RobustConnection):
    """A robust connection that reconnects to the next node of the list at every attempt.

    aio-pika's robust connection reconnects to its one URL; this one keeps the list and, before
    each reconnection attempt after the first connection, moves on to the next node, so a lost
    node is left for the next one and a cluster is tried in turn until one answers. The rest
    (restoring channels, QoS, declared queues and consumers) is aio-pika's.
    """

    def __init__(self, urls: Sequence[str], *, start: int = 0, **kwargs: Any) -> None:
        self._nodes = [URL(url) for url in urls]
        self._node = start % len(self._nodes)
        self._attempted = False
        super().__init__(self._nodes[self._node], **kwargs)

    @property
    def url(self) -> URL:
        return self._nodes[self._node]

    @url.setter
    def url(self, value: URL) -> None:  # aio-pika sets it at start and on update_secret
        self._nodes[self._node] = value

    @property
    def node(self) -> str:
        """``host:port`` of the node this connection uses (or will try next)."""
        return node_label(self.url)

    # aio-pika's RobustConnection opens every transport (the first and each reconnection) in
    # this name-mangled method; the override turns to the next node before every attempt but
    # the first.
    async def _RobustConnection__connect_transport(self) -> None:
        if self._attempted and len(self._nodes) > 1:
            self._node = (self._node + 1) % len(self._nodes)
            log.info("amqp_trying_node", node=self.node)
        self._attempted = True
        await RobustConnection._RobustConnection__connect_transport(self)  # type: ignore[attr-defined]


async def open_robust(setting: str, *,
                      connect_timeout: float = CONNECT_TIMEOUT_S) -> NodesConnection:
    """A :class:`NodesConnection` to the first node of ``setting`` that answers.

    Raises the last node's error when none does (the caller words it, see
    :func:`gapless.amqp.publisher.broker_unavailable`).
    """
    urls = node_urls(setting)
    error: BaseException | None = None
    for start in range(len(urls)):
        connection = NodesConnection(urls, start=start, reconnect_interval=RECONNECT_INTERVAL_S)
        try:
            await connection.connect(timeout=connect_timeout)
        except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
            error = exc
            await connection.close()
            continue
        return connection
    assert error is not None
    raise error


async def open_plain(setting: str, *, connect_timeout: float = CONNECT_TIMEOUT_S,
                     start: int = 0) -> tuple[AbstractConnection, int]:
    """A plain connection (no reconnection) to the first node that answers, trying the nodes
    from ``start`` on in turn; (connection, index of its node). Raises the last error."""
    urls = node_urls(setting)
    error: BaseException | None = None
    for offset in range(len(urls)):
        index = (start + offset) % len(urls)
        try:
            return await aio_pika.connect(urls[index], timeout=connect_timeout), index
        except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
            error = exc
    assert error is not None
    raise error
