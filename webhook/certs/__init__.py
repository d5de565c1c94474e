"""The webhook's CA and serving certificate: issuing, the renewal plan, the in-cluster sync."""
