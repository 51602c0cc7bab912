"""How the worker classifies failures that are not the integrator's."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout
from sqlalchemy import exc as sa_exc

from gapless.db import is_lock_timeout


def is_database_unavailable(exc: BaseException) -> bool:
    """True for a lost or refused database connection, a pool timeout, an admin shutdown.

    These pass by themselves: the delivery is requeued (nothing was committed, or what was is
    idempotent) and the worker keeps consuming. A lock timeout is not one of them (the statement
    ran and waited; the caller decides).
    """
    if is_lock_timeout(exc):
        return False
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout,
                            sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.TimeoutError, sa_exc.DisconnectionError, ConnectionError,
                            TimeoutError))
