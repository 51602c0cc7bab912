"""How the worker classifies failures that are not the integrator's."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def is_database_unavailable(exc: BaseException) -> bool:
    """True for a lost or refused database connection, a pool timeout, an admin shutdown.

    These pass by themselves: the delivery is requeued (nothing was committed, or what was is
    idempotent) and the worker keeps consuming.
    """
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError,
                            sa_exc.TimeoutError, sa_exc.DisconnectionError, ConnectionError,
                            TimeoutError))
