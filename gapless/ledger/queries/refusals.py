"""Messages the worker refused before any number was used (dead-lettered with a reason).

A refusal is kept per (tenant, invoice_id), the newest reason winning, and each one writes a
``refused`` event into ``invoice_events`` as every state change does: committed without a
position and without a lock, positioned afterwards by ``gapless_feed_assign()`` in commit order
(schema/current/feed.sql), so a poller of the feed never misses it. No counter and no invoice row
is read or written.
"""

#: Keep the refusal (the newest reason and moment win) and write its feed event, in one statement
#: (one transaction). The event has no invoice (invoice_pk NULL) and, when the message named no
#: series and routing chose none, no series.
RECORD_REFUSAL = """
    WITH kept AS (
        INSERT INTO refusals (tenant, invoice_id, series, reason)
        VALUES (%(tenant)s, %(invoice_id)s, %(series)s, %(reason)s)
        ON CONFLICT (tenant, invoice_id) DO UPDATE
           SET series = EXCLUDED.series, reason = EXCLUDED.reason,
               refused_at = EXCLUDED.refused_at
        RETURNING tenant, invoice_id, series, reason, refused_at
    )
    INSERT INTO invoice_events (invoice_pk, invoice_id, tenant, series, kind, from_status,
                                to_status, detail, actor, created_at)
    SELECT NULL, invoice_id, tenant, series, 'refused', NULL, 'REFUSED', reason, %(actor)s,
           refused_at
      FROM kept
    RETURNING id
"""

#: One tenant's refusal of an invoice_id (primary key; no lock).
GET_REFUSAL = """
    SELECT tenant, invoice_id, series, reason, refused_at
      FROM refusals WHERE tenant = %(tenant)s AND invoice_id = %(invoice_id)s
"""

#: The tenants holding a refusal of this invoice_id, sorted (no lock).
REFUSAL_TENANTS = """
    SELECT tenant FROM refusals WHERE invoice_id = %(invoice_id)s ORDER BY tenant
"""
