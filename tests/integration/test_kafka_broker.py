"""Apache Kafka as the tests start it: ready for transactions when start() returns, stopped
by its PID, and a 3-node KRaft cluster that keeps accepting acks=all writes with a node
down (replication factor 3, min.insync.replicas 2)."""

from __future__ import annotations

import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import read_partition
from tests.support.ports import PortRegistry
from worker.dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, replicas: int) -> str:
    name = f"kafka-smoke-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, replicas)])[name].result(30)
    return name


def _values(bootstrap: str, topic: str) -> list[bytes | None]:
    """What a plain read_committed consumer sees (on Kafka that is the committed log)."""
    return [value for _, _, value in read_partition(bootstrap, topic, 0)]


def _commit(bootstrap: str, topic: str, values: list[bytes], timeout: float = 10.0) -> None:
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"smoke-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(timeout)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(30)


@pytest.mark.duration(15)
def test_a_started_broker_takes_a_transaction_at_once_and_stops_by_its_pid(
    tmp_path: Path, ports: PortRegistry
) -> None:
    broker = KafkaBroker(port=ports.take(), take_port=ports.take, data_dir=tmp_path / "k")
    with broker:
        pid = broker.pid
        assert pid is not None
        topic = _topic(broker.bootstrap, 1)
        _commit(broker.bootstrap, topic, [b"a", b"b"])
        assert _values(broker.bootstrap, topic) == [b"a", b"b"]
    assert broker.pid is None
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


@pytest.mark.duration(60)
def test_a_three_node_cluster_keeps_committing_with_one_node_down(
    tmp_path: Path, ports: PortRegistry
) -> None:
    cluster = KafkaBroker(
        port=ports.take(), take_port=ports.take, data_dir=tmp_path / "k3", nodes=3
    )
    with cluster:
        topic = _topic(cluster.bootstrap, 3)
        _commit(cluster.bootstrap, topic, [b"before"])
        cluster.nodes[2].kill()
        # The transaction coordinator or the partition's leader may have been on the killed
        # node: the producer finds the new ones within the (longer) timeout.
        _commit(cluster.bootstrap, topic, [b"during"], timeout=60)
        cluster.nodes[2].start(cluster.node_log(cluster.nodes[2]), cluster.heap_mb, False)
        cluster.wait_ready(60)
        _commit(cluster.bootstrap, topic, [b"after"], timeout=60)
        assert _values(cluster.bootstrap, topic) == [b"before", b"during", b"after"]
