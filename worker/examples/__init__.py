"""Example applications shipped with the worker."""
