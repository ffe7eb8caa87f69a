"""Observability: stage timings and Prometheus metrics."""
