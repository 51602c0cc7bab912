"""Cluster configuration."""

#: The cluster id recorded by `gapless migrate` (one row). A driver-level statement.
GET_CLUSTER_ID = "SELECT cluster_id FROM gapless_config"

#: Whether this connection's server takes writes (a primary, not a standby; what libpq's
#: ``target_session_attrs=read-write`` asks too): a paused worker asks it before it consumes
#: again. Reads nothing, locks nothing.
WRITABLE = "SELECT current_setting('transaction_read_only') = 'off' AS writable"

#: What ``gapless doctor`` reads about replication, as this session's commits see it: whether the
#: server is a standby, the commit level and the synchronous standbys asked for (settings of this
#: role and database included), the role (pg_stat_replication hides a standby's state from
#: roles without pg_read_all_stats), and every connected standby with its state and sync_state.
REPLICATION = """
    SELECT pg_is_in_recovery() AS in_recovery,
           current_setting('synchronous_commit') AS synchronous_commit,
           current_setting('synchronous_standby_names') AS standby_names,
           current_user AS role,
           (SELECT coalesce(json_agg(json_build_object(
                       'name', application_name, 'state', state, 'sync_state', sync_state)
                       ORDER BY application_name), '[]')
              FROM pg_stat_replication) AS standbys
"""

#: The server's version string (``15.4 (Debian 15.4-1)``), for ``gapless doctor``'s postgres
#: line. A driver-level statement; reads nothing, locks nothing.
SERVER_VERSION = "SHOW server_version"


#: ``gapless migrate``'s session lock: one migration at a time per database (held until
#: MIGRATE_UNLOCK, across the migrations' own transactions).
MIGRATE_LOCK = "SELECT pg_advisory_lock(%(key)s)"
MIGRATE_UNLOCK = "SELECT pg_advisory_unlock(%(key)s)"
#: The same lock for one transaction (building a database from schema/current/).
MIGRATE_XACT_LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"

#: Pin the cluster id on first migrate; a later one keeps the stored id (compared by the caller).
PIN_CLUSTER_ID = """
    INSERT INTO gapless_config (cluster_id) VALUES (%(cluster_id)s)
    ON CONFLICT (singleton) DO NOTHING
"""

#: Whether the database holds any table or function of its own (no lock).
SCHEMA_OCCUPIED = """
    SELECT EXISTS (SELECT FROM pg_class WHERE relnamespace = 'public'::regnamespace)
        OR EXISTS (SELECT FROM pg_proc WHERE pronamespace = 'public'::regnamespace)
"""
