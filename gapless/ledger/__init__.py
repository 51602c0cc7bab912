"""The ledger: the only code that holds SQL or a database connection.

Database handles, connection info and SQL states; migrations; series, counters, invoices,
tenants, the catalog, the feed, GİB verdict bookkeeping; and every statement, named, in
``gapless.ledger.queries``. PostgreSQL is the source of truth: every promise about numbers is
kept by a statement here (or by the SQL in ``schema/current/``).
"""
