"""Is a freshly started Kafka broker ready for a worker? Asked the way a worker will use it.

An open port is not enough on Apache Kafka: for a few seconds after it listens, a new
broker answers metadata without leaders, and its transaction and group coordinators are
still creating and loading ``__transaction_state`` and ``__consumer_offsets`` (clients
get COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR meanwhile). The probe therefore reads
metadata, initialises a transactional producer (a producer id from the transaction
coordinator) and fetches committed offsets for a group (the group coordinator), each
once, each bounded by the caller's deadline.
"""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck


def broker_unready(bootstrap: str, timeout: float) -> str | None:
    """None when the broker(s) at ``bootstrap`` answer all three; else what did not.

    Never raises for a broker that is not ready yet: the caller retries until its own
    deadline (and checks that the process it started is still alive).
    """
    deadline = time.monotonic() + timeout
    common = {"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 5000}
    producer = ck.Producer({**common, "transactional.id": f"worker-probe-{uuid.uuid4().hex}"})
    try:
        metadata = producer.list_topics(timeout=max(0.1, deadline - time.monotonic()))
        if not metadata.brokers:
            return "metadata lists no broker"
        producer.init_transactions(max(0.1, deadline - time.monotonic()))
    except ck.KafkaException as exc:
        return f"transactions: {exc.args[0]}"
    finally:
        producer.flush(0)
    consumer = ck.Consumer({**common, "group.id": f"worker-probe-{uuid.uuid4().hex}"})
    try:
        probe = ck.TopicPartition("__worker_probe", 0)
        consumer.committed([probe], timeout=max(0.1, deadline - time.monotonic()))
    except ck.KafkaException as exc:
        return f"group coordinator: {exc.args[0]}"
    finally:
        consumer.close()
    return None
