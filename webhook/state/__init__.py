"""What feeds ClusterState (``policies.state``): state files, live list/watch and the API client,
the machine's pci.ids (``feeding`` builds each state with it); snapshots of a live cluster."""
