"""Exactly-once commits while the group rebalances: deferred while the member holds no
generation, and a commit the group refuses because its generation moved on aborts and
revives its tasks.

Real stores on ``tmp_path``; the transaction is a fake that records what it commits and
fails as told (the real one aborts its transaction before it raises).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from structlog.testing import capture_logs

from tests.unit.tasks.conftest import COUNTS, EVENTS, OUT, T00, T01, Harness, make_harness
from worker.assignment.task_id import TP
from worker.errors import GenerationMoved, RebalanceInProgress
from worker.events import RESTORE_START
from worker.processing.topology import BuiltTopology
from worker.tasks.commit_protocols import ExactlyOnceCommit
from worker.tasks.state import TaskState
from worker.tasks.task_context import TaskContext


class FakeTransaction:
    """``TransactionalProducer.commit``/``abort`` in memory."""

    def __init__(self) -> None:
        self.committed: list[tuple[dict[TP, int], bytes]] = []
        self.aborts = 0
        self.fail: Exception | None = None

    def commit(
        self,
        offsets: Mapping[TP, int],
        group_metadata: Callable[[], bytes],
        metadata: Mapping[TP, str] | None = None,
    ) -> None:
        if self.fail is not None:
            failure, self.fail = self.fail, None
            self.aborts += 1
            raise failure
        self.committed.append((dict(offsets), group_metadata()))

    def abort(self) -> None:
        self.aborts += 1


class Member:
    """The generation the group member lets a commit name (None: it holds none)."""

    def __init__(self) -> None:
        self.commit_generation: tuple[int, str] | None = (1, "m-1")

    def metadata(self) -> bytes:
        held = self.commit_generation
        if held is None:
            raise RebalanceInProgress("no generation")
        return f"{held[0]}/{held[1]}".encode()


def setup(topology: BuiltTopology, ctx: TaskContext) -> tuple[Harness, FakeTransaction, Member]:
    transaction, member = FakeTransaction(), Member()
    protocol = ExactlyOnceCommit(ctx.collector, transaction, member.metadata)  # type: ignore[arg-type]
    harness = make_harness(topology, ctx, protocol)
    harness.assign(T00, T01)
    harness.restore()
    return harness, transaction, member


def feed(harness: Harness, *keys: str) -> None:
    for key in keys:
        harness.event(T00, key)
        harness.event(T01, key)
    harness.process()


def test_a_commit_without_a_generation_waits_and_sends_nothing_then_commits_everything(
    topology: BuiltTopology, ctx: TaskContext
) -> None:
    harness, transaction, member = setup(topology, ctx)
    feed(harness, "a", "b")
    member.commit_generation = None  # dropped from the group, joining again

    assert not harness.commits.commit()

    assert harness.collector.changelog == [], "nothing produced for a commit that waits"
    assert transaction.committed == [] and transaction.aborts == 0
    assert all(t.state is TaskState.RUNNING for t in harness.tasks.by_id.values())
    assert harness.metric("worker_commits_total", result="deferred") == 1

    member.commit_generation = (2, "m-1")
    assert harness.commits.commit()
    offsets, metadata = transaction.committed[-1]
    assert metadata == b"2/m-1"
    assert offsets == {(EVENTS, 0): 2, (EVENTS, 1): 2}
    assert len([r for r in harness.collector.sent if r.topic == OUT]) == 4
    assert harness.metric("worker_commits_total", result="committed") == 1


def test_a_commit_the_group_refuses_aborts_and_revives_the_tasks_that_had_work_in_it(
    topology: BuiltTopology, ctx: TaskContext
) -> None:
    harness, transaction, member = setup(topology, ctx)
    feed(harness, "a")
    assert harness.commits.commit()
    harness.event(T01, "a")  # work for one task only
    harness.process()
    transaction.fail = GenerationMoved("commit: ILLEGAL_GENERATION")

    with capture_logs() as logs:
        assert not harness.commits.commit()
        harness.restore()
    # The refused transaction never committed: the stores hold what the changelogs do,
    # so the task runs again without waiting for a restore to reach their ends.
    assert not [e for e in logs if e["event"] == RESTORE_START], "no changelog restored"

    assert transaction.aborts == 1
    tasks = harness.tasks.by_id
    assert tasks[T01].state is TaskState.RUNNING
    assert tasks[T01].stores[COUNTS].get_committed(b"a") == b"1"
    assert tasks[T00].state is TaskState.RUNNING, "nothing of it was in the transaction"
    assert harness.metric("worker_commits_total", result="generation_moved") == 1
    assert harness.metric("worker_task_revivals_total", reason="generation_moved") == 1

    # Revived: the aborted input is processed again and committed once.
    harness.process()
    assert harness.commits.commit()
    offsets, _ = transaction.committed[-1]
    assert offsets == {(EVENTS, 1): 2}
    assert tasks[T01].stores[COUNTS].get_committed(b"a") == b"2"
    harness.manager.close_all(clean=False)
