"""The HTTP API: metrics, health, readiness."""
