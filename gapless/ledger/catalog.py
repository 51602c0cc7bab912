"""Reference data the issuing path reads for every message, cached: series and issuer profiles.

A series is never redefined and a profile version never changes, so both are cached for the
life of the process once seen (a series not found is not cached: it may be added later). What
does change is *which* profile is in force for a tenant (``gapless tenant set`` adds a version):
the cached answer is what the worker checks a message against, and every seal verifies it in
the database (the intake answers STALE when another version is in force); :meth:`refresh` then
reloads it.
"""

from __future__ import annotations

from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as nq
from gapless.ledger.series import series_spec
from gapless.ledger.tenants import Profile, profile_in_force, profile_version
from gapless.numbers import SeriesSpec


class Catalog:
    """Cached series and issuer profiles of one process (safe for any number of tasks)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._series: dict[tuple[str, str], SeriesSpec] = {}
        self._in_force: dict[str, Profile | None] = {}
        self._versions: dict[tuple[str, int], Profile] = {}

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
        if tenant in self._in_force:
            return self._in_force[tenant]
        return await self.refresh(tenant)

    async def refresh(self, tenant: str) -> Profile | None:
        """Reload which profile is in force (after a seal found another one)."""
        profile = await profile_in_force(self._db, tenant)
        self._in_force[tenant] = profile
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
