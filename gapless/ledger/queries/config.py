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

