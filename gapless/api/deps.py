"""What the routes take from the running application (FastAPI dependencies and helpers)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlencode

from fastapi import Request

from gapless.amqp.publisher import Publisher
from gapless.api.lookups import KnownLookups
from gapless.api.observe import ApiMetrics
from gapless.ledger import feed
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.settings import Settings

#: Host header names links are always built from (besides GAPLESS_API_TRUSTED_HOSTS).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: A Host header: a name or IPv4 address, or a bracketed IPv6 address; an optional port.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9.-]+|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])"
                   r"(?::(?P<port>\d{1,5}))?")


# The dependencies are coroutines: FastAPI runs a plain function in its thread pool, a thread hop
# per dependency and request for an attribute read (measured: 1.43-1.47 -> 1.13-1.30 ms of API
# CPU per POST, bench/api.py).
async def database(request: Request) -> Database:
    """The API's database (actor ``api``: the events it causes say so); several reads of one
    request that must agree run in ``Database.snapshot()``."""
    return cast("Database", request.app.state.db)


async def publisher(request: Request) -> Publisher:
    """The confirmed publisher opened by the lifespan."""
    return cast("Publisher", request.app.state.publisher)


async def catalog(request: Request) -> Catalog:
    """The API's cached series, default series and issuer profiles (for the checks a message
    passes before it is published)."""
    return cast("Catalog", request.app.state.catalog)


async def settings(request: Request) -> Settings:
    """The API process's settings."""
    return cast("Settings", request.app.state.settings)


async def metrics(request: Request) -> ApiMetrics:
    """The API's Prometheus metrics."""
    return cast("ApiMetrics", request.app.state.metrics)


@dataclass(frozen=True)
class Services:
    """What the issuing routes use, opened by the lifespan: one dependency instead of five
    (FastAPI resolves each dependency anew at every request)."""

    db: Database
    publisher: Publisher
    catalog: Catalog
    settings: Settings
    metrics: ApiMetrics
    #: What the database holds of the invoices single POSTs name, read together
    #: (:mod:`gapless.api.lookups`).
    known: KnownLookups


async def services(request: Request) -> Services:
    """The API's database, publisher, catalog, settings and metrics (:class:`Services`)."""
    return cast("Services", request.app.state.services)


def iso(moment: Any) -> str | None:
    return None if moment is None else feed.iso_utc(moment)


@dataclass(frozen=True)
class Links:
    """Where the links in answers (``Location``, ``status_url``, ``next``, ``poll_more``) point.

    Never at a host a client merely names: the configured public URL when there is one; else
    the request's scheme and Host when the Host's name is trusted (loopback names and
    ``GAPLESS_API_TRUSTED_HOSTS``); else the address the connection came in on.
    """

    public_url: str
    trusted_hosts: frozenset[str]

    @classmethod
    def from_settings(cls, settings: Settings) -> Links:
        named = {host.strip().lower().strip("[]") for host in settings.api_trusted_hosts.split(",")}
        return cls(settings.api_public_url, LOOPBACK_HOSTS | (named - {""}))

    def base(self, request: Request) -> str:
        """The absolute URL the API's paths are appended to (no trailing '/')."""
        if self.public_url:
            return self.public_url
        scope = request.scope
        scheme = scope.get("scheme", "http")
        root = scope.get("root_path", "")
        host = _HOST.fullmatch(request.headers.get("host", ""))
        if host is not None:
            name = (host["ipv6"] or host["name"]).lower()
            if name in self.trusted_hosts:
                port = f":{host['port']}" if host["port"] else ""
                return f"{scheme}://{_bracketed(name)}{port}{root}"
        server = scope.get("server")
        if not server:
            return f"{scheme}://localhost{root}"
        address, port_number = server
        default = {"http": 80, "https": 443}.get(scheme)
        port = "" if port_number in (None, default) else f":{port_number}"
        return f"{scheme}://{_bracketed(address)}{port}{root}"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def links(request: Request) -> Links:
    """How the API's links are built (:class:`Links`)."""
    return cast("Links", request.app.state.links)


def url(request: Request, path: str, query: Mapping[str, Any] | None = None) -> str:
    """The absolute URL of ``path`` (and ``query``) for a link in an answer to ``request``."""
    tail = f"?{urlencode(query)}" if query else ""
    return f"{links(request).base(request)}{path}{tail}"


def status_url(request: Request, invoice_id: str) -> str:
    return url(request, f"/v1/invoices/{quote(invoice_id, safe='')}")
