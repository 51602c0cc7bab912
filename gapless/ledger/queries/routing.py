"""Routing: the recipient answers cached for every worker (per integrator account), and a
tenant's default series.

Driver-level statements (psycopg parameters), run by gapless.ledger.database.Database in
autocommit: none is ever part of the transaction that seals a number.
"""

#: A cached recipient answer of one integrator account (:account, '' for the global one) younger
#: than :ttl_s seconds, and its age in seconds by the database's clock (no lock).
FRESH_RECIPIENT = """
    SELECT registered, aliases, despatch_registered, despatch_aliases,
           extract(epoch FROM now() - checked_at)::float8 AS age_s
      FROM recipients
     WHERE account = %(account)s AND tax_id = %(tax_id)s
       AND checked_at > now() - make_interval(secs => %(ttl_s)s)
"""

#: Keep an account's newest answer for a tax id (one row lock, released by its own commit).
STORE_RECIPIENT = """
    INSERT INTO recipients (account, tax_id, registered, aliases, despatch_registered,
                            despatch_aliases, checked_at)
    VALUES (%(account)s, %(tax_id)s, %(registered)s, %(aliases)s, %(despatch_registered)s,
            %(despatch_aliases)s, now())
    ON CONFLICT (account, tax_id) DO UPDATE
       SET registered = EXCLUDED.registered, aliases = EXCLUDED.aliases,
           despatch_registered = EXCLUDED.despatch_registered,
           despatch_aliases = EXCLUDED.despatch_aliases, checked_at = EXCLUDED.checked_at
    RETURNING tax_id
"""

#: The tenant's default series per channel (no lock).
DEFAULT_SERIES = """
    SELECT channel, code FROM series WHERE tenant = %(tenant)s AND is_default
"""

#: Whether a tenant is known: it has a series or an issuer profile (two index probes).
TENANT_EXISTS = """
    SELECT EXISTS (SELECT 1 FROM series WHERE tenant = %(tenant)s)
        OR EXISTS (SELECT 1 FROM tenant_profiles WHERE tenant = %(tenant)s) AS known
"""
