"""A service that cannot be reached — PostgreSQL, RabbitMQ, the integrator — said in one line.

:func:`describe_unreachable` recognises the drivers' connection errors anywhere in an exception's
causes and names the service, its URL without the password, what happened and what to check.
Pure: it inspects the exception and the settings it is given, and touches no network.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gapless.settings import Settings


@dataclass(frozen=True)
class ServiceFailure:
    """A service that could not be reached, said in one line: ``summary; hint``.

    ``url`` never carries a password.
    """

    service: str  # PostgreSQL | RabbitMQ | integrator
    url: str
    summary: str
    reason: str
    hint: str

    def line(self) -> str:
        return f"{self.summary}; {self.hint}"


DATABASE_HINT = "is PostgreSQL running? check GAPLESS_DATABASE_URL"
INTEGRATOR_HINT = "is the integrator running? check GAPLESS_INTEGRATOR_URL"


def integrator_hint(settings: Settings | None) -> str:
    """:data:`INTEGRATOR_HINT`, naming the variable of the configured adapter's endpoint
    (``GAPLESS_NILVERA_URL`` for the Nilvera adapter)."""
    if settings is None:
        return INTEGRATOR_HINT
    from gapless.integrator.base import endpoint

    return f"is the integrator running? check {endpoint(settings)[1]}"
#: SQLSTATE classes and codes of a connection that failed or was lost (not of a statement):
#: connection exception, operator intervention (shutdown, crash, cannot connect now), invalid
#: authorization, invalid catalog name (no such database).
_CONNECTION_SQLSTATES = ("08", "57P", "28", "3D000")


def describe_unreachable(exc: BaseException, settings: Settings | None
                         ) -> ServiceFailure | None:
    """The failure of PostgreSQL, RabbitMQ or the integrator behind ``exc``, or None.

    Looks through the causes of ``exc`` (``raise … from``), so a gapless error raised from a
    driver's connection error counts as well. Generic on purpose: any command that reaches
    PostgreSQL through psycopg/SQLAlchemy, RabbitMQ through aio-pika, or the integrator through
    its adapter gets this report without code of its own. ``settings`` are those the failing
    code used (None: unknown, the line then names the environment variable instead of the URL);
    any password they hold is masked in the line.
    """
    chain = list(_causes(exc))
    for link in chain:
        failure = (_postgres(link, settings) or _rabbitmq(link, settings)
                   or _integrator(link, chain, settings))
        if failure is not None:
            return _scrubbed(failure, settings)
    return None


def _causes(exc: BaseException, *, every_context: bool = False) -> Iterator[BaseException]:
    """``exc`` and its causes; with ``every_context`` also the contexts a library hid with
    ``raise … from None`` (to read the OS error under a transport error, never to classify)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        hidden = link.__suppress_context__ and not every_context
        link = link.__cause__ or (None if hidden else link.__context__)


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (empty for blank text)."""
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _postgres(link: BaseException, settings: Settings | None) -> ServiceFailure | None:
    import psycopg
    from sqlalchemy.exc import DBAPIError

    error = getattr(link, "orig", None) if isinstance(link, DBAPIError) else link
    if not isinstance(error, psycopg.Error):
        return None
    invalidated = isinstance(link, DBAPIError) and link.connection_invalidated
    state = error.sqlstate
    if not invalidated and not (isinstance(error, psycopg.OperationalError) and (
            state is None or state.startswith(_CONNECTION_SQLSTATES))):
        return None  # a statement's error (lock timeout, cancelled query…), not the connection
    from gapless.urls import redact_url

    url = redact_url(settings.database_url) if settings else "GAPLESS_DATABASE_URL"
    detail = first_line(str(error)) or type(error).__name__
    detail = re.sub(r"^connection failed:\s*", "", detail)
    at_server = re.search(r"connection to server (?:at|on socket) .*? failed:\s*(.*)$", detail)
    if at_server:
        detail = at_server.group(1)
    detail = re.sub(r"^(?:FATAL|ERROR):\s*", "", detail)
    if (state or "").startswith("28") or re.search(
            r"authentication failed|role .* does not exist|pg_hba\.conf", detail):
        return ServiceFailure(
            "PostgreSQL", url, f"cannot connect to the database: PostgreSQL at {url} refused "
            f"the login ({detail})", detail,
            "check the user and password in GAPLESS_DATABASE_URL")
    if state == "3D000" or re.search(r"database .* does not exist", detail):
        return ServiceFailure(
            "PostgreSQL", url, f"cannot connect to the database: PostgreSQL at {url} has no such "
            f"database ({detail})", detail,
            "run `gapless migrate` (it creates the database) or check GAPLESS_DATABASE_URL")
    reason = _lower_first(detail)
    return ServiceFailure("PostgreSQL", url,
                          f"cannot reach the database: PostgreSQL at {url} ({reason})", reason,
                          DATABASE_HINT)


def _rabbitmq(link: BaseException, settings: Settings | None) -> ServiceFailure | None:
    module = type(link).__module__
    if not module.startswith(("aiormq", "aio_pika", "gapless.amqp")):
        return None
    import aiormq

    from gapless.amqp.connection import BROKER_HINT, BrokerUnavailable, broker_unavailable
    from gapless.urls import redact_url

    if isinstance(link, BrokerUnavailable):
        unavailable = link
    elif isinstance(link, aiormq.exceptions.AMQPConnectionError):
        unavailable = broker_unavailable(settings.amqp_url if settings else "", link)
    elif module.startswith(("aiormq", "aio_pika")) and isinstance(
            link, ConnectionError | RuntimeError) and "closed" in str(link).lower():
        url = redact_url(settings.amqp_url) if settings else "GAPLESS_AMQP_URL"
        reason = first_line(str(link)) or type(link).__name__
        return ServiceFailure("RabbitMQ", url, f"lost the connection to RabbitMQ at {url} "
                              f"({reason})", reason, BROKER_HINT)
    else:
        return None
    return ServiceFailure("RabbitMQ", unavailable.url, str(unavailable), unavailable.reason,
                          unavailable.hint)


def _integrator(link: BaseException, chain: list[BaseException],
                settings: Settings | None) -> ServiceFailure | None:
    """The integrator adapter's transport failure (aiohttp under TransientIntegratorError), or an
    httpx transport error of a request to the integrator's origin."""
    import aiohttp
    import httpx

    from gapless.integrator.base import TransientIntegratorError
    from gapless.urls import redact_url

    if not isinstance(link, httpx.TransportError | TransientIntegratorError):
        return None
    from gapless.integrator.base import endpoint

    integrator_url, variable = endpoint(settings) if settings else ("", "GAPLESS_INTEGRATOR_URL")
    if isinstance(link, httpx.TransportError) and not _same_origin(link, integrator_url):
        return None  # another HTTP service; the integrator is the only one commands need
    url = redact_url(integrator_url) if settings else variable
    below = chain[chain.index(link):]
    transport = next((e for e in below if isinstance(
        e, httpx.TransportError | aiohttp.ClientError | TimeoutError)), None)
    if transport is None:  # the adapter's own words (an HTTP 5xx, the breaker open)
        reason = first_line(str(link)) or type(link).__name__
        return ServiceFailure("integrator", url,
                              f"the integrator at {url} is not answering ({reason})", reason,
                              integrator_hint(settings))
    code = next((e.errno for e in _causes(transport, every_context=True)
                 if isinstance(e, OSError) and e.errno), None)
    if isinstance(transport, httpx.TimeoutException | TimeoutError):
        reason = "no answer in time"
    elif code is not None:
        import os

        reason = os.strerror(code).lower()
    else:
        reason = f"{type(transport).__name__}: {first_line(str(transport))}".rstrip(": ")
    return ServiceFailure("integrator", url, f"cannot reach the integrator at {url} ({reason})",
                          reason, integrator_hint(settings))


def _same_origin(error: Any, url: str) -> bool:
    try:
        requested = error.request.url
    except RuntimeError:  # no request attached: cannot tell, assume the integrator's
        return True
    wanted = urllib.parse.urlsplit(url)
    return bool(requested.host == (wanted.hostname or "") and (requested.port or (
        443 if requested.scheme == "https" else 80)) == (wanted.port or (
            443 if wanted.scheme == "https" else 80)))


def _scrubbed(failure: ServiceFailure, settings: Settings | None) -> ServiceFailure:
    """The failure with any configured password masked wherever a library may have echoed it
    (passwords shorter than 4 characters cannot be masked without garbling the line)."""
    if settings is None:
        return failure
    summary, reason = failure.summary, failure.reason
    for url in (settings.database_url, settings.amqp_url, settings.integrator_url):
        try:
            password = urllib.parse.urlsplit(url).password
        except ValueError:
            continue
        for secret in {password or "", urllib.parse.unquote(password or "")}:
            if len(secret) >= 4:  # the redacted URL itself is left alone (a user may be
                # spelled like the password)
                summary = failure.url.join(part.replace(secret, "***")
                                           for part in summary.split(failure.url))
                reason = reason.replace(secret, "***")
    return ServiceFailure(failure.service, failure.url, summary, reason, failure.hint)
