"""Every use of kafka-python's private API, in one place, checked against the pinned version.

The group member (:mod:`worker.kafka.membership`) needs four things kafka-python 3 has no
public call for: starting a join without blocking the caller, keeping the member's poll
timer alive without ``KafkaConsumer.poll`` (which would fetch), asking for a rejoin, and
reading and sending the coordinator requests of a group member that is not a normal
consumer (offset fetches in one batch, a LeaveGroup on behalf of a killed predecessor).
They all reach into ``KafkaConsumer._coordinator``, whose shape may change in any
release, so this module refuses to import under any kafka-python but the one it was
written against (pyproject.toml pins it): an upgrade fails at start-up, loudly, instead
of misbehaving in a rebalance.

What the join relies on (kafka-python 3.0.12, ``coordinator/base.py``): the coordinator
runs on kafka-python's own IO thread; ``ensure_active_group_async`` scheduled there with
``_manager.call_soon`` runs JoinGroup and SyncGroup to the end and calls the assignor's
``on_assignment`` on that thread, while the caller only checks the returned future. A
blocking ``coordinator.poll(timeout)`` would instead drop a join result that arrives
after its timeout and start the join over (docs/platform-notes.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import kafka
import kafka.errors as kerrors
from kafka import KafkaConsumer
from kafka.future import Future
from kafka.protocol.consumer import LeaveGroupRequest
from kafka.structs import OffsetAndMetadata, TopicPartition

PINNED_VERSION = "3.0.12"

if kafka.__version__ != PINNED_VERSION:  # pragma: no cover - depends on the installed wheel
    raise ImportError(
        f"worker.kafka.group_coordinator was written against kafka-python {PINNED_VERSION}"
        f" and uses its private coordinator API; {kafka.__version__} is installed:"
        f" install kafka-python=={PINNED_VERSION}"
    )


def start_join(consumer: KafkaConsumer) -> Future:
    """Schedule JoinGroup + SyncGroup on kafka-python's IO thread; returns its future.

    The future succeeds once the member is in a new generation (the assignor's
    ``on_assignment`` has run by then) and fails with the join's non-retriable error;
    retriable errors are retried inside. It never completes while no coordinator is
    reachable: the caller keeps working meanwhile.
    """
    coordinator = consumer._coordinator
    return coordinator._manager.call_soon(coordinator.ensure_active_group_async)


def wait_for(join: Future, timeout_ms: int) -> bool:
    """Wait, on the join's own completion, at most ``timeout_ms``; True when it ended."""
    done = threading.Event()
    join.add_both(lambda _result: done.set())
    return done.wait(timeout_ms / 1000.0)


def keep_alive(consumer: KafkaConsumer) -> None:
    """Tell the heartbeat loop the member is alive (its ``max.poll.interval.ms`` timer).

    Raises the heartbeat loop's own error if it died (it is restarted by the next join).
    """
    consumer._coordinator.poll_heartbeat()


def needs_rejoin(consumer: KafkaConsumer) -> bool:
    """Whether kafka-python wants a new join: the group is rebalancing (learnt from a
    heartbeat), the member was thrown out, metadata changed, or partitions were revoked
    (KIP-429's follow-up round)."""
    return bool(consumer._coordinator.need_rejoin())


def knows_partitions(consumer: KafkaConsumer, topics: Iterable[str]) -> bool:
    """Whether kafka-python's cluster metadata lists partitions for every topic; if not,
    asks its IO thread for a metadata update (sent when it can; asking again is free).

    The leader plans from this metadata (``assign(cluster, members)``). Right after the
    consumer starts it can still be empty, and a join that completes first gives every
    member nothing (kafka-python rejoins when the metadata arrives: a wasted round that
    revokes every task). Seen on Apache Kafka, whose first join completes at once
    (docs/platform-notes.md); the test broker held the join ~3 s, longer than the fetch.
    """
    cluster = consumer._client.cluster
    missing = [topic for topic in topics if not cluster.partitions_for_topic(topic)]
    if missing:
        cluster.request_update()
    return not missing


def request_rejoin(consumer: KafkaConsumer) -> None:
    consumer._coordinator.request_rejoin()


def cancel_follow_up(consumer: KafkaConsumer) -> None:
    """Drop the rejoin kafka-python asked for when its partitions were revoked (KIP-429's
    follow-up round), once the runtime handed the revoked tasks over without one. A
    rebalance the group itself started is learnt again from the next heartbeat."""
    coordinator = consumer._coordinator
    with coordinator._lock:
        coordinator.rejoin_needed = False


def generation_lost(consumer: KafkaConsumer) -> bool:
    """True when the broker removed this member from its generation (heartbeat answered
    UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION): whatever it owned may be someone else's."""
    return bool(consumer._coordinator._generation.is_lost())


def is_leader(consumer: KafkaConsumer) -> bool:
    return bool(consumer._coordinator._is_leader)


def coordinator_reachable(consumer: KafkaConsumer) -> bool:
    """Known and connected, and, while stable, answering heartbeats within a session.

    The session check is made here rather than left to kafka-python's heartbeat loop,
    which waits on its unanswered heartbeat itself when packets are dropped and so never
    gets to its own session check (docs/platform-notes.md).
    """
    coordinator = consumer._coordinator
    if coordinator.coordinator_unknown():
        return False
    return not (coordinator.stable() and coordinator.heartbeat.session_timeout_expired())


def fetch_committed(
    consumer: KafkaConsumer, partitions: Iterable[TopicPartition], timeout_ms: int
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets of ``partitions`` in one OffsetFetch request."""
    return dict(
        consumer._coordinator.fetch_committed_offsets(list(partitions), timeout_ms=timeout_ms)
    )


def leave_on_behalf(consumer: KafkaConsumer, group_id: str, member_id: str, timeout_ms: int) -> str:
    """Send LeaveGroup for another (dead) member of ``group_id``; '' or the error's name.

    Never raises: the caller only loses time (the dead member's session timeout) when
    this fails.
    """
    coordinator = consumer._coordinator
    request = LeaveGroupRequest(
        group_id=group_id,
        member_id=member_id,
        members=[
            LeaveGroupRequest.MemberIdentity(
                member_id=member_id, group_instance_id=None, reason="previous run killed"
            )
        ],
    )

    async def leave() -> Any:
        future = coordinator._manager.send(request, node_id=coordinator.coordinator_id)
        return await coordinator._manager.wait_for(future, timeout_ms)

    try:
        if not coordinator.ensure_coordinator_ready(timeout_ms=timeout_ms):
            return kerrors.CoordinatorNotAvailableError.__name__
        response = coordinator._net.run(leave)
    except Exception as exc:  # best effort, see the docstring
        return repr(exc)
    codes = [response.error_code, *(m.error_code for m in response.members)]
    return next((kerrors.for_code(c).__name__ for c in codes if c), "")


def close_without_leaving(consumer: KafkaConsumer) -> None:
    """Release sockets and the IO thread but send no LeaveGroup (kafka-python has no flag)."""
    consumer._coordinator._close_heartbeat()
    consumer._closed = True
    consumer._client.close()
