"""Operator tools run beside (or instead of) a worker: ``worker state list|wipe``."""
