"""What every task of one worker shares: settings, state directory, RocksDB resources,
the record collector, metrics, the clock and the corruption reports.

Created once by the worker (``runtime/assembly.py``) and handed to each task it opens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.clock import Clock
from worker.config import Settings
from worker.kafka.collector import RecordCollector
from worker.observability import Metrics
from worker.state.directory import StateDirectory
from worker.state.rocksdb_env import RocksDBEnv
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
