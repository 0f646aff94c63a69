"""Structured logging and every Prometheus metric the worker exports, in one place.

Domain code receives a :class:`Metrics` and calls its attributes; it never creates
metrics itself. The registry is injectable so tests get a fresh one per worker object.
Names carry the constant ``worker_`` namespace; tasks and stores are labels.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TASK_KINDS = ("active", "standby", "warmup", "initial_standby")


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Route structlog to stderr as JSON lines (or a console renderer for humans)."""
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # kafka-python logs through stdlib logging; keep its chatter out unless debugging.
    # Its errors are connection errors with tracebacks, dozens a second while the broker
    # is away; the worker logs what matters of them (broker.unreachable, commit.failed).
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL if level != "debug" else logging.INFO)


def get_logger(**bound: Any) -> structlog.typing.FilteringBoundLogger:
    """A lazy logger: it binds to the configuration in force when it first logs, so loggers
    made at import time (before ``configure_logging``) still write JSON to stderr."""
    return structlog.get_logger(**bound)  # type: ignore[no-any-return]


class ThrottledLog:
    """At most one warning per ``interval_s`` on ``monotonic``'s clock; the lines left out
    are counted in the next one (``suppressed``). For events that can come once per
    record (skipped, late): a log line each would drown the log and slow the loop.
    Owner thread only."""

    def __init__(self, log: Any, monotonic: Callable[[], float], interval_s: float = 1.0) -> None:
        self._log = log
        self._monotonic = monotonic
        self._interval_s = interval_s
        self._last = float("-inf")
        self._suppressed = 0

    def warning(self, event: str, **fields: Any) -> None:
        now = self._monotonic()
        if now - self._last < self._interval_s:
            self._suppressed += 1
            return
        self._log.warning(event, **fields, suppressed=self._suppressed)
        self._last, self._suppressed = now, 0


class _TaskGauge:
    """A gauge labelled by task whose series disappear when the task goes away."""

    def __init__(self, gauge: Gauge) -> None:
        self._gauge = gauge

    def labels(self, task: str) -> Any:
        return self._gauge.labels(task=task)

    def remove_task(self, task: str) -> None:
        with contextlib.suppress(KeyError):  # never set: nothing to remove
            self._gauge.remove(task)


class Metrics:
    """Every metric of one worker process, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.tasks = Gauge("worker_tasks", "Tasks owned by this instance", ["kind"], registry=r)
        for kind in TASK_KINDS:
            self.tasks.labels(kind=kind).set(0)
        self.task_transitions = Counter(
            "worker_task_transitions_total", "Task state transitions", ["to"], registry=r
        )
        self.changelog_transitions = Counter(
            "worker_changelog_transitions_total",
            "Changelog partition state transitions (restoring, at_end, completed, updating)",
            ["to"],
            registry=r,
        )
        self.transaction_transitions = Counter(
            "worker_transaction_transitions_total",
            "Transactional producer state transitions (exactly_once_v2)",
            ["to"],
            registry=r,
        )
        self.processed_records = Counter(
            "worker_processed_records_total", "Input records processed by active tasks", registry=r
        )
        self.enforced_processing = Counter(
            "worker_enforced_processing_total",
            "Records a task reading several partitions processed while one of them was"
            " empty and no longer waited for (max.task.idle.ms): possibly out of order",
            ["task"],
            registry=r,
        )
        self.buffered_records = Gauge(
            "worker_buffered_records",
            "Records a task reading several partitions fetched and has not processed yet",
            ["task"],
            registry=r,
        )
        self.task_unavailable_seconds = Counter(
            "worker_task_unavailable_seconds_total",
            "Seconds an active task had input waiting and processed nothing, by cause"
            " (worker.runtime.availability)",
            ["task", "cause"],
            registry=r,
        )
        self.restored_records = Counter(
            "worker_restored_records_total",
            "Changelog records restored into local stores",
            ["task", "store"],
            registry=r,
        )
        self.standby_updated_records = Counter(
            "worker_standby_updated_records_total",
            "Changelog records applied to standby and warmup copies",
            ["task", "store"],
            registry=r,
        )
        self.window_expiry_ranges = Counter(
            "worker_window_expiry_ranges_total",
            "Range deletes of expired windows, one per expiry step (state/window_store.py)",
            ["task", "store"],
            registry=r,
        )
        self.window_expired_writes = Counter(
            "worker_window_expired_writes_total",
            "Writes to windows already past retention, dropped",
            ["task", "store"],
            registry=r,
        )
        self.late_records = Counter(
            "worker_late_records_total",
            "Records a windowed aggregation dropped: every window they belong to had closed",
            ["task", "processor"],
            registry=r,
        )
        self.window_restore_skipped = Counter(
            "worker_window_restore_skipped_records_total",
            "Changelog records of expired windows a restore or standby read and skipped",
            ["task", "store"],
            registry=r,
        )
        self.standby_lag = _TaskGauge(
            Gauge(
                "worker_standby_lag_records",
                "Records a standby or warmup task is behind its changelogs",
                ["task"],
                registry=r,
            )
        )
        self.task_stream_time = _TaskGauge(
            Gauge(
                "worker_task_stream_time_ms",
                "An active task's stream time (largest record timestamp processed) at its"
                " last commit",
                ["task"],
                registry=r,
            )
        )
        self.warmups_caught_up = Counter(
            "worker_warmups_caught_up_total",
            "Warmup tasks that reached acceptable.recovery.lag",
            registry=r,
        )
        self.probing_rebalances = Counter(
            "worker_probing_rebalances_total",
            "Rebalances this instance asked for (warmup caught up, probing interval)",
            registry=r,
        )
        self.initial_standbys_created = Counter(
            "worker_initial_standbys_created_total",
            "Initial standbys opened at start-up from task directories on disk",
            registry=r,
        )
        self.initial_standbys_recycled = Counter(
            "worker_initial_standbys_recycled_total",
            "Initial standbys recycled into an assigned task",
            ["into"],
            registry=r,
        )
        self.initial_standbys_closed = Counter(
            "worker_initial_standbys_closed_total",
            "Initial standbys closed because the first assignment did not include them",
            registry=r,
        )
        self.first_process_after_join = Gauge(
            "worker_first_process_after_join_seconds",
            "Seconds from the first assignment to the first processed record",
            registry=r,
        )
        self.task_revivals = Counter(
            "worker_task_revivals_total",
            "Active tasks closed dirty and revived from their last committed state",
            ["reason"],
            registry=r,
        )
        self.skipped_records = Counter(
            "worker_skipped_records_total",
            "Source records skipped by an exception handler (log_and_continue or dead_letter)",
            ["reason"],
            registry=r,
        )
        self.dead_lettered_records = Counter(
            "worker_dead_lettered_records_total",
            "Source records written to the dead-letter topic",
            ["reason"],
            registry=r,
        )
        self.punctuations = Counter(
            "worker_punctuations_total",
            "Punctuator runs by active tasks (stream time or wall clock)",
            ["task", "kind"],
            registry=r,
        )
        self.punctuation_seconds = Histogram(
            "worker_punctuation_seconds",
            "Time one punctuator run took (its store reads and writes, its forwards)",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
            registry=r,
        )
        self.commits = Counter(
            "worker_commits_total",
            "Commits of all active tasks, by result: committed, deferred (the group was"
            " syncing), or why it failed (generation_moved, fenced, transaction_failed, ...)",
            ["result"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "worker_commit_seconds",
            "Time to commit (flush producer, write stores, commit offsets)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.rebalances = Counter(
            "worker_rebalances_total", "Assignments received from the group", registry=r
        )
        self.state_dir_free_bytes = Gauge(
            "worker_state_dir_free_bytes",
            "Bytes free on the state directory's file system (for unprivileged writes);"
            " alert well before 0: state.disk.min.free.bytes logs a warning below it",
            registry=r,
        )
        self.http_refused = Counter(
            "worker_http_refused_total",
            "HTTP requests or connections refused: connections, requests (the caps),"
            " evicted (the longest-waiting connection, for a new one), deadline (a request"
            " not in within http.request.timeout.ms), unauthorized, forbidden (the query"
            " API is off), misrouted (a second hop)",
            ["reason"],
            registry=r,
        )
        self.membership_transitions = Counter(
            "worker_membership_transitions_total",
            "Group member state transitions (joining, syncing, revoking, stable, left)",
            ["to"],
            registry=r,
        )
        self.membership_state = Gauge(
            "worker_membership_state",
            "1 for the group member's current state",
            ["state"],
            registry=r,
        )
        self.follow_up_rebalances = Counter(
            "worker_follow_up_rebalances_total",
            "Follow-up joins after revoking tasks (the second round of a cooperative move)",
            registry=r,
        )
        self.checkpoint_writes = Counter(
            "worker_checkpoint_writes_total", ".checkpoint files written", registry=r
        )
        self.state_wipes = Counter(
            "worker_state_wipes_total", "Task directories wiped", ["reason"], registry=r
        )
        self.worker_state = Gauge(
            "worker_state", "1 for the worker's current lifecycle state", ["state"], registry=r
        )
        self.uncommitted_bytes = Gauge(
            "worker_uncommitted_bytes", "Bytes in store write buffers awaiting commit", registry=r
        )
        self.rocksdb_cache_bytes = Gauge(
            "worker_rocksdb_cache_bytes",
            "Bytes held by the shared RocksDB block cache, memtable reservations included",
            registry=r,
        )
        self.rocksdb_memtable_bytes = Gauge(
            "worker_rocksdb_memtable_bytes",
            "Bytes of memtables across all stores (RocksDB's write buffer manager)",
            registry=r,
        )
        self.ttl_evictions = Counter(
            "worker_ttl_evictions",
            "Expired keys a TTL sweep deleted (each with a changelog tombstone)",
            ["task", "store"],
            registry=r,
        )
        self.versions_pruned = Counter(
            "worker_versioned_pruned",
            "Old versions a versioned store's history sweep deleted (each with a changelog "
            "tombstone)",
            ["task", "store"],
            registry=r,
        )
        self.ttl_sweep_backlog = Gauge(
            "worker_ttl_sweep_backlog",
            "Expired keys left for the next sweep after the last one (counted up to a cap)",
            ["task", "store"],
            registry=r,
        )
        self.store_open_iterators = Gauge(
            "worker_store_open_iterators",
            "Range and prefix scans open over all stores (each commit closes its task's)",
            registry=r,
        )
