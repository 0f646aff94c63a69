"""The benchmark suite: ``make bench`` / ``python -m benchmarks`` (see ``__main__``).

Each benchmark module measures the worker against a baseline taken in the same run
(``measure(ctx, params)``: a plain dataclass of what it observed) and reports it
(``report(measured, plot_path)``: rows of ratios, details and plots, see
:mod:`benchmarks.results`); :mod:`benchmarks.report` writes every report to
``docs/benchmarks.md``.
"""

# In the order ``python -m benchmarks`` runs them; each is a module of this package.
BENCHMARK_NAMES = (
    "scale_out",
    "availability",
    "throughput",
    "count_sum",
    "per_record",
    "processes",
    "restore",
    "memory",
    "initial_standbys",
    "restart",
    "spark_load",
    "scale",
    "scans_ttl",
    "windowed",
    "windowed_final",
    "windowed_retention",
    "windowed_restore",
    "dsl_cost",
    "join_cost",
    "join_windows",
    "kafka_streams",
)
