"""The benchmark suite: ``make bench`` / ``python -m benchmarks`` (see ``__main__``).

Each benchmark measures the worker against a baseline taken in the same run and returns
rows of ratios; :mod:`benchmarks.report` writes them to ``docs/benchmarks.md``.
"""

# In the order ``python -m benchmarks`` runs them; each is a module of this package.
BENCHMARK_NAMES = (
    "scale_out",
    "availability",
    "throughput",
    "restore",
    "memory",
    "initial_standbys",
    "restart",
    "spark_load",
)
