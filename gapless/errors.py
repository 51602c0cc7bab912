"""One exception hierarchy: each class says what went wrong and what to do about it."""

from __future__ import annotations


class GaplessError(Exception):
    """Base of every error gapless raises on purpose."""


class ConfigurationError(GaplessError):
    """A setting is invalid or disagrees with the database; fix the configuration, then restart."""


class ClusterMismatchError(ConfigurationError):
    """GAPLESS_CLUSTER_ID differs from the cluster id stored in the database."""

    def __init__(self, configured: int, stored: int) -> None:
        super().__init__(
            f"GAPLESS_CLUSTER_ID is {configured} but this database belongs to cluster {stored}; "
            f"set GAPLESS_CLUSTER_ID={stored} or point GAPLESS_DATABASE_URL at the right database"
        )
        self.configured = configured
        self.stored = stored


class NotMigratedError(ConfigurationError):
    """The database has no gapless schema (or an old one); run ``gapless migrate``."""


class IrreversibleMigration(GaplessError):
    """A downgrade would have to step back past a forward-only migration (one without a down
    file); restore a backup taken before it instead."""


class SeriesError(GaplessError):
    """A series definition is invalid or unknown."""


class UnknownSeriesError(SeriesError):
    def __init__(self, tenant: str, series: str) -> None:
        super().__init__(f"unknown series {series!r} for tenant {tenant!r}; define it with "
                         "`gapless series add`")
        self.tenant = tenant
        self.series = series


class ReservationLockTimeout(GaplessError):
    """A counter or invoice row stayed locked longer than ``lock_timeout_ms``.

    Nothing was consumed (the transaction rolled back). Retry later; if it persists, look for a
    long transaction holding the counter (``pg_stat_activity``) — the lock must never outlive a
    reservation.
    """


class InvoiceNotFound(GaplessError):
    def __init__(self, invoice_id: str) -> None:
        super().__init__(f"no invoice with invoice_id {invoice_id!r}")
        self.invoice_id = invoice_id


class AmbiguousInvoice(GaplessError):
    """An invoice_id named alone is held by several tenants (it is unique per tenant only):
    name the tenant."""

    def __init__(self, invoice_id: str, tenants: list[str]) -> None:
        super().__init__(f"invoice_id {invoice_id!r} is held by tenants {', '.join(tenants)}; "
                         "name one with --tenant")
        self.invoice_id = invoice_id
        self.tenants = tenants


class InvalidTransition(GaplessError):
    """The requested operation does not apply to the invoice's current status."""


class InvalidFeedRequest(GaplessError):
    """A feed request's cursor or limit is not usable (not an integer, negative, or too large).

    Fix the request; the message says which parameter and the accepted range.
    """
