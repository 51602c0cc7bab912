"""HTTP adapter for the integrator API of ARCHITECTURE.md (served by `gapless mock-integrator`).

Every answer is classified once, here, into the outcomes the worker and recovery act on:

=====================================  ======================================================
answer                                  outcome
=====================================  ======================================================
201 ``{ref}``                           ``Receipt``
409, body ``invoice_id`` is ours        ``DuplicateOfMine`` (an earlier send of ours arrived)
409, another ``invoice_id``             ``DuplicateOfAnother`` (alarm: the number is taken)
422 ``{reason}``                        ``PermanentRejection``
any other 4xx                           ``PermanentRejection`` (the reason names the status)
5xx, timeout, refused, dropped          ``TransientIntegratorError`` (outcome unknown: the
                                        document may have been accepted; lookup settles it)
=====================================  ======================================================

The document and the customer's tax id are never logged or put into an error message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from gapless.integrator.base import (
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    PermanentRejection,
    Receipt,
    TransientIntegratorError,
)

if TYPE_CHECKING:
    from gapless.settings import Settings


#: Connections per httpx client. httpcore's pool does O(connections²) work on every request
#: start and end, so one client of 128 connections spends milliseconds of CPU per call; shards
#: of 8 keep that small (measured in docs/benchmarks.md, "Mock integrator").
SHARD_CONNECTIONS = 8


class HttpIntegrator:
    """``Integrator`` over HTTP with pooled keep-alive connections (safe to share between tasks).

    Timeouts: ``settings.integrator_timeout_s`` for connect, read, write and pool wait each.
    Pool: ``settings.integrator_max_connections`` connections in all, split over httpx clients of
    at most ``SHARD_CONNECTIONS``; each call goes to the client with the fewest calls in flight.
    """

    def __init__(self, settings: Settings) -> None:
        total = settings.integrator_max_connections
        shards = -(-total // SHARD_CONNECTIONS)
        self._clients = [
            httpx.AsyncClient(
                base_url=settings.integrator_url,
                timeout=httpx.Timeout(settings.integrator_timeout_s),
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                headers={"user-agent": "gapless"},
            )
            for size in (total // shards + (1 if i < total % shards else 0)
                         for i in range(shards))
        ]
        self._in_flight = [0] * shards

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One HTTP exchange on the least busy shard; httpx errors propagate."""
        shard = min(range(len(self._clients)), key=self._in_flight.__getitem__)
        self._in_flight[shard] += 1
        try:
            return await self._clients[shard].request(method, path, **kwargs)
        finally:
            self._in_flight[shard] -= 1

    async def send(self, document: Document) -> Receipt:
        """POST the document under its number. Raises the classified error on any other outcome."""
        payload = {"tenant": document.tenant, "number": document.number,
                   "invoice_id": document.invoice_id, "document": document.document}
        try:
            response = await self._request("POST", "/invoices", json=payload)
        except httpx.TransportError as exc:
            raise TransientIntegratorError(
                f"send of {document.number}: {type(exc).__name__} (outcome unknown)") from exc
        status = response.status_code
        if status == 201:
            ref = _json_field(response, "ref")
            if ref is None:
                raise TransientIntegratorError(f"send of {document.number}: 201 without a ref")
            return Receipt(document.tenant, document.number, document.invoice_id, ref)
        if status == 409:
            holder = _json_field(response, "invoice_id")
            if holder is None:
                raise TransientIntegratorError(
                    f"send of {document.number}: 409 without the holder's invoice_id")
            if holder == document.invoice_id:
                ref = _json_field(response, "ref") or ""
                raise DuplicateOfMine(
                    Receipt(document.tenant, document.number, document.invoice_id, ref))
            raise DuplicateOfAnother(document.number, holder)
        if status == 422:
            raise PermanentRejection(_json_field(response, "reason") or _detail(response))
        if 400 <= status < 500:
            raise PermanentRejection(f"HTTP {status}: {_detail(response)}")
        raise TransientIntegratorError(f"send of {document.number}: HTTP {status}")

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Ask whether ``number`` is accepted: its receipt, or None (404). Transient otherwise."""
        path = f"/invoices/{quote(tenant, safe='')}/{quote(number, safe='')}"
        try:
            response = await self._request("GET", path)
        except httpx.TransportError as exc:
            raise TransientIntegratorError(
                f"lookup of {number}: {type(exc).__name__}") from exc
        if response.status_code == 404:
            return None
        if response.status_code == 200:
            invoice_id = _json_field(response, "invoice_id")
            ref = _json_field(response, "ref")
            if invoice_id is not None and ref is not None:
                return Receipt(tenant, number, invoice_id, ref)
        raise TransientIntegratorError(f"lookup of {number}: HTTP {response.status_code}")

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


def _json_field(response: httpx.Response, name: str) -> str | None:
    try:
        body: Any = response.json()
    except ValueError:
        return None
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def _detail(response: httpx.Response) -> str:
    """A short, single-line reason from an error body.

    Validation errors (``{"detail": [{"loc": ..., "msg": ...}]}``) are reduced to field and
    message: their ``input`` would echo the document back.
    """
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            where = ".".join(str(part) for part in detail[0].get("loc", ()))
            return f"{where}: {detail[0].get('msg', 'invalid')}"[:200]
        for key in ("detail", "error", "reason"):
            if isinstance(body.get(key), str):
                return str(body[key])[:200]
    text = response.text.strip()
    return text.splitlines()[0][:200] if text else "no reason given"
