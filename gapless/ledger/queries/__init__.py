"""Every SQL statement gapless runs, named, with what it guarantees.

One module per role: ``config`` (cluster id, session setup), ``numbering`` (series, counters, the
reservation), ``invoices`` (the issuing lifecycle). Statements are ``sqlalchemy.text`` with bound
parameters only.
"""
