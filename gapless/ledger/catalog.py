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
"""

from __future__ import annotations

import time

from gapless.constants import Channel
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as nq
from gapless.ledger.queries import routing as rq
from gapless.ledger.series import series_spec
from gapless.ledger.tenants import Profile, profile_in_force, profile_version
from gapless.numbers import SeriesSpec

#: How long a tenant's default series are reused by one process before they are read again.
DEFAULTS_TTL_S = 10.0


class Catalog:
    """Cached series and issuer profiles of one process (safe for any number of tasks)."""

    def __init__(self, db: Database, *, profile_ttl_s: float | None = None) -> None:
        self._db = db
        self._profile_ttl_s = profile_ttl_s
        self._series: dict[tuple[str, str], SeriesSpec] = {}
        self._in_force: dict[str, tuple[float, Profile | None]] = {}
        self._versions: dict[tuple[str, int], Profile] = {}
        self._defaults: dict[str, tuple[float, dict[Channel, str]]] = {}

    async def series(self, tenant: str, code: str) -> SeriesSpec | None:
        """The series definition, or None when it does not exist (yet)."""
        key = (tenant, code)
        spec = self._series.get(key)
        if spec is None:
            row = await self._db.one(nq.GET_SERIES, {"tenant": tenant, "code": code})
            if row is None:
                return None
            spec = self._series[key] = series_spec(row)
        return spec

    async def profile_in_force(self, tenant: str) -> Profile | None:
        """The tenant's issuer profile as last seen (None: it has none)."""
        seen = self._in_force.get(tenant)
        if seen is not None and (self._profile_ttl_s is None
                                 or time.monotonic() - seen[0] < self._profile_ttl_s):
            return seen[1]
        return await self.refresh(tenant)

    async def refresh(self, tenant: str) -> Profile | None:
        """Reload which profile is in force (after a seal found another one)."""
        profile = await profile_in_force(self._db, tenant)
        self._in_force[tenant] = (time.monotonic(), profile)
        if profile is not None:
            self._versions[(tenant, profile.version)] = profile
        return profile

    async def profile(self, tenant: str, version: int) -> Profile:
        """One version of a tenant's profile (pinned on a sealed invoice)."""
        key = (tenant, version)
        found = self._versions.get(key)
        if found is None:
            loaded = await profile_version(self._db, tenant, version)
            if loaded is None:  # the table is append-only: a pinned version always exists
                raise LookupError(f"tenant {tenant!r} has no profile version {version}")
            found = self._versions[key] = loaded
        return found

    async def defaults(self, tenant: str) -> dict[Channel, str]:
        """The tenant's default series per channel (re-read every DEFAULTS_TTL_S)."""
        now = time.monotonic()
        cached = self._defaults.get(tenant)
        if cached is not None and now - cached[0] < DEFAULTS_TTL_S:
            return cached[1]
        rows = await self._db.all(rq.DEFAULT_SERIES, {"tenant": tenant})
        found = {Channel(row.channel): row.code for row in rows}
        self._defaults[tenant] = (now, found)
        return found

    async def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant has a series or an issuer profile (not cached: asked only of a
        message that names no series the tenant has)."""
        row = await self._db.one(rq.TENANT_EXISTS, {"tenant": tenant})
        return row is not None and bool(row.known)
