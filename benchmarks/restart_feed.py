"""The restart benchmark's input and its watchers (``restart.py``): the input topic fed
with distinct keys, the application's committed offsets read without joining its group,
and the stream a worker is killed in while it processes it."""

from __future__ import annotations

import os
import threading

import confluent_kafka as ck

from benchmarks.apps import MEMORY_TOPIC
from benchmarks.harness import metric_or_zero, wait_for
from benchmarks.kafka_io import bulk_producer, produce, raw_consumer
from worker.dev.processes import WorkerProcess

VALUE = 1024  # bytes of each random value
PARTITIONS = 4
PROCESSED = "worker_processed_records_total"


class Input:
    """The app's input topic: distinct keys, random 1 KiB values, ends tracked per partition."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.keys = 0
        self.ends: dict[int, int] = {}
        self._producer = bulk_producer(bootstrap)

    def add(self, count: int) -> None:
        while count > 0:
            chunk = min(count, 50_000)
            records = [
                (f"k{i:012d}".encode(), os.urandom(VALUE))
                for i in range(self.keys, self.keys + chunk)
            ]
            produce(self.bootstrap, MEMORY_TOPIC, records, self._producer, next_offsets=self.ends)
            self.keys += chunk
            count -= chunk


class Committed:
    """Reads the application's committed input offsets (no group join: offset fetch only)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self._consumer = raw_consumer(bootstrap, group)

    def caught_up(self, ends: dict[int, int]) -> bool:
        parts = [ck.TopicPartition(MEMORY_TOPIC, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in self._consumer.committed(parts, 10)}
        return all(committed.get(p, -1) >= end for p, end in ends.items())

    def close(self) -> None:
        self._consumer.close()


def kill_while_processing(worker: WorkerProcess, feed: Input, count: int) -> int:
    """Feed up to ``count`` records as a stream (twenty chunks, 50 ms apart, so the worker
    gets them over several fetches rather than in one) and SIGKILL the worker (by PID) once
    it has processed half of them; returns how many of them it had processed. Chunks not
    yet produced by then are never produced."""
    before = worker.metric(PROCESSED)
    stop = threading.Event()
    failure: list[BaseException] = []

    def stream() -> None:
        try:
            for _ in range(20):
                feed.add(count // 20)
                if stop.wait(0.05):
                    return
        except BaseException as exc:  # re-raised on the benchmark's thread below
            failure.append(exc)

    producer = threading.Thread(target=stream, name="kill-backlog", daemon=True)
    producer.start()
    try:
        wait_for(
            lambda: metric_or_zero(worker, PROCESSED) >= before + count // 2,
            120,
            f"{worker.name} processing the stream it is killed in",
            interval=0.01,
            alive=[worker],
        )
        processed = metric_or_zero(worker, PROCESSED) - before
        worker.kill()
    finally:
        stop.set()
        producer.join(120)
    if failure:
        raise failure[0]
    return int(processed)
