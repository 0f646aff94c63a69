"""What every task of one worker shares: settings, state directory, RocksDB resources,
the record collector, metrics, the clock and the corruption reports.

Created once by the worker (``runtime/assembly.py``) and handed to each task it opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from worker.clock import Clock
from worker.config import Settings
from worker.kafka.collector import RecordCollector
from worker.observability import Metrics
from worker.state.directory import StateDirectory
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store
from worker.tasks.corruption import CorruptionReports


@dataclass(frozen=True)
class TaskContext:
    """What every task of one worker shares (created once by the worker)."""

    settings: Settings
    state_dir: StateDirectory
    env: RocksDBEnv
    collector: RecordCollector
    metrics: Metrics
    clock: Clock
    # Corruption found at run time, for the healer (worker/tasks/healing.py).
    corruption: CorruptionReports = field(default_factory=CorruptionReports)
    # The worker's global tables by name (worker/runtime/global_tables.py), read-only to
    # every task's processors.
    global_stores: Mapping[str, Store] = field(default_factory=dict)
