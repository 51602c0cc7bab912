"""Issuer profiles (``tenant_profiles``): versioned, append-only, the newest in force."""

#: The profile fields, in table order (after tenant and version).
PROFILE_FIELDS = ("tax_id", "name", "tax_office", "street", "district", "city", "country",
                  "postal_zone", "email")
_COLUMNS = "tenant, version, " + ", ".join(PROFILE_FIELDS) + ", created_at"

#: The profile in force for a tenant (its newest version), or no row. Index scan, no lock.
PROFILE_IN_FORCE = f"""
    SELECT {_COLUMNS} FROM tenant_profiles
     WHERE tenant = %(tenant)s ORDER BY version DESC LIMIT 1
"""  # noqa: S608 - constant column list, values are bound

#: One version of a tenant's profile (immutable once written). No lock.
PROFILE_VERSION = f"""
    SELECT {_COLUMNS} FROM tenant_profiles WHERE tenant = %(tenant)s AND version = %(version)s
"""  # noqa: S608 - constant column list, values are bound

#: Set a tenant's profile: a new version unless the one in force is identical (then no row).
#: Two concurrent sets of one tenant: the second fails on the primary key (try again).
SET_PROFILE = f"""
    WITH latest AS (
        SELECT * FROM tenant_profiles WHERE tenant = %(tenant)s ORDER BY version DESC LIMIT 1
    )
    INSERT INTO tenant_profiles (tenant, version, {", ".join(PROFILE_FIELDS)})
    SELECT %(tenant)s, coalesce((SELECT version FROM latest), 0) + 1,
           %(tax_id)s, %(name)s, %(tax_office)s, %(street)s, %(district)s, %(city)s,
           %(country)s, %(postal_zone)s, %(email)s
     WHERE NOT EXISTS (
        SELECT FROM latest
         WHERE ({", ".join(PROFILE_FIELDS)}) IS NOT DISTINCT FROM
               (%(tax_id)s, %(name)s, %(tax_office)s, %(street)s, %(district)s, %(city)s,
                %(country)s, %(postal_zone)s, %(email)s))
    RETURNING version
"""  # noqa: S608 - constant column list, values are bound

#: The profile in force of every tenant (or one), with how many versions it has had. No lock.
PROFILES_IN_FORCE = f"""
    SELECT DISTINCT ON (tenant) {_COLUMNS}
      FROM tenant_profiles
     WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
     ORDER BY tenant, version DESC
"""  # noqa: S608 - constant column list, values are bound
