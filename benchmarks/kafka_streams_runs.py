"""One run of a topology over the whole input topic, by our worker or by Kafka Streams,
sampled the same way: records processed and the process's CPU seconds over time.

Our worker's count is ``worker_processed_records_total`` from ``/metrics``; Kafka
Streams' is the baseline's own (a ``peek`` counting every record the source hands on,
printed every 50 ms on stdout by ``bench.Baseline``). CPU is the process's user and
system time from ``/proc`` (every thread: librdkafka's, or the JVM's compiler and
collector), so neither side's client threads are left out.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka as ck

from benchmarks import cpu
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    metric_or_zero,
    new_application_id,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import partitions_of, raw_consumer
from benchmarks.kafka_streams_build import MAIN_CLASS, classpath
from benchmarks.measure import crossing_time, from_first_record, value_at
from benchmarks.sampling import Sampler
from worker.dev.processes import guarded

Samples = list[tuple[float, float]]
# The JVM's heap for Kafka Streams: bounded like a container's, room for its buffers.
JVM_HEAP = "-Xmx1g"
# Warnings and errors only in its log (slf4j-simple logs INFO by default).
QUIET = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"


@dataclass(frozen=True)
class Run:
    """What one run observed."""

    processed: Samples  # (monotonic time, records processed), from the first record on
    cpu_seconds: Samples  # (monotonic time, the process's CPU seconds so far)
    seconds: float  # launch to the last record
    threads: dict[str, float] = field(default_factory=dict)  # kind of thread -> CPU s, whole run

    def cpu_per_record_us(self, total: int, low: float = 0.1, high: float = 0.9) -> float:
        """CPU microseconds per record while the count went from ``low`` to ``high`` of
        ``total``: the window the rate is measured over (start-up and tail left out)."""
        try:
            start = crossing_time(self.processed, total * low)
            end = crossing_time(self.processed, total * high)
        except ValueError:  # a run within a sampling interval or two (quick mode)
            start, end, low, high = self.processed[0][0], self.processed[-1][0], 0.0, 1.0
            total = int(self.processed[-1][1] - self.processed[0][1]) or 1
        spent = value_at(self.cpu_seconds, end) - value_at(self.cpu_seconds, start)
        return spent * 1e6 / (total * (high - low))


def worker_run(
    ctx: RunContext, bootstrap: str, name: str, app: str, settings: dict[str, object], total: int
) -> Run:
    """``worker start --app app`` over the whole input, a new group, until ``total`` records
    are processed; then stopped."""
    launched = time.monotonic()
    worker = start_worker(
        ctx, name, worker_settings(bootstrap, new_application_id(name), settings), app
    )
    pid = worker.pid
    assert pid is not None
    with (
        Sampler(lambda: worker.metric("worker_processed_records_total"), 0.1) as processed,
        Sampler(lambda: cpu.process_seconds(pid), 0.1) as spent,
    ):
        wait_for(
            lambda: metric_or_zero(worker, "worker_processed_records_total") >= total,
            max(120.0, total / 2000), f"{name} to process {total} records", 0.1, [worker],
        )  # fmt: skip
        # The last record's sample, whichever sampler's turn it was.
        seconds = time.monotonic() - launched
        processed.samples.append(
            (time.monotonic(), worker.metric("worker_processed_records_total"))
        )
        spent.samples.append((time.monotonic(), cpu.process_seconds(pid)))
        threads = by_kind(cpu.thread_seconds(pid))
    stop_worker(worker)
    return Run(from_first_record(processed.samples), spent.samples, seconds, threads)


# Threads by kind, from their kernel names (15 characters at most): the JVM's and
# librdkafka's own, Kafka Streams' (named after the application id, "streams-..."), and
# CPython's (unnamed: they keep the process's name).
THREAD_KINDS = (
    ("JIT compiler", ("C1 CompilerThre", "C2 CompilerThre")),
    ("garbage collector and VM", ("GC Thread", "G1 ", "VM Thread", "VM Periodic")),
    ("Kafka Streams' stream thread", ("streams-",)),
    ("Java producer's I/O thread", ("kafka-producer-",)),
    ("the JVM's main thread (start-up, class loading)", ("java",)),
    ("librdkafka threads", ("rdk:",)),
    ("RocksDB background threads", ("rocksdb:",)),
    ("Python threads (processing loop, HTTP server)", ("python",)),
)
OTHER_THREADS = "other threads"


def by_kind(threads: dict[str, float]) -> dict[str, float]:
    """CPU seconds per kind of thread (THREAD_KINDS, else OTHER_THREADS)."""
    kinds: dict[str, float] = {}
    for name, seconds in threads.items():
        kind = next((k for k, prefixes in THREAD_KINDS if name.startswith(prefixes)), OTHER_THREADS)
        kinds[kind] = kinds.get(kind, 0.0) + seconds
    return kinds


class StreamsProcess:
    """``java bench.Baseline ...``: Kafka Streams running one topology; its count is read
    from its stdout on a thread. Stopped by its PID (SIGTERM, then SIGKILL)."""

    def __init__(self, build: Path, home: Path, args: list[str]) -> None:
        self.log_path = home / "streams.log"
        java = shutil.which("java")
        if java is None:
            raise BenchmarkFailed("the Kafka Streams baseline needs java on PATH")
        self.command = [java, JVM_HEAP, QUIET, "-cp", classpath(build), MAIN_CLASS, *args]
        self.home = home
        self.processed: Samples = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> StreamsProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                guarded(self.command), stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL, cwd=self.home, start_new_session=True,
            )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == b"processed":
                self.processed.append((time.monotonic(), float(parts[1])))

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def count(self) -> float:
        if not self.alive:
            raise BenchmarkFailed(
                f"Kafka Streams exited with {self._proc and self._proc.returncode}:\n"
                + self.log_path.read_text(errors="replace")[-3000:]
            )
        return self.processed[-1][1] if self.processed else 0.0

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Kafka Streams closes, committing), SIGKILL after ``timeout``. Idempotent."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._reader is not None:
            self._reader.join(5)


def streams_run(
    ctx: RunContext,
    build: Path,
    bootstrap: str,
    name: str,
    topology: str,
    settings: dict[str, object],
    total: int,
    cache_bytes: int = 0,
) -> Run:
    """Kafka Streams running ``topology`` over the whole input, a new application id,
    until ``total`` records are processed; then closed. Its record cache is off unless
    ``cache_bytes`` is given (``statestore.cache.max.bytes``)."""
    home = ctx.workdir / name
    args = [
        topology, bootstrap, new_application_id(name), str(home / "state"),
        str(settings["processing.guarantee"]), str(settings["commit.interval.ms"]),
        str(cache_bytes),
    ]  # fmt: skip
    launched = time.monotonic()
    streams = StreamsProcess(build, home, args)
    ctx.own(streams.start, streams.stop)
    with Sampler(lambda: cpu.process_seconds(streams.pid), 0.1) as spent:
        wait_for(
            lambda: streams.count() >= total,
            max(120.0, total / 2000), f"{name} to process {total} records", 0.1,
        )  # fmt: skip
        seconds = time.monotonic() - launched
        spent.samples.append((time.monotonic(), cpu.process_seconds(streams.pid)))
        threads = by_kind(cpu.thread_seconds(streams.pid))
    streams.stop()
    return Run(from_first_record(list(streams.processed)), spent.samples, seconds, threads)


def records_in(bootstrap: str, topic: str) -> int:
    """The records ``topic`` holds, summed over its partitions (end minus start offsets;
    transaction markers count too, so exact only for non-transactional writes)."""
    consumer = raw_consumer(bootstrap, new_application_id("bench-offsets"))
    try:
        total = 0
        for partition in partitions_of(bootstrap, topic):
            low, high = consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=10
            )
            total += high - low
        return total
    finally:
        consumer.close()
