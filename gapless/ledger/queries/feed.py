"""The commit-ordered event feed: positioning committed events, reading them by ``sequence_id``.

Writers commit events without a position and without a lock. ``gapless_feed_assign()``
(schema/current/feed.sql) gives the committed ones their positions afterwards, a batch at a time,
under ``invoice_events_feed``, which only it takes and which is released only after the batch is
visible. So once a reader sees ``sequence_id`` N, every position below N is visible to it too, and
``sequence_id > %(cursor)s`` never skips an event that is positioned later.
The page statements only read: no locks beyond the snapshot, and they never wait for writers.
"""

#: Position the committed events still waiting (at most %(batch)s), in a transaction of its own, and
#: say how many. Waits at most %(wait_ms)s for another position-giver; never for a writer.
ASSIGN = """
    SELECT set_config('lock_timeout', %(wait_ms)s || 'ms', true),
           gapless_feed_assign(%(batch)s) AS done
"""

#: What the feed is waiting for (gapless status, docs/api.md): committed events without a position
#: yet, and the session that holds the position lock, if any, with how long it has held it.
BACKLOG = """
    SELECT (SELECT count(*) FROM invoice_events WHERE sequence_id IS NULL) AS waiting,
           (SELECT max(sequence_id) FROM invoice_events) AS top,
           holder.pid AS holder_pid,
           extract(epoch FROM now() - holder.xact_start)::float8 AS holder_s,
           holder.state AS holder_state
      FROM (SELECT 1) AS one
      LEFT JOIN LATERAL (
            SELECT a.pid, a.xact_start, a.state
              FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation' AND l.granted
               AND l.relation = 'invoice_events_feed'::regclass
             LIMIT 1) AS holder ON true
"""

_COLUMNS = """sequence_id, invoice_id, tenant, series, kind, from_status, to_status, number,
           attempts, detail, actor, created_at"""

#: The next page of the whole feed: committed events after %(cursor)s, in commit order, at most
#: %(limit)s rows. Index scan on invoice_events_sequence_id_key; no lock.
EVENTS_AFTER = f"""
    SELECT {_COLUMNS}
      FROM invoice_events
     WHERE sequence_id IS NOT NULL AND sequence_id > %(cursor)s
     ORDER BY sequence_id
     LIMIT %(limit)s
"""  # noqa: S608 - constant column list, values are bound

#: The next page of one tenant's feed: as EVENTS_AFTER, filtered by tenant.
#: Index scan on invoice_events_tenant_sequence_idx (tenant, sequence_id); no lock.
TENANT_EVENTS_AFTER = f"""
    SELECT {_COLUMNS}
      FROM invoice_events
     WHERE tenant = %(tenant)s AND sequence_id IS NOT NULL AND sequence_id > %(cursor)s
     ORDER BY sequence_id
     LIMIT %(limit)s
"""  # noqa: S608 - constant column list, values are bound
