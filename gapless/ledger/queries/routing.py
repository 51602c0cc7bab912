"""Routing: the recipient answers cached for every worker (per integrator account), and a
tenant's default series.

Driver-level statements (psycopg parameters), run by gapless.ledger.database.Database in
autocommit: none is ever part of the transaction that seals a number.
"""

#: A cached recipient answer of one integrator account (:account, '' for the global one) younger
#: than :ttl_s seconds (no lock).
FRESH_RECIPIENT = """
    SELECT registered, aliases, despatch_registered, despatch_aliases FROM recipients
     WHERE account = %(account)s AND tax_id = %(tax_id)s
       AND checked_at > now() - make_interval(secs => %(ttl_s)s)
"""

#: Before routing a message: its invoice's state (a numbered one keeps its route) and the
#: account's cached recipient answer younger than :ttl_s seconds, in one round trip (no lock).
#: Always one row; its columns are NULL where there is no invoice or no fresh answer.
STATE_AND_RECIPIENT = """
    SELECT i.status, i.number, i.series, r.tax_id IS NOT NULL AS cached, r.registered,
           r.aliases, r.despatch_registered, r.despatch_aliases
      FROM (SELECT 1) AS one
      LEFT JOIN invoices i ON i.invoice_id = %(invoice_id)s AND i.tenant = %(tenant)s
      LEFT JOIN recipients r ON r.account = %(account)s AND r.tax_id = %(tax_id)s
                            AND r.checked_at > now() - make_interval(secs => %(ttl_s)s)
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
