"""Session setup and cluster configuration."""

from sqlalchemy import text

#: Bound every lock wait of the current transaction; gone at commit.
SET_LOCK_TIMEOUT = text("SELECT set_config('lock_timeout', :timeout, true)")

#: The cluster id recorded by `gapless migrate` (one row).
GET_CLUSTER_ID = text("SELECT cluster_id FROM gapless_config")
