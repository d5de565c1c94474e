"""ClusterState and its two feeders (state files, live list/watch); snapshots of a live cluster."""
