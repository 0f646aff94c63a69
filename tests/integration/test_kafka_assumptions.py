"""What the worker assumes about the broker, checked on both (issue 29 item 5).

Each test runs on the test broker and on Kafka and states what each does
(docs/platform-notes.md, "Kafka and the test broker, side by side"):

- stream time in the committed offsets' metadata: Kafka keeps it, the test broker drops
  it; a task with no changelog of its own resumes with it on Kafka only, and from its
  first record on the test broker;
- TxnOffsetCommit's generation check: Kafka refuses a transaction's offsets that name a
  generation the group has left (the transaction aborts, the offsets stay), the test
  broker accepts them;
- ListOffsets after a batch of many records: Kafka answers the end, the test broker the
  batch's base offset + 1; the fetch path's high watermark is right on both.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps.record_time import INPUT_ENV, OUTPUT_ENV
from tests.integration.test_record_time import Topics, wait_committed_stream_time
from tests.support.waiting import wait_until
from worker.assignment.model import Subscription
from worker.assignment.task_id import TaskId
from worker.config import Settings
from worker.errors import GenerationMoved
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.collector import Deliveries
from worker.kafka.consumers import WatermarkReader
from worker.kafka.membership import GroupMember, MemberState
from worker.kafka.transactions import TransactionalProducer, group_metadata
from worker.observability import Metrics

pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]

REPO = str(Path(__file__).resolve().parents[2])


@pytest.mark.duration(30)
def test_a_task_without_a_changelog_resumes_with_the_stream_time_its_offsets_carry_where_kept(
    worker_factory: Any, bootstrap: str, broker_kind: str
) -> None:
    topics = Topics(bootstrap)
    env = {INPUT_ENV: topics.input, OUTPUT_ENV: topics.output, "PYTHONPATH": REPO}
    settings = {"commit.interval.ms": 200, "processing.guarantee": "exactly_once_v2"}
    args = ["--app", "tests.apps.record_time:build_stateless"]
    first = worker_factory("first", settings=settings, args=args, env=env)
    first.wait_ready(90)
    topics.produce([("k", "a", 5_000, None), ("k", "b", 7_000, None)])
    topics.wait_outputs(2)
    wait_committed_stream_time(first, 7_000)
    assert first.terminate() == 0

    # A new owner with no state of its own: only the offsets' metadata can tell it.
    second = worker_factory("second", settings=settings, args=args, env=env)
    second.wait_ready(90)
    topics.produce([("k", "c", 6_000, None)])

    outputs = [value for _, value, *_ in topics.wait_outputs(3)]
    resumed = {"kafka": "c|7000", "tansu": "c|6000"}[broker_kind]
    assert outputs == ["a|5000", "b|7000", resumed], f"on {broker_kind}"
    assert second.terminate() == 0


def _settings(bootstrap: str, application_id: str) -> Settings:
    return Settings.model_validate(
        {
            "application.id": application_id,
            "bootstrap.servers": bootstrap,
            "processing.guarantee": "exactly_once_v2",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 10000,
        }
    )


def _stable(member: GroupMember, past: int = -1) -> None:
    wait_until(
        lambda: (
            member.poll() is not None
            and member.state is MemberState.STABLE
            and member.generation > past
        ),
        45,
        interval=0.05,
        message=f"the member to settle in a generation after {past}",
    )


@pytest.mark.duration(20)
def test_transactional_offsets_naming_an_ended_generation_are_refused_by_kafka_only(
    bootstrap: str, broker_kind: str
) -> None:
    application_id = f"txn-generation-{uuid.uuid4().hex[:10]}"
    topic = f"{application_id}-in"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    settings = _settings(bootstrap, application_id)
    process_id = str(uuid.uuid4())
    nothing: frozenset[TaskId] = frozenset()
    member = GroupMember(
        settings,
        {0: [topic]},
        lambda: Subscription(process_id, "127.0.0.1:8080", {}, nothing, nothing),
        Metrics(),
    )
    member.start()
    producer = TransactionalProducer(settings, f"{application_id}-{process_id}", Deliveries())
    try:
        _stable(member)
        ended = member.generation
        member.request_rebalance("test: end the generation")
        _stable(member, past=ended)
        stale = group_metadata(application_id, ended, member.member_id, "")

        producer.produce(topic, b"v", b"k")
        if broker_kind == "kafka":
            with pytest.raises(GenerationMoved):
                producer.commit({(topic, 0): 1}, lambda: stale)
            assert member.committed([(topic, 0)]) == {(topic, 0): None}
        else:
            producer.commit({(topic, 0): 1}, lambda: stale)
            assert member.committed([(topic, 0)]) == {(topic, 0): 1}
    finally:
        member.close()
        producer.abort()  # never raises


@pytest.mark.duration(10)
def test_list_offsets_after_a_multi_record_batch_is_exact_on_kafka_only(
    bootstrap: str, broker_kind: str
) -> None:
    topic = f"list-offsets-{uuid.uuid4().hex[:8]}"
    settings = _settings(bootstrap, f"list-offsets-{uuid.uuid4().hex[:8]}")
    admin = Admin(settings)
    admin.create_topics([TopicSpec(topic, 1)])
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 200})
    for i in range(1000):  # one batch
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0

    listed = admin.end_offsets([(topic, 0)])[(topic, 0)]
    fetched = WatermarkReader(settings)
    try:
        watermark = fetched.read([(topic, 0)])[(topic, 0)]
    finally:
        fetched.close()

    assert watermark == 1000, "the fetch path's high watermark is right on both"
    assert listed == {"kafka": 1000, "tansu": 1}[broker_kind], f"ListOffsets on {broker_kind}"
