"""How the worker classifies failures that are not the integrator's."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout
from sqlalchemy import exc as sa_exc

from gapless.ledger.sqlstates import is_lock_timeout, must_discard


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
