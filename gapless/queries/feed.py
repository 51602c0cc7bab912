"""The commit-ordered event feed: reading ``invoice_events`` by ``sequence_id``.

``sequence_id`` is assigned at commit, one transaction at a time, under the commit lock
(``invoice_events_commit_lock``, see schema/sql/0001_initial.up.sql); the lock is released only
after the commit is visible. So once a reader sees ``sequence_id`` N, every committed row below N is
visible to it too, and ``sequence_id > :cursor`` never skips a row that commits later.
These statements only read: no locks beyond the snapshot, and they never wait for writers.
"""

from sqlalchemy import text

_COLUMNS = """sequence_id, invoice_id, tenant, series, kind, from_status, to_status, number,
           attempts, detail, actor, created_at"""

#: The next page of the whole feed: committed events after :cursor, in commit order, at most
#: :limit rows. Index scan on invoice_events_sequence_id_key; no lock.
EVENTS_AFTER = text(f"""
    SELECT {_COLUMNS}
      FROM invoice_events
     WHERE sequence_id IS NOT NULL AND sequence_id > :cursor
     ORDER BY sequence_id
     LIMIT :limit
""")  # noqa: S608 - constant column list, values are bound

#: The next page of one tenant's feed: as EVENTS_AFTER, filtered by tenant.
#: Index scan on invoice_events_tenant_sequence_idx (tenant, sequence_id); no lock.
TENANT_EVENTS_AFTER = text(f"""
    SELECT {_COLUMNS}
      FROM invoice_events
     WHERE tenant = :tenant AND sequence_id IS NOT NULL AND sequence_id > :cursor
     ORDER BY sequence_id
     LIMIT :limit
""")  # noqa: S608 - constant column list, values are bound
