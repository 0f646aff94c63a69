"""GroupMember.request_rebalance: the order of revoke, leave, rejoin and snapshot.

The kafka-python consumer is replaced by a small fake that records calls; the broker
behaviour (a full rebalance with a new generation) is shown in
tests/integration/test_membership.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from worker.assignment.model import Assignment, Subscription
from worker.config import Settings
from worker.kafka.membership import GroupMember, planner_config
from worker.observability import Metrics


class FakeCoordinator:
    """Joins complete inside ``poll`` unless ``hold`` is set; each join is a generation."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.rejoin = True
        self.hold = False
        self.generation = 0
        self.on_assignment = lambda assignment, generation: None

    def need_rejoin(self) -> bool:
        return self.rejoin

    def poll(self, timeout_ms: int) -> None:
        self.log.append("join")
        if self.hold:
            return
        self.rejoin = False
        self.generation += 1
        empty = ConsumerProtocolAssignment(0, [], Assignment.empty().encode())
        self.on_assignment(empty, self.generation)

    def poll_heartbeat(self) -> None:
        pass


class FakeConsumer:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self._coordinator = FakeCoordinator(log)

    def unsubscribe(self) -> None:
        self.log.append("unsubscribe")
        self._coordinator.rejoin = True  # kafka-python resets the generation on leaving

    def subscribe(self, topics: list[str]) -> None:
        self.log.append(f"subscribe {','.join(topics)}")

    def assignment(self) -> set[object]:
        return set()

    def pause(self, *partitions: object) -> None:
        pass

    def close(self, autocommit: bool, timeout_ms: int) -> None:
        self.log.append("close")

    def group_metadata(self) -> SimpleNamespace:
        return SimpleNamespace(generation_id=self._coordinator.generation, member_id="m")


class Listener:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def on_revoked(self) -> None:
        self.log.append("revoked")

    def on_assigned(self, assignment: Assignment) -> None:
        self.log.append(f"assigned {assignment.generation}")


def _member() -> tuple[GroupMember, FakeConsumer, list[str], Metrics]:
    log: list[str] = []
    metrics = Metrics()

    def subscription() -> Subscription:
        log.append("snapshot")
        return Subscription.empty("p1")

    member = GroupMember(
        Settings.model_validate({}), {0: ["in"]}, subscription, Listener(log), metrics
    )
    consumer = FakeConsumer(log)
    consumer._coordinator.on_assignment = member._assignor.on_assignment
    member._consumer = consumer  # type: ignore[assignment]
    member.poll(0)
    assert log == ["snapshot", "join", "assigned 1"]
    log.clear()
    return member, consumer, log, metrics


def _probes(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("worker_probing_rebalances_total")


def test_a_requested_rebalance_revokes_leaves_and_rejoins_with_a_fresh_snapshot() -> None:
    member, _, log, metrics = _member()

    member.request_rebalance("warmup caught up")
    assert log == []  # nothing happens outside poll
    member.poll(0)

    assert log == ["revoked", "unsubscribe", "subscribe in", "snapshot", "join", "assigned 2"]
    assert _probes(metrics) == 1
    log.clear()
    member.poll(0)
    assert log == []  # done once


def test_a_rebalance_that_starts_anyway_satisfies_the_request() -> None:
    member, consumer, log, metrics = _member()

    member.request_rebalance("probing interval elapsed")
    consumer._coordinator.rejoin = True  # another member joined meanwhile
    member.poll(0)
    member.poll(0)

    assert log == ["revoked", "snapshot", "join", "assigned 2"]
    assert _probes(metrics) == 0


def test_a_request_made_while_joining_waits_for_that_join_to_finish() -> None:
    member, consumer, log, metrics = _member()
    consumer._coordinator.rejoin = True
    consumer._coordinator.hold = True
    member.poll(0)  # the join started (snapshot taken) but did not finish
    member.request_rebalance("warmup caught up")
    consumer._coordinator.hold = False
    member.poll(0)  # the join under way finishes first...
    member.poll(0)  # ...then the member leaves and rejoins with a newer snapshot

    assert log == [
        "revoked",
        "snapshot",
        "join",
        "join",
        "assigned 2",
        "revoked",
        "unsubscribe",
        "subscribe in",
        "snapshot",
        "join",
        "assigned 3",
    ]
    assert _probes(metrics) == 1


def test_a_request_after_close_is_ignored() -> None:
    member, _, log, metrics = _member()
    member.close()
    member.request_rebalance("too late")
    assert log == ["close"]
    assert _probes(metrics) == 0


def test_planner_settings_come_from_the_configuration() -> None:
    settings = Settings.model_validate(
        {
            "num.standby.replicas": 2,
            "max.warmup.replicas": 3,
            "acceptable.recovery.lag": 500,
            "probing.rebalance.interval.ms": 90_000,
        }
    )
    config = planner_config(settings)
    assert (config.num_standby_replicas, config.max_warmup_replicas) == (2, 3)
    assert (config.acceptable_recovery_lag, config.probing_rebalance_interval_ms) == (500, 90_000)
