"""Cluster configuration."""

#: The cluster id recorded by `gapless migrate` (one row). A driver-level statement.
GET_CLUSTER_ID = "SELECT cluster_id FROM gapless_config"

#: Whether this connection's server takes writes (a primary, not a standby; what libpq's
#: ``target_session_attrs=read-write`` asks too): a paused worker asks it before it consumes
#: again. Reads nothing, locks nothing.
WRITABLE = "SELECT current_setting('transaction_read_only') = 'off' AS writable"

