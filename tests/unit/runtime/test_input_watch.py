"""InputWatch: input waiting per active task and the cause that keeps it from processing,
fed to the real AvailabilityTracker with a fake clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from worker.assignment.task_id import TP, TaskId
from worker.clock import FakeClock
from worker.kafka.admin import PendingOffsets
from worker.observability import Metrics
from worker.runtime.availability import AvailabilityTracker, StallCause
from worker.runtime.input_watch import InputWatch, LoopConditions
from worker.tasks.state import TaskState

CALM = LoopConditions(rebalancing=False, broker_connected=True, backpressure=False)


@dataclass
class FakeTask:
    id: TaskId
    state: TaskState = TaskState.RUNNING
    is_active: bool = True
    revived: bool = False
    consumed: int = 0
    positions: dict[TP, int] = field(default_factory=dict)

    @property
    def source_partitions(self) -> tuple[TP, ...]:
        return (("in", self.id.partition),)

    def progress(self) -> int:
        return self.consumed

    def next_positions(self) -> dict[TP, int]:
        return dict(self.positions)


class FakePending:
    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends
        self.answered = False

    def ready(self) -> bool:
        return self.answered

    def result(self) -> dict[TP, int]:
        return self.ends if self.answered else {}


class Rig:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.tracker = AvailabilityTracker(self.metrics, self.clock)
        self.watermarks: dict[TP, int] = {}
        self.requests: list[list[TP]] = []
        self.pending: list[FakePending] = []
        self.ends: dict[TP, int] = {}

        def request(partitions: Iterable[TP]) -> PendingOffsets:
            self.requests.append(list(partitions))
            self.pending.append(FakePending(dict(self.ends)))
            return self.pending[-1]  # type: ignore[return-value]

        self.watch = InputWatch(self.watermarks.get, request, self.clock)

    def observe(self, tasks: list[FakeTask], conditions: LoopConditions = CALM) -> None:
        self.tracker.observe(self.watch.samples(tasks, conditions))  # type: ignore[arg-type]

    def charged(self, task: FakeTask, cause: StallCause) -> float:
        value = self.metrics.registry.get_sample_value(
            "worker_task_unavailable_seconds_total", {"task": str(task.id), "cause": cause.value}
        )
        return value or 0.0


def test_a_running_task_behind_its_fetched_end_that_processes_nothing_is_charged() -> None:
    rig = Rig()
    task = FakeTask(TaskId(0, 1), positions={("in", 1): 10})
    rig.watermarks[("in", 1)] = 15
    rig.observe([task])
    rig.clock.advance(2.0)
    rig.observe([task], LoopConditions(rebalancing=True, broker_connected=True, backpressure=False))
    rig.clock.advance(1.0)
    rig.observe([task])

    # The stall began without a known cause; the rebalance seen at its end takes it all.
    assert rig.charged(task, StallCause.REBALANCE) == 3.0
    assert rig.charged(task, StallCause.OTHER) == 0.0


def test_a_task_at_its_end_or_making_progress_is_never_charged() -> None:
    rig = Rig()
    idle = FakeTask(TaskId(0, 0), positions={("in", 0): 7})
    busy = FakeTask(TaskId(0, 1), positions={("in", 1): 0})
    rig.watermarks.update({("in", 0): 7, ("in", 1): 100})
    for _ in range(3):
        rig.observe([idle, busy])
        busy.consumed += 10
        rig.clock.advance(1.0)

    assert all(rig.charged(t, c) == 0 for t in (idle, busy) for c in StallCause)


def test_a_restoring_task_learns_its_input_end_without_blocking_and_is_charged_restore() -> None:
    rig = Rig()
    task = FakeTask(TaskId(0, 2), state=TaskState.RESTORING)
    rig.ends[("in", 2)] = 50
    rig.observe([task])
    assert rig.requests == [[("in", 2)]], "asked once, did not wait"
    rig.pending[0].answered = True
    rig.clock.advance(0.5)
    rig.observe([task])  # the answer is collected: input is waiting from now on
    rig.clock.advance(3.0)
    rig.observe([task])

    assert rig.charged(task, StallCause.RESTORE) == 3.0


def test_causes_follow_the_task_and_the_loop() -> None:
    rig = Rig()
    revived = FakeTask(TaskId(0, 0), state=TaskState.RESTORING, revived=True)
    handed_over = FakeTask(TaskId(0, 1), state=TaskState.SUSPENDED)
    running = FakeTask(TaskId(0, 2), positions={("in", 2): 0})
    rig.ends.update({("in", 0): 5, ("in", 1): 5})
    rig.watermarks[("in", 2)] = 5
    tasks = [revived, handed_over, running]
    rig.observe(tasks)
    rig.pending[0].answered = True
    rig.clock.advance(0.5)
    full = LoopConditions(rebalancing=True, broker_connected=False, backpressure=True)
    rig.observe(tasks, full)
    rig.clock.advance(1.0)
    rig.observe(tasks)

    assert rig.charged(revived, StallCause.REVIVE) == 1.0
    assert rig.charged(handed_over, StallCause.REBALANCE) == 1.0
    assert rig.charged(running, StallCause.BACKPRESSURE) == 1.5


def test_a_task_holding_records_back_for_an_empty_partition_is_charged_to_task_idle() -> None:
    rig = Rig()
    aligning = FakeTask(TaskId(0, 2), positions={("in", 2): 0})
    rig.watermarks[("in", 2)] = 5
    idling = LoopConditions(
        rebalancing=False, broker_connected=True, backpressure=False, idling=frozenset({"0_2"})
    )
    rig.observe([aligning], idling)
    rig.clock.advance(2.0)
    rig.observe([aligning], idling)

    assert rig.charged(aligning, StallCause.TASK_IDLE) == 2.0
    assert rig.charged(aligning, StallCause.OTHER) == 0.0


def test_standbys_are_not_sampled() -> None:
    rig = Rig()
    standby = FakeTask(TaskId(0, 3), is_active=False)
    samples = list(rig.watch.samples([standby], CALM))  # type: ignore[list-item]
    assert samples == []
    assert rig.requests == []
