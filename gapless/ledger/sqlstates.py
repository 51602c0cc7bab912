"""What a PostgreSQL error means for the connection and the caller, by SQLSTATE: a lock wait
that timed out, and the states after which a connection must be discarded (the server shutting
down or starting, or read-only: a standby, such as a demoted primary).
"""

from __future__ import annotations

import psycopg
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
