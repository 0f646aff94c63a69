"""What the windowed benchmarks share: the input's event times, a worker of a windowed app
observed from outside while it runs, and the windowed store read back from its directories.

Observed from outside only, as every benchmark: ``/metrics`` (records processed, restored,
skipped), ``/proc`` (RSS), the store directories' bytes on disk, the output and changelog
topics. The stores themselves are opened only once the worker has stopped.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck

from benchmarks.apps import WINDOWED_STORE
from benchmarks.harness import RunContext, metric_or_zero, start_worker, wait_for
from benchmarks.kafka_io import partitions_of, raw_consumer, read_topic
from benchmarks.sampling import Sampler, rss_bytes
from worker.dev.processes import WorkerProcess
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store
from worker.state.window_format import OBSERVED_MS, decode_fixed_key, decode_meta, is_meta_key

MINUTE_MS = 60_000
Samples = list[tuple[float, float]]


def event_times(
    records: int, first_ms: int, span_ms: int, jitter_ms: int, seed: int = 22
) -> Iterator[int]:
    """Evenly climbing over ``span_ms`` from ``first_ms``, each up to ``jitter_ms`` early."""
    rng = random.Random(seed)
    for i in range(records):
        yield max(first_ms, first_ms + i * span_ms // records - rng.randrange(jitter_ms))


def recent_start(span_ms: int) -> int:
    """A first event time (on a minute) that ends the span about now: a windowed
    changelog is time-retained, so a broker that enforces retention against its clock
    treats the records as it would live ones."""
    return (int(time.time() * 1000) - span_ms - MINUTE_MS) // MINUTE_MS * MINUTE_MS


def store_dirs(state_dir: Path, store: str = WINDOWED_STORE) -> list[Path]:
    """The ``store`` directory of every task under a worker's state dir."""
    return sorted(p for p in state_dir.rglob(store) if p.parent.name == "rocksdb")


def disk_bytes(state_dir: Path, store: str = WINDOWED_STORE) -> int:
    """Bytes on disk of the store's directories (SST files, WAL, manifest); files RocksDB
    removes meanwhile are left out."""
    total = 0
    for path in store_dirs(state_dir, store):
        for f in path.rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                if f.is_file():
                    total += f.stat().st_size
    return total


@dataclass(frozen=True)
class StoredWindows:
    """What the stopped worker's store directories hold."""

    windows: int  # window entries on disk
    live: int  # of those, inside retention (start >= observed - retention) per task


def stored_windows(
    state_dir: Path, retention_ms: int, store: str = WINDOWED_STORE
) -> StoredWindows:
    """Count the window entries of every task's store; the worker must have stopped."""
    env = RocksDBEnv(64 * MiB)
    windows = live = 0
    for path in store_dirs(state_dir, store):
        opened = Store.open(path, env, store)
        try:
            observed = decode_meta(opened.get(OBSERVED_MS), -1)
            for key, _value in opened.iter_committed():
                if is_meta_key(key):
                    continue
                windows += 1
                live += decode_fixed_key(key)[0] >= observed - retention_ms
        finally:
            opened.close()
    return StoredWindows(windows, live)


def changelog_topic(application_id: str, store: str = WINDOWED_STORE) -> str:
    return f"{application_id}-{store}-changelog"


def changelog_timestamps(bootstrap: str, topic: str) -> list[int]:
    """Every record's timestamp in the changelog (all partitions)."""
    found: list[int] = []
    read_topic(bootstrap, topic, lambda msg: found.append(msg.timestamp()[1]), timeout=600)
    return found


def held_within(timestamps: list[int], retention_ms: int) -> int:
    """The records a broker enforcing ``retention.ms`` keeps, judged at the newest
    record's time (as a broker would at that moment; by record, not by log segment)."""
    if not timestamps:
        return 0
    newest = max(timestamps)
    return sum(1 for ts in timestamps if ts >= newest - retention_ms)


def open_windows(
    keys_and_times: list[tuple[bytes | None, int]], size_ms: int, grace_ms: int
) -> float:
    """The mean number of windows open in the input (by event time): each window's distinct
    keys, times the share of the time a window is open beside the next ones (it takes
    records for ``size + grace``)."""
    distinct: dict[int, set[bytes | None]] = {}
    for key, ts in keys_and_times:
        distinct.setdefault(ts - ts % size_ms, set()).add(key)
    if not distinct:
        return 0.0
    mean = sum(len(keys) for keys in distinct.values()) / len(distinct)
    return mean * (size_ms + grace_ms) / size_ms


class TopicEnd:
    """The sum of a topic's high watermarks: records written to it so far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = raw_consumer(bootstrap, f"bench-watermarks-{topic}")
        self._parts = [ck.TopicPartition(topic, p) for p in partitions_of(bootstrap, topic)]

    def __call__(self) -> float:
        return float(
            sum(self._consumer.get_watermark_offsets(tp, timeout=5)[1] for tp in self._parts)
        )

    def close(self) -> None:
        self._consumer.close()


@dataclass
class Observed:
    """One worker run's samples: (monotonic time, value)."""

    processed: Samples
    rss: Samples  # bytes
    disk: Samples  # the store's bytes on disk
    outputs: Samples  # records in the output topic
    seconds: float  # launch to the last record processed
    peak_rss: int  # VmHWM at the end

    @property
    def max_disk(self) -> float:
        return max((v for _t, v in self.disk), default=0.0)


def observed_run(
    ctx: RunContext,
    bootstrap: str,
    name: str,
    settings: Mapping[str, object],
    app: str,
    records: int,
    output_topic: str,
    state_dir: Path | None = None,
) -> tuple[WorkerProcess, Observed]:
    """Start a worker of ``app``, sample it until it has processed ``records`` and
    committed them; the worker is left running (the caller stops or kills it)."""
    launched = time.monotonic()
    worker = start_worker(ctx, name, settings, app, state_dir)
    ends = TopicEnd(bootstrap, output_topic)
    processed = lambda: metric_or_zero(worker, "worker_processed_records_total")  # noqa: E731
    pid = worker.pid
    assert pid is not None
    try:
        with (
            Sampler(lambda: worker.metric("worker_processed_records_total"), 0.1) as counted,
            Sampler(lambda: float(rss_bytes(pid)[0]), 0.2) as rss,
            Sampler(lambda: float(disk_bytes(worker.state_dir)), 0.5) as disk,
            Sampler(ends, 0.2) as outputs,
        ):
            timeout = max(120.0, records / 2000)
            wait_for(
                lambda: processed() >= records, timeout, f"{name}: {records} records", 0.1, [worker]
            )
            seconds = time.monotonic() - launched
            wait_for(
                lambda: worker.metric("worker_uncommitted_bytes") == 0, 60, f"{name}: a commit",
                alive=[worker],
            )  # fmt: skip
    finally:
        ends.close()
    peak = rss_bytes(pid)[1]
    return worker, Observed(
        counted.samples, rss.samples, disk.samples, outputs.samples, seconds, peak
    )
