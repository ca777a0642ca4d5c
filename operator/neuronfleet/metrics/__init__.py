"""Prometheus reader: the autoscaler's signals as typed snapshots (prometheus-api-client)."""
