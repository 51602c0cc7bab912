"""Every SQL statement gapless runs, named, with what it guarantees.

One module per role:

- ``config``: the cluster id, whether the server takes writes, what ``gapless doctor`` reads
  about replication;
- ``numbering``: series, counters and the reservation;
- ``invoices``: the issuing lifecycle (intake, claim, outcome, recovery's claims, operator
  actions);
- ``routing``: the cached recipient answers and a tenant's default series;
- ``gib``: GİB's verdict after acceptance (recovery's questions and their answers);
- ``tenants``: issuer profiles;
- ``refusals``: messages the worker refused before any number, and their feed events;
- ``feed``: positioning committed events and reading them in order;
- ``api``: the HTTP API's statements that are not domain operations;
- ``status``: what ``gapless status`` and ``gapless demo`` count;
- ``audit``: the set-based checks of I1–I3 and I7;
- ``chain``: what ``gapless chain verify`` reads.

Statements are plain strings with psycopg's named parameters (``%(name)s``; a literal ``%`` is
written ``%%``), bound by the driver and run by :class:`gapless.ledger.database.Database`; never
built from input.
"""
