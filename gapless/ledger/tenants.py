"""Issuer profiles: who issues a tenant's documents (the UBL-TR supplier party).

A tenant with a profile gets UBL-TR 2.1 documents; one without keeps the message's JSON. Profiles
are versioned and append-only: ``gapless tenant set`` adds a version when something changed, and
the version in force when an invoice's number is sealed is pinned on the invoice, so every resend
of that invoice renders the same supplier, whatever changes later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from gapless.documents import Issuer
from gapless.errors import GaplessError
from gapless.ledger.database import Database
from gapless.ledger.queries import tenants as q

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Profile:
    """One version of a tenant's issuer profile."""

    tenant: str
    version: int
    issuer: Issuer
    created_at: datetime


def profile_of(row: Any) -> Profile:
    issuer = Issuer(**{name: getattr(row, name) for name in q.PROFILE_FIELDS})
    return Profile(row.tenant, row.version, issuer, row.created_at)


async def set_profile(db: Database, tenant: str, issuer: Issuer) -> int | None:
    """Make ``issuer`` the tenant's profile: the new version, or None when the profile in force
    is identical already (nothing written)."""
    params = {"tenant": tenant, **{name: getattr(issuer, name) for name in q.PROFILE_FIELDS}}
    try:
        row = await db.one(q.SET_PROFILE, params)
    except psycopg.errors.UniqueViolation as exc:
        raise GaplessError(f"the profile of tenant {tenant!r} was changed at the same time; "
                           "run the command again") from exc
    return None if row is None else int(row.version)


async def profile_in_force(db: Database, tenant: str) -> Profile | None:
    """The tenant's newest profile version, or None (JSON documents)."""
    row = await db.one(q.PROFILE_IN_FORCE, {"tenant": tenant})
    return None if row is None else profile_of(row)


async def profile_version(db: Database, tenant: str, version: int) -> Profile | None:
    row = await db.one(q.PROFILE_VERSION, {"tenant": tenant, "version": version})
    return None if row is None else profile_of(row)


async def profiles_in_force(db: Database, tenant: str | None = None) -> list[Profile]:
    """The profile in force of every tenant that has one (or of ``tenant``); no lock."""
    rows = await db.all(q.PROFILES_IN_FORCE, {"tenant": tenant})
    return [profile_of(row) for row in rows]
