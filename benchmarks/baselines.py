"""The ceilings: raw confluent-kafka loops over the same records, with no processing at all.

Configured like the worker's own clients (``worker.kafka``) so the comparison is
of the work done per record, not of client settings: the consumer with platform-facts'
fetch tuning, the producer idempotent with ``acks=all``, murmur2, ``linger.ms=5``. The
producer reports only failed deliveries (``delivery.report.only.error``): a ceiling pays
no Python call per acknowledged record. Each returns (monotonic time, records so far)
samples, one per consumed batch, so its rate is computed like the worker's
(:func:`benchmarks.measure.steady_rate`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import confluent_kafka as ck

from benchmarks.harness import BenchmarkFailed
from benchmarks.kafka_io import raw_consumer
from worker.kafka.error_classifier import is_partition_eof

BATCH = 10000
Samples = list[tuple[float, float]]


def _assign_all(consumer: ck.Consumer, topic: str) -> set[int]:
    """Assign every partition of ``topic`` from the beginning.

    Asking the consumer itself for the topic's metadata first connects it to the broker,
    so the timing that starts after this call does not include connecting: the worker's
    consumers are connected long before their restore or processing starts.
    """
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        raise BenchmarkFailed(f"{topic}: {meta.error}")
    parts = sorted(meta.partitions)
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
    return set(parts)


def consume_and_produce(
    bootstrap: str, source: str, target: str, timeout: float = 300.0
) -> Samples:
    """Read ``source`` from the beginning to its end, producing every record to ``target``.

    The last sample is taken after the final flush: every record acknowledged.
    """
    consumer = raw_consumer(bootstrap, f"bench-ceiling-{uuid.uuid4().hex[:6]}")
    failed: list[Any] = []
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            # Failures still reach the callback; successes cost no Python call.
            "delivery.report.only.error": True,
            "on_delivery": lambda err, _msg: failed.append(err),
        }
    )

    samples: Samples = []
    count = 0
    try:
        pending = _assign_all(consumer, source)
        samples.append((time.monotonic(), 0))
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BenchmarkFailed(f"consume-and-produce of {source} did not finish")
            for msg in consumer.consume(BATCH, 0.5):
                err = msg.error()
                if err is None:
                    while True:
                        try:
                            producer.produce(target, msg.value(), msg.key())
                            break
                        except BufferError:
                            producer.poll(0.01)
                    count += 1
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise BenchmarkFailed(f"consuming {source}: {err}")
            producer.poll(0)
            samples.append((time.monotonic(), count))
        if producer.flush(60) or failed:
            raise BenchmarkFailed(f"producing to {target}: not every record acknowledged")
        samples.append((time.monotonic(), count))
    finally:
        consumer.close()
    return samples


def consume(bootstrap: str, topic: str, timeout: float = 300.0) -> Samples:
    """Read ``topic`` from the beginning to its end, like the worker's restore consumer
    (``read_committed``), doing nothing with the records."""
    consumer = raw_consumer(
        bootstrap,
        f"bench-ceiling-{uuid.uuid4().hex[:6]}",
        {"isolation.level": "read_committed"},
    )
    samples: Samples = []
    count = 0
    try:
        pending = _assign_all(consumer, topic)
        samples.append((time.monotonic(), 0))
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BenchmarkFailed(f"consuming {topic} did not finish")
            for msg in consumer.consume(BATCH, 0.5):
                err = msg.error()
                if err is None:
                    count += 1
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise BenchmarkFailed(f"consuming {topic}: {err}")
            samples.append((time.monotonic(), count))
    finally:
        consumer.close()
    return samples
