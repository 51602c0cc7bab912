"""The document an invoice sends: its stored bytes on a resend, else rendered from the invoice.

Rendering is a pure function of what the seal fixed — the stored payload, the number, the UUID,
the seal moment in the series' time zone and the issuer profile version pinned on the invoice —
so a process that re-renders an invoice whose first send crashed before its outcome was
recorded (recovery, a lease takeover) produces the very bytes the first sender sent. Once an
outcome is recorded the bytes are stored with it, and every later send sends those.

* a tenant with an issuer profile (pinned ``profile_version``): UBL-TR 2.1 XML, an Invoice or a
  DespatchAdvice by the stored message (:func:`gapless.documents.render`);
* without one: the message's JSON, canonical (sorted keys, compact, UTF-8, numbers exact), so
  the bytes do not depend on where the payload came from (the message or the database's jsonb).

Whatever goes wrong making a document from what is stored — a payload the checks refuse now, a
renderer's own exception of any kind — is a :class:`RenderError` naming it: the caller parks the
invoice for an operator with that reason. Only the reads of the series and the issuer profile
raise anything else (a database error, which leaves the invoice to recovery).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from gapless.constants import Channel
from gapless.documents import DESPATCH_FORMAT, Issuer, check_inputs, render
from gapless.documents import FORMAT as UBL_FORMAT
from gapless.integrator.base import MEDIA_JSON, MEDIA_XML, Document
from gapless.issuing.outcome import failure
from gapless.ledger.catalog import Catalog
from gapless.ledger.invoices import Sending
from gapless.message import (
    AnyMessage,
    DespatchMessage,
    InvalidMessage,
    jsontext,
    validate_message,
)
from gapless.numbers import SeriesSpec

JSON_FORMAT = "json/1"
T = TypeVar("T")


def _route(series: SeriesSpec, sending: Sending,
           message: AnyMessage | None) -> tuple[str | None, str | None]:
    """The channel and alias the document was routed to (pinned in its payload at the seal, or
    in ``message`` when the caller has it: see :meth:`Renderer.document`): none for a series
    without routing; an e-Arşiv invoice has no alias; a dispatch note's is the receiver's
    e-İrsaliye alias or GİB's box."""
    if series.channel is Channel.ANY or sending.profile_version is None:
        return None, None
    if series.channel is Channel.EARSIV:
        return Channel.EARSIV.value, None
    if message is not None:
        return series.channel.value, message.customer.alias
    customer = sending.payload.get("customer")
    alias = customer.get("alias") if isinstance(customer, dict) else None
    return series.channel.value, alias if isinstance(alias, str) else None


class RenderError(Exception):
    """The invoice's document cannot be made from what is stored (its number is sealed: an
    operator fixes the payload with ``gapless invoice retry --payload``, or voids it)."""


def canonical_json(payload: dict[str, Any]) -> bytes:
    """The JSON document of a tenant without an issuer profile (deterministic bytes)."""
    return jsontext.dumps(payload, sort_keys=True).encode()


class Renderer:
    """Makes the :class:`~gapless.integrator.base.Document` of an invoice under a lease."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    async def document(self, sending: Sending, message: AnyMessage | None = None) -> Document:
        """The stored bytes if the invoice sent a document before, else a fresh rendering.

        ``message``: the validated message when the caller has it and it *is* the stored payload
        (the worker, for a draft it has just created), already checked with
        :func:`~gapless.documents.check_inputs` against the pinned profile (the intake seals
        only under the profile version the caller checked), to save validating and checking it
        again. Raises RenderError when the stored payload cannot make the document.
        """
        series = await self.catalog.series(sending.tenant, sending.series)
        if series is None:  # invoices reference their series: it cannot be missing
            raise RenderError(f"series {sending.series!r} of tenant {sending.tenant!r} is gone")
        channel, alias = _route(series, sending, message)
        stored = sending.document
        if stored is not None:
            return Document(sending.tenant, sending.number, sending.invoice_id, sending.uuid,
                            stored.body, stored.media_type, stored.format, stored.sha256,
                            stored=True, channel=channel, alias=alias)
        if sending.profile_version is None:
            body, media_type, fmt = _made(canonical_json, sending.payload), MEDIA_JSON, JSON_FORMAT
        else:
            checked, body = await self._ubl(sending, series, message)
            media_type = MEDIA_XML
            fmt = DESPATCH_FORMAT if isinstance(checked, DespatchMessage) else UBL_FORMAT
        return Document.of(tenant=sending.tenant, number=sending.number,
                           invoice_id=sending.invoice_id, uuid=sending.uuid, body=body,
                           media_type=media_type, format=fmt, channel=channel, alias=alias)

    async def _ubl(self, sending: Sending, series: SeriesSpec,
                   message: AnyMessage | None) -> tuple[AnyMessage, bytes]:
        """The checked message and its UBL-TR document (an Invoice or a DespatchAdvice)."""
        assert sending.profile_version is not None
        profile = await self.catalog.profile(sending.tenant, sending.profile_version)
        checked = message or _made(_checked, sending.payload, profile.issuer)
        return checked, _made(lambda: render(
            checked, number=sending.number, uuid=uuid.UUID(sending.uuid),
            sealed_at=sending.sealed_at, tz=series.tz, issuer=profile.issuer))


def _checked(payload: dict[str, Any], issuer: Issuer) -> AnyMessage:
    """The stored message, checked again against the pinned issuer profile."""
    try:
        message = validate_message(payload)
        check_inputs(message, issuer)
    except InvalidMessage as exc:
        raise RenderError(f"the stored message cannot make a UBL-TR document: "
                          f"{exc.reason}") from exc
    return message


def _made(make: Callable[..., T], *args: Any) -> T:
    """``make(*args)``, any exception it raises a RenderError (rendering is pure: what fails
    once fails every time, so the invoice waits for an operator rather than a retry)."""
    try:
        return make(*args)
    except RenderError:
        raise
    except Exception as exc:
        raise RenderError(f"the document cannot be rendered: {failure(exc)}") from exc
