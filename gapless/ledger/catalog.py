"""Reference data the issuing path reads for every message, cached: series and issuer profiles.

A series is never redefined and a profile version never changes, so both are cached for the
life of the process once seen (a series not found is not cached: it may be added later). What
does change is *which* profile is in force for a tenant (``gapless tenant set`` adds a version):
the cached answer is what the worker checks a message against, and every seal verifies it in
the database (the intake answers STALE when another version is in force); :meth:`refresh` then
reloads it. A process that never seals (the API) reads the profile in force again once its
answer is ``profile_ttl_s`` old.

The tenant's default series per channel change with ``gapless series add --default``: they are
reused for ``DEFAULTS_TTL_S`` and then read again.

One read per key at a time: the tasks that miss the same key while it is being read (a worker's
deliveries in flight when it starts, or when a tenant's defaults expire) wait for that read
rather than each reading it (:class:`_Reads`). A read that fails fails its waiters, and the next
miss reads again; a waiter cancelled leaves the read to the others, and a reader cancelled
hands it to one of its waiters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar, cast

from gapless.constants import Channel
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as nq
from gapless.ledger.queries import routing as rq
from gapless.ledger.series import series_spec
from gapless.ledger.tenants import Profile, profile_in_force, profile_version
from gapless.numbers import SeriesSpec

#: How long a tenant's default series are reused by one process before they are read again.
DEFAULTS_TTL_S = 10.0

T = TypeVar("T")


class _Reads:
    """The reads in flight, by key: a caller that misses a key being read awaits that read (its
    result or its error) instead of starting another. The first caller reads in its own task
    (nothing outlives the callers); if it is cancelled, a waiter takes the read over."""

    def __init__(self) -> None:
        self._flying: dict[Hashable, asyncio.Future[Any]] = {}

    async def __call__(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        while True:
            flying = self._flying.get(key)
            if flying is None:
                return await self._lead(key, read)
            # Shielded: a waiter cancelled leaves the read (and the future) to the others.
            result = await asyncio.shield(flying)
            if result is not _TAKE_OVER:
                return cast(T, result)

    async def _lead(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        flying: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._flying[key] = flying
        try:
            result = await read()
        except asyncio.CancelledError:
            flying.set_result(_TAKE_OVER)  # the waiters, if any, read again
            raise
        except BaseException as exc:
            flying.set_exception(exc)
            flying.exception()  # retrieved: without waiters it is not logged
            raise
        else:
            flying.set_result(result)
            return result
        finally:
            del self._flying[key]


#: What a read's waiters get when its reader was cancelled: one of them reads again.
_TAKE_OVER = object()


class Catalog:
    """Cached series and issuer profiles of one process (safe for any number of tasks)."""

    def __init__(self, db: Database, *, profile_ttl_s: float | None = None) -> None:
        self._db = db
        self._profile_ttl_s = profile_ttl_s
        self._series: dict[tuple[str, str], SeriesSpec] = {}
        self._in_force: dict[str, tuple[float, Profile | None]] = {}
        self._versions: dict[tuple[str, int], Profile] = {}
        self._defaults: dict[str, tuple[float, dict[Channel, str]]] = {}
        self._reads = _Reads()

    async def series(self, tenant: str, code: str) -> SeriesSpec | None:
        """The series definition, or None when it does not exist (yet)."""
        spec = self._series.get((tenant, code))
        if spec is None:
            spec = await self._reads(("series", tenant, code),
                                     lambda: self._read_series(tenant, code))
        return spec

    async def _read_series(self, tenant: str, code: str) -> SeriesSpec | None:
        row = await self._db.one(nq.GET_SERIES, {"tenant": tenant, "code": code})
        if row is None:
            return None
        spec = self._series[(tenant, code)] = series_spec(row)
        return spec

    async def profile_in_force(self, tenant: str) -> Profile | None:
        """The tenant's issuer profile as last seen (None: it has none)."""
        seen = self._in_force.get(tenant)
        if seen is not None and (self._profile_ttl_s is None
                                 or time.monotonic() - seen[0] < self._profile_ttl_s):
            return seen[1]
        return await self._reads(("in force", tenant), lambda: self.refresh(tenant))

    async def refresh(self, tenant: str) -> Profile | None:
        """Reload which profile is in force (after a seal found another one): always a read of
        its own, never one already in flight, which may have begun before the change."""
        profile = await profile_in_force(self._db, tenant)
        self._in_force[tenant] = (time.monotonic(), profile)
        if profile is not None:
            self._versions[(tenant, profile.version)] = profile
        return profile

    async def profile(self, tenant: str, version: int) -> Profile:
        """One version of a tenant's profile (pinned on a sealed invoice)."""
        found = self._versions.get((tenant, version))
        if found is None:
            found = await self._reads(("version", tenant, version),
                                      lambda: self._read_profile(tenant, version))
        return found

    async def _read_profile(self, tenant: str, version: int) -> Profile:
        loaded = await profile_version(self._db, tenant, version)
        if loaded is None:  # the table is append-only: a pinned version always exists
            raise LookupError(f"tenant {tenant!r} has no profile version {version}")
        self._versions[(tenant, version)] = loaded
        return loaded

    async def defaults(self, tenant: str) -> dict[Channel, str]:
        """The tenant's default series per channel (re-read every DEFAULTS_TTL_S)."""
        cached = self._defaults.get(tenant)
        if cached is not None and time.monotonic() - cached[0] < DEFAULTS_TTL_S:
            return cached[1]
        return await self._reads(("defaults", tenant), lambda: self._read_defaults(tenant))

    async def _read_defaults(self, tenant: str) -> dict[Channel, str]:
        now = time.monotonic()
        rows = await self._db.all(rq.DEFAULT_SERIES, {"tenant": tenant})
        found = {Channel(row.channel): row.code for row in rows}
        self._defaults[tenant] = (now, found)
        return found

    async def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant has a series or an issuer profile (not cached: asked only of a
        message that names no series the tenant has)."""
        row = await self._db.one(rq.TENANT_EXISTS, {"tenant": tenant})
        return row is not None and bool(row.known)
