"""What a database error means for the connection and the caller: a lock wait that timed out,
the SQLSTATEs after which a connection must be discarded (the server shutting down or starting,
or read-only: a standby, such as a demoted primary), and whether the database is away at all
(:func:`is_database_unavailable`, which makes the worker pause).
"""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout
from sqlalchemy import exc as sa_exc
from sqlalchemy.exc import DBAPIError

LOCK_NOT_AVAILABLE = "55P03"


#: SQLSTATEs after which a connection must not be used again, though the driver may still
#: think it open: the server is shutting down (57P01 admin, 57P02 crash), is not accepting
#: connections yet (57P03), or is read-only (25006: a standby, e.g. an old primary that came
#: back demoted; its next statement would fail the same way).
DISCARD_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})


READ_ONLY_SQL_TRANSACTION = "25006"


def must_discard(exc: BaseException) -> bool:
    """The connection that raised ``exc`` must be thrown away (see DISCARD_SQLSTATES)."""
    return sqlstate(exc) in DISCARD_SQLSTATES


def is_read_only(exc: BaseException) -> bool:
    """The statement met a read-only server (SQLSTATE 25006): a standby, not the primary —
    during a failover, until every connection has found the promoted one."""
    return sqlstate(exc) == READ_ONLY_SQL_TRANSACTION


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE behind a SQLAlchemy/psycopg error, if any."""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None)


def is_lock_timeout(exc: BaseException) -> bool:
    """A lock wait ran past ``lock_timeout`` (SQLSTATE 55P03): the statement rolled back."""
    return (isinstance(exc, DBAPIError | psycopg.Error)
            and sqlstate(exc) == LOCK_NOT_AVAILABLE)


def is_database_unavailable(exc: BaseException) -> bool:
    """True for a lost or refused database connection, a pool timeout, a server shutting down or
    starting up, and a read-only server (SQLSTATE 25006: during a failover, a standby reached
    before the promoted one is found).

    These pass by themselves: the delivery is requeued (nothing was committed, or what was is
    idempotent) and the consumer pauses until the database takes writes again. A lock timeout is
    not one of them (the statement ran and waited; the caller decides).
    """
    if is_lock_timeout(exc):
        return False
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    if must_discard(exc):
        return True
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout,
                            sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.TimeoutError, sa_exc.DisconnectionError, ConnectionError,
                            TimeoutError))
