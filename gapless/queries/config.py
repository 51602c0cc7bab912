"""Cluster configuration."""

#: The cluster id recorded by `gapless migrate` (one row). A driver-level statement.
GET_CLUSTER_ID = "SELECT cluster_id FROM gapless_config"
