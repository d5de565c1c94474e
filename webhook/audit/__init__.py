"""The audit over everything that exists: the report, the in-cluster background audit, and
publishing PolicyReports."""
