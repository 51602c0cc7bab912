"""Which errors mean "a service cannot be reached", and how the one line reads (no I/O: the
errors are built as the drivers raise them; tests/integration/test_unreachable.py runs every
command against closed ports)."""

from __future__ import annotations

import aiormq
import httpx
import psycopg
import pytest
from psycopg import errors as pg_errors
from sqlalchemy.exc import OperationalError

from gapless.amqp.connection import BrokerUnavailable, broker_unavailable
from gapless.errors import NotMigratedError
from gapless.integrator.base import TransientIntegratorError
from gapless.ops import unreachable
from gapless.ops.audit import AuditError
from gapless.ops.unreachable import ServiceFailure
from gapless.settings import Settings
from gapless.urls import redact_url

SETTINGS = Settings(database_url="postgresql://app:s3cret-pw@db.example:6543/books",
                    amqp_url="amqp://app:s3cret-pw@mq.example:5673/prod",
                    integrator_url="http://int.example:8085")


def describe_unreachable(exc: BaseException, settings: Settings = SETTINGS
                         ) -> ServiceFailure | None:
    """The one line of ``exc`` for a command configured with ``settings``."""
    return unreachable.describe_unreachable(exc, settings)


def raised(exc: BaseException, cause: BaseException) -> BaseException:
    """``exc`` as if raised ``from cause``."""
    try:
        raise exc from cause
    except BaseException as caught:
        return caught


REFUSED = psycopg.OperationalError(
    'connection failed: connection to server at "10.0.0.1", port 6543 failed: Connection '
    "refused\n\tIs the server running on that host and accepting TCP/IP connections?")


def test_a_refused_database_names_postgresql_the_url_without_password_and_a_hint() -> None:
    failure = describe_unreachable(OperationalError("SELECT 1", {}, REFUSED))
    assert failure is not None
    assert failure.line() == (
        "cannot reach the database: PostgreSQL at postgresql://app:***@db.example:6543/books "
        "(connection refused); is PostgreSQL running? check GAPLESS_DATABASE_URL")
    # The raw driver error (gapless migrate connects with psycopg itself) reads the same.
    assert describe_unreachable(REFUSED) == failure


@pytest.mark.parametrize(("message", "expected", "hint"), [
    ('connection failed: connection to server at "h", port 1 failed: FATAL:  password '
     'authentication failed for user "app"', "refused the login", "user and password"),
    ('connection failed: connection to server at "h", port 1 failed: FATAL:  database "books" '
     "does not exist", "has no such database", "gapless migrate"),
    ("connection failed: connection to server at \"h\", port 1 failed: timeout expired",
     "(timeout expired)", "is PostgreSQL running?"),
])
def test_database_login_and_missing_database_get_their_own_hint(message: str, expected: str,
                                                                 hint: str) -> None:
    failure = describe_unreachable(psycopg.OperationalError(message))
    assert failure is not None
    assert expected in failure.summary
    assert hint in failure.hint


def test_a_terminated_backend_is_unreachable_but_a_statement_error_is_not() -> None:
    shutdown = pg_errors.AdminShutdown("terminating connection due to administrator command")
    assert describe_unreachable(OperationalError("SELECT 1", {}, shutdown)) is not None
    for statement_error in (pg_errors.LockNotAvailable("lock timeout"),
                            pg_errors.QueryCanceled("canceling statement")):
        assert describe_unreachable(OperationalError("SELECT 1", {}, statement_error)) is None
    not_migrated = raised(NotMigratedError("run gapless migrate"),
                          pg_errors.UndefinedTable("no table"))
    assert describe_unreachable(not_migrated) is None


def test_the_broker_failure_keeps_its_url_reason_and_hint() -> None:
    refused = aiormq.exceptions.AMQPConnectionError(111, "Connect call failed ('10.0.0.2', 5673)")
    made = broker_unavailable(SETTINGS.amqp_url, refused)
    assert str(made) == "cannot connect to RabbitMQ at amqp://app:***@mq.example:5673/prod " \
                        "(connection refused)"
    failure = describe_unreachable(raised(made, refused))
    assert failure is not None
    assert failure.line() == f"{made}; is RabbitMQ running? check GAPLESS_AMQP_URL"
    # aio-pika's own error, reaching the CLI without gapless's wrapping, reads the same.
    assert describe_unreachable(refused) == failure
    login = aiormq.exceptions.ProbableAuthenticationError("ACCESS_REFUSED - Login was refused")
    failure = describe_unreachable(login)
    assert failure is not None
    assert "user and password" in failure.hint


def test_the_integrator_is_recognised_through_the_adapter_and_the_audit() -> None:
    request = httpx.Request("GET", "http://int.example:8085/ledger")
    transport = raised(httpx.ConnectError("All connection attempts failed", request=request),
                       ConnectionRefusedError(111, "Connection refused"))
    ledger = raised(AuditError("cannot read the integrator's ledger"), transport)
    failure = describe_unreachable(ledger)
    assert failure is not None
    assert failure.line() == ("cannot reach the integrator at http://int.example:8085 "
                              "(connection refused); is the integrator running? check "
                              "GAPLESS_INTEGRATOR_URL")
    answered = TransientIntegratorError("lookup of PROBE0000000000: HTTP 503")
    failure = describe_unreachable(answered)
    assert failure is not None
    assert failure.summary == ("the integrator at http://int.example:8085 is not answering "
                               "(lookup of PROBE0000000000: HTTP 503)")
    # Another HTTP service failing is not the integrator's failure.
    elsewhere = httpx.ConnectError("refused", request=httpx.Request("GET", "http://other:1/"))
    assert describe_unreachable(elsewhere) is None


def test_only_service_errors_are_reported_as_such() -> None:
    assert describe_unreachable(ValueError("bad")) is None
    assert describe_unreachable(BrokerUnavailable("cannot connect", url="u", reason="r")) \
        is not None


def test_a_password_echoed_by_a_library_is_masked() -> None:
    echoed = psycopg.OperationalError("connection failed: bad option s3cret-pw")
    failure = describe_unreachable(echoed)
    assert failure is not None
    assert "s3cret-pw" not in failure.line()


def test_masking_leaves_the_url_alone_when_the_user_is_spelled_like_the_password() -> None:
    failure = describe_unreachable(aiormq.exceptions.AMQPConnectionError(
        "closed by guest"), Settings(amqp_url="amqp://guest:guest@127.0.0.1:2/"))
    assert failure is not None
    assert failure.summary == ("cannot connect to RabbitMQ at amqp://guest:***@127.0.0.1:2/ "
                               "(AMQPConnectionError: closed by ***)")


@pytest.mark.parametrize(("url", "shown"), [
    ("amqp://guest:pw@h:5672/", "amqp://guest:***@h:5672/"),
    ("postgresql://u:p%40ss@h/db?sslmode=require&password=x", "postgresql://u:***@h/db?"
     "sslmode=require&password=***"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("host=h password=x dbname=d", "host=h password=*** dbname=d"),
    ("postgresql://u:p@[::1:5/db", "postgresql://u:***@[::1:5/db"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
