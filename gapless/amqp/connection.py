"""Connections to RabbitMQ: a robust connection for long-running consumers (it moves to the next
node of ``GAPLESS_AMQP_URL`` when its node goes) and a plain one for short-lived callers, and the
one error every caller reports when no node answers (:class:`BrokerUnavailable`, the URL without
its password).

While a connection is attempted, aio-pika's and aiormq's own log records are held back: a
failed attempt is reported once, by the caller, and a successful one passes them on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import aiormq
from aio_pika.abc import (
    AbstractConnection,
)

from gapless.amqp.nodes import NodesConnection, open_plain, open_robust
from gapless.errors import GaplessError
from gapless.settings import Settings
from gapless.urls import redact_url

#: What to check when RabbitMQ cannot be reached (every "broker away" message says it).
BROKER_HINT = "is RabbitMQ running? check GAPLESS_AMQP_URL"


class BrokerUnavailable(GaplessError):
    """RabbitMQ cannot be reached at GAPLESS_AMQP_URL; start it or fix the URL.

    ``url`` is the URL without its password; ``reason`` says what the connection attempt met,
    in a few words; ``hint`` what to check.
    """

    def __init__(self, message: str, *, url: str = "", reason: str = "",
                 hint: str = BROKER_HINT) -> None:
        super().__init__(message)
        self.url = url
        self.reason = reason
        self.hint = hint


def broker_failure(exc: BaseException) -> tuple[str, str]:
    """(reason, hint) for a failed connection to RabbitMQ, each a few words on one line."""
    if isinstance(exc, (aiormq.exceptions.ProbableAuthenticationError,
                        aiormq.exceptions.AuthenticationError)):
        return ("the broker refused the login",
                "check the user and password in GAPLESS_AMQP_URL")
    if isinstance(exc, aiormq.exceptions.InvalidFrameError) and "Connection.Close" in str(exc):
        return ("the broker closed the connection while opening it",
                "check the virtual host of GAPLESS_AMQP_URL and the user's permissions on it")
    if isinstance(exc, TimeoutError):
        return "no answer in time", "is RabbitMQ running and reachable? check GAPLESS_AMQP_URL"
    code = getattr(exc, "errno", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    if isinstance(code, int) and code in errno.errorcode:
        return os.strerror(code).lower(), BROKER_HINT
    text = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return reason, BROKER_HINT


def broker_unavailable(amqp_url: str, exc: BaseException) -> BrokerUnavailable:
    """The error to raise when a connection to ``amqp_url`` could not be opened."""
    url = redact_url(amqp_url)
    reason, hint = broker_failure(exc)
    return BrokerUnavailable(f"cannot connect to RabbitMQ at {url} ({reason})", url=url,
                             reason=reason, hint=hint)


_LIBRARY_LOGGERS = ("aiormq", "aio_pika")


@dataclass
class _Attempt:
    active: bool = True
    records: list[logging.LogRecord] = field(default_factory=list)


_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("gapless_broker_connect", default=None)


class _HoldDuringAttempt(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        attempt = _ATTEMPT.get()
        if attempt is None or not attempt.active:
            return True
        attempt.records.append(record)
        return False


_HOLD = _HoldDuringAttempt()


@contextlib.contextmanager
def library_logs_held() -> Iterator[None]:
    """Hold the libraries' log records of this task until the block ends: passed on when it
    succeeds (or at debug level), dropped when it raises."""
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in _LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            if _HOLD not in logger.filters:
                logger.addFilter(_HOLD)
    attempt = _Attempt()
    token = _ATTEMPT.set(attempt)
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        # Tasks started inside the block share this object: they log normally from now on.
        attempt.active = False
        _ATTEMPT.reset(token)
        if succeeded or logging.getLogger().isEnabledFor(logging.DEBUG):
            for record in attempt.records:
                logging.getLogger(record.name).handle(record)


async def connect(settings: Settings) -> NodesConnection:
    """A robust connection to the first node of ``GAPLESS_AMQP_URL`` that answers; it reconnects
    by itself, to the next node in turn, and restores declared topology and consumers.

    BrokerUnavailable when no node answers (with no library log lines).
    """
    try:
        with library_logs_held():
            return await open_robust(settings.amqp_url)
    except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
        raise broker_unavailable(settings.amqp_url, exc) from exc


async def connect_once(settings: Settings) -> AbstractConnection:
    """A plain connection for a short task (no reconnection) to the first node that answers;
    BrokerUnavailable when none does (with no library log lines)."""
    try:
        with library_logs_held():
            connection, _node = await open_plain(settings.amqp_url)
            return connection
    except (aiormq.exceptions.AMQPError, OSError, TimeoutError) as exc:
        raise broker_unavailable(settings.amqp_url, exc) from exc
