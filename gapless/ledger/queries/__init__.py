"""Every SQL statement gapless runs, named, with what it guarantees.

One module per role: ``config`` (cluster id, session setup), ``numbering`` (series, counters, the
reservation), ``invoices`` (the issuing lifecycle). Statements are plain strings with psycopg's
named parameters (``%(name)s``; a literal ``%`` is written ``%%``), bound by the driver and run
by :class:`gapless.ledger.database.Database`; never built from input.
"""
