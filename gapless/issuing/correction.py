"""Channel correction: the integrator refused a document because the customer's registration
changed between the recipient check and the send (an e-Arşiv to someone who has just become an
e-Fatura user, or the reverse). No operator is needed and every number stays accounted for. The
worker corrects what its sends meet; recovery marks what its resends meet (and corrects it):

1. the refused invoice is REJECTED with a reason that starts ``WRONG CHANNEL:`` (its number stays
   pinned, its document stored);
2. the recipient is asked again (the cache bypassed) and the stored message routed again
   (:mod:`gapless.issuing.routing`), without the routing's own earlier choices (series, the default
   profiles, the alias) but with the producer's;
3. the successor — the same message under the invoice id ``<invoice_id>~c1`` (``~c2`` for a
   correction of a correction…) — is stored and sealed in the right channel's series, in one
   statement (I2: its own number, gap-free);
4. the refused invoice is VOIDED with a reason naming its successor's number and invoice id
   (the I3 exception: both stay on record);
5. the caller sends the successor like any fresh claim.

Each step is idempotent, so a worker that dies anywhere in between leaves the delivery unacked
and its redelivery finishes the job: the refused invoice is found REJECTED with the
``WRONG CHANNEL:`` reason and the correction runs again — the successor's invoice id is fixed,
so the same successor row (and number) is found, never a second one. When the fresh answer
gives the same channel, or the producer's own profile contradicts it, there is nothing to
correct automatically: the invoice stays REJECTED for an operator.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from gapless.constants import Channel, Status
from gapless.documents import check_inputs
from gapless.errors import InvalidTransition, UnknownSeriesError
from gapless.issuing.routing import EFATURA_PROFILES, RecipientUnavailable, Router, RoutingRefused
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.invoices import Claim, Draft, intake, stored_payload, void
from gapless.ledger.queries import invoices as q
from gapless.message import (
    AnyMessage,
    DespatchMessage,
    InvalidMessage,
    InvoiceMessage,
    validate_message,
)
from gapless.settings import Settings

#: last_error of an invoice the integrator refused for its channel (the correction's marker).
WRONG_CHANNEL_PREFIX = "WRONG CHANNEL: "
#: Profiles routing chooses by itself (a producer's other profile is kept on a correction).
ROUTING_DEFAULTS = frozenset({EFATURA_PROFILES[0], "EARSIVFATURA"})
_SUCCESSOR_RE = re.compile(r"^(?P<base>.*)~c(?P<n>[0-9]+)$")
MAX_INVOICE_ID = 128


def successor_id(invoice_id: str) -> str:
    """The invoice id of a corrected invoice's successor: ``X`` → ``X~c1``, ``X~c1`` → ``X~c2``."""
    match = _SUCCESSOR_RE.match(invoice_id)
    if match is None:
        return f"{invoice_id}~c1"
    return f"{match['base']}~c{int(match['n']) + 1}"


@dataclass(frozen=True)
class Correction:
    """The successor, claimed for sending (``claim``), with its message."""

    claim: Claim
    message: AnyMessage
    successor_id: str
    voided_number: str


class NothingToCorrect(Exception):
    """The refused invoice stays REJECTED for an operator; :attr:`reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ChannelCorrector:
    """Corrects refused invoices of one worker process (see the module docstring)."""

    def __init__(self, db: Database, catalog: Catalog, router: Router,
                 settings: Settings) -> None:
        self._db = db
        self._catalog = catalog
        self._router = router
        self._settings = settings

    async def give_up(self, invoice_id: str, why: str, *, tenant: str) -> None:
        """The tenant's invoice stays REJECTED for an operator: its reason loses the correction's
        mark (so nobody tries again) and says why it was not corrected."""
        row = await self._db.one(q.CORRECTION_STATE, {"invoice_id": invoice_id, "tenant": tenant})
        if row is None or not (row.last_error or "").startswith(WRONG_CHANNEL_PREFIX):
            return
        refused = row.last_error[len(WRONG_CHANNEL_PREFIX):]
        await self._db.one(q.GIVE_UP_CORRECTION, {
            "invoice_id": invoice_id, "tenant": tenant,
            "reason": f"refused for its channel ({refused}); not corrected: {why}"[:2000]})

    async def waiting(self, batch: int) -> list[tuple[str, str]]:
        """(tenant, invoice_id) of the invoices refused for their channel and not corrected yet,
        oldest first."""
        rows = await self._db.all(q.WRONG_CHANNEL_REJECTED, {"batch": batch})
        return [(row.tenant, row.invoice_id) for row in rows]

    async def pending(self, invoice_id: str, *, tenant: str) -> bool:
        """Whether the tenant's invoice waits for a channel correction (REJECTED, marked)."""
        row = await self._db.one(q.CORRECTION_STATE, {"invoice_id": invoice_id, "tenant": tenant})
        return row is not None and row.status == Status.REJECTED.value and (
            row.last_error or "").startswith(WRONG_CHANNEL_PREFIX)

    async def correct(self, invoice_id: str, *, tenant: str) -> Correction:
        """Seal the successor of the tenant's REJECTED ``WRONG CHANNEL`` invoice and void the
        invoice (the successor is the same tenant's).

        Raises NothingToCorrect (it stays REJECTED), RecipientUnavailable (try again later:
        nothing changed), or ReservationLockTimeout.
        """
        row = await self._db.one(q.CORRECTION_STATE, {"invoice_id": invoice_id, "tenant": tenant})
        if row is None or row.number is None:
            raise NothingToCorrect("the invoice has no number")
        if row.status != Status.REJECTED.value or not (row.last_error or "").startswith(
                WRONG_CHANNEL_PREFIX):
            raise NothingToCorrect(f"the invoice is {row.status}, not refused for its channel")
        old = await self._catalog.series(row.tenant, row.series)
        successor = successor_id(invoice_id)
        if len(successor) > MAX_INVOICE_ID:
            raise NothingToCorrect("the successor's invoice id would be too long")
        try:
            message = _unrouted(stored_payload(row.payload), successor)
        except InvalidMessage as exc:
            raise NothingToCorrect(f"the stored message is refused now: {exc.reason}") from exc
        profile = await self._catalog.refresh(row.tenant)
        if profile is None:
            raise NothingToCorrect("the tenant has no issuer profile")
        await self._router.recipient(row.tenant, message.customer.tax_id, refresh=True)
        try:
            route = await self._router.route(message, profiled=True)
            check_inputs(route.message, profile.issuer)
        except (RoutingRefused, InvalidMessage, UnknownSeriesError) as exc:
            raise NothingToCorrect(f"the routed document is refused: {exc}") from exc
        if old is None or route.channel is old.channel or route.channel is Channel.ANY:
            raise NothingToCorrect("the integrator's fresh answer gives the same channel")
        draft = Draft(successor, row.tenant, route.series.code, row.priority,
                      route.message.payload())
        claim = await intake(self._db, draft, lease_s=self._settings.lease_s,
                             lock_timeout_ms=self._settings.lock_timeout_ms,
                             profile_version=profile.version)
        number = (claim.sending.number if claim.sending is not None
                  else await self._successor_number(successor, tenant))
        reason = (f"channel correction: the customer {_now_is(route.channel)}; succeeded by "
                  f"{number} (invoice {successor!r}, series {route.series.code})")
        with contextlib.suppress(InvalidTransition):  # voided already by a concurrent run
            await void(self._db, invoice_id, reason, tenant=tenant)
        return Correction(claim, route.message, successor, row.number)

    async def _successor_number(self, successor: str, tenant: str) -> str:
        found = await self._db.one(q.CORRECTION_STATE, {"invoice_id": successor, "tenant": tenant})
        assert found is not None  # intake stored it
        assert found.number is not None  # and sealed it
        return str(found.number)


def _unrouted(payload: dict[str, Any], invoice_id: str) -> InvoiceMessage:
    """The stored message as the producer sent it, for routing again: without the series, the
    alias and a profile that routing chose by itself; under the successor's invoice id."""
    data = dict(payload)
    data["invoice_id"] = invoice_id
    data.pop("series", None)
    if data.get("profile") in ROUTING_DEFAULTS:
        data.pop("profile")
    customer = data.get("customer")
    if isinstance(customer, dict):
        data["customer"] = {k: v for k, v in customer.items() if k != "alias"}
    message = validate_message(data)
    if isinstance(message, DespatchMessage):
        raise NothingToCorrect("a dispatch note keeps its number and alias: give it the right "
                               "customer.alias with gapless invoice retry --payload, or void it")
    return message


def _now_is(channel: Channel) -> str:
    return ("is now a registered e-Fatura user" if channel is Channel.EFATURA
            else "is no longer an e-Fatura user")


__all__ = ["WRONG_CHANNEL_PREFIX", "ChannelCorrector", "Correction", "NothingToCorrect",
           "RecipientUnavailable", "successor_id"]
