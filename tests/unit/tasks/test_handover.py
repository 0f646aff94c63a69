"""Hand-overs within one round (worker/tasks/handover.py): the old owner's release marker
after its last changelog records, the new owner holding the task as a standby until it
reads that marker, then processing from the offsets it carries; the fallbacks.

Real stores on ``tmp_path``; Kafka is the fakes. One harness plays one instance; the
other instance's side is written into the fakes by hand.
"""

from __future__ import annotations

import pytest

from tests.unit.tasks.conftest import (
    COUNTS,
    COUNTS_CHANGELOG,
    EVENTS,
    LABELS,
    T00,
    T01,
    Harness,
    count_events,
    make_harness,
)
from worker.assignment.model import Assignment
from worker.assignment.task_id import TP, TaskId
from worker.errors import ProduceFailed
from worker.processing import ProcessorContext, Topology
from worker.serde import JSON, STR
from worker.state.release_marker import RELEASE_KEY, ReleaseMarker
from worker.state.stream_time_marker import STREAM_TIME_KEY
from worker.tasks.handover import ReleaseWatch, TakeOverWatch
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task_context import TaskContext


def cl(task_id: TaskId) -> TP:
    return (COUNTS_CHANGELOG, task_id.partition)


def ev(task_id: TaskId) -> TP:
    return (EVENTS, task_id.partition)


def plan(
    active: tuple[TaskId, ...], standby: tuple[TaskId, ...] = (), generation: int = 2
) -> Assignment:
    return Assignment(
        frozenset(active), frozenset(standby), frozenset(), {}, {}, generation=generation
    )


def run(h: Harness, *task_ids: TaskId) -> None:
    h.manager.on_assigned(plan(task_ids, generation=1))
    h.restore()


def released_by_other(h: Harness, task_id: TaskId, generation: int, offset: int) -> None:
    """The old owner's last change and its release marker, as the broker serves them."""
    h.restore_consumer.append(*cl(task_id), b"a", b"5")
    marker = ReleaseMarker(generation, {ev(task_id): offset})
    h.restore_consumer.append(*cl(task_id), RELEASE_KEY, None, marker.headers())


def step(h: Harness) -> None:
    h.tasks.restore_step(timeout=0.0)
    h.manager.check_releases()


def test_the_old_owner_releases_a_revoked_task_after_its_last_changelog_records(
    harness: Harness,
) -> None:
    run(harness, T00, T01)
    harness.event(T00, "a")
    harness.event(T00, "b")
    harness.process()

    assert harness.manager.on_assigned(plan((T01,), generation=2)), "released in band"

    records = harness.collector.changelog
    assert [(r.key, r.value) for r in records] == [
        (b"a", b"1"),
        (b"b", b"1"),
        (STREAM_TIME_KEY, None),
        (RELEASE_KEY, None),
    ]
    marker = ReleaseMarker.from_headers(records[-1].headers)
    assert marker == ReleaseMarker(2, {ev(T00): 2}), "the generation and where to go on"
    assert harness.group_offsets.commits == [{ev(T00): 2}]
    assert T00 not in harness.tasks.by_id


def test_a_failed_hand_over_commit_asks_for_the_follow_up_round(harness: Harness) -> None:
    run(harness, T00)
    harness.event(T00, "a")
    harness.process()
    harness.collector.fail_flush = ProduceFailed("broker away")

    assert not harness.manager.on_assigned(plan((), generation=2))


def test_the_new_owner_holds_the_task_until_the_release_then_goes_on_from_its_offsets(
    harness: Harness,
) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))
    task = harness.manager.tasks[T00]
    assert task.role is TaskRole.STANDBY
    assert harness.manager.awaiting_release() == {T00}
    harness.consumer.append(*ev(T00), b"a", b"{}")
    harness.consumer.append(*ev(T00), b"b", b"{}")
    step(harness)
    assert task.role is TaskRole.STANDBY, "no release read yet: it only tails"

    released_by_other(harness, T00, generation=2, offset=1)
    step(harness)  # the standby reads the marker: taken over at once
    harness.restore()

    assert task.role is TaskRole.ACTIVE and task.state is TaskState.RUNNING
    assert harness.consumer.added[-1][ev(T00)] == 1, "from the offset the release carries"
    assert task.stores["counts"].get_committed(b"a") == b"5", "the old owner's last change"
    assert harness.manager.awaiting_release() == frozenset()
    harness.manager.close_all(clean=False)


def test_a_task_taken_over_on_its_release_runs_its_processors_init_and_punctuators(
    ctx: TaskContext,
) -> None:
    inits: list[str] = []

    def schedule_ticks(pctx: ProcessorContext) -> None:
        inits.append("count")
        pctx.schedule(1_000, "stream", lambda _ctx, _now: None)

    built = (
        Topology()
        .add_source(EVENTS, EVENTS, key_serde=STR, value_serde=JSON)
        .add_table(LABELS, LABELS, key_serde=STR, value_serde=JSON)
        .add_store(COUNTS, key_serde=STR, value_serde=JSON)
        .add_processor("count", count_events, [EVENTS], [COUNTS, LABELS], init=schedule_ticks)
        .build()
    )
    h = make_harness(built, ctx)
    try:
        h.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))
        released_by_other(h, T00, generation=2, offset=0)
        step(h)

        task = h.manager.tasks[T00]
        assert task.role is TaskRole.ACTIVE and task.state is TaskState.RUNNING
        assert inits == ["count"] and task.punctuators is not None and len(task.punctuators) == 1
    finally:
        h.manager.close_all(clean=False)


def test_a_release_of_an_earlier_hand_over_is_not_this_one(harness: Harness) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,), generation=5), incoming=frozenset({T00}))
    released_by_other(harness, T00, generation=3, offset=1)
    step(harness)
    step(harness)
    assert harness.manager.tasks[T00].role is TaskRole.STANDBY
    harness.manager.close_all(clean=False)


def test_a_release_that_never_comes_falls_back_to_the_next_assignment(harness: Harness) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))

    harness.manager.on_assigned(plan((T00,), generation=3))  # the old owner's session ended
    harness.restore()

    assert harness.manager.tasks[T00].role is TaskRole.ACTIVE
    assert harness.manager.awaiting_release() == frozenset()
    harness.manager.close_all(clean=False)


def test_an_awaited_task_moved_on_again_is_released_by_its_holder(harness: Harness) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))

    harness.manager.on_assigned(plan((), standby=(T00,), generation=3))

    marker = ReleaseMarker.from_headers(harness.collector.changelog[-1].headers)
    assert marker == ReleaseMarker(3, {})
    assert harness.manager.tasks[T00].role is TaskRole.STANDBY
    harness.manager.close_all(clean=False)


def test_the_watch_wants_a_marker_in_every_logged_changelog() -> None:
    watch = ReleaseWatch()
    assert watch.offer([(cl(T01), ReleaseMarker(2, {}))]) == {}


def test_a_release_read_before_the_assignment_that_awaits_it_still_counts(
    harness: Harness,
) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,), generation=1))
    released_by_other(harness, T00, generation=2, offset=1)
    step(harness)  # the standby reads the marker while nothing awaits it yet

    harness.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))
    step(harness)

    assert harness.manager.tasks[T00].role is TaskRole.ACTIVE
    harness.manager.close_all(clean=False)


def test_the_release_names_the_client_the_round_gave_the_task_to(harness: Harness) -> None:
    run(harness, T00)
    moved = Assignment(frozenset(), frozenset(), frozenset(), {}, {}, generation=2,
                       pending_moves={T00: "p-new"})  # fmt: skip

    harness.manager.on_assigned(moved)

    marker = ReleaseMarker.from_headers(harness.collector.changelog[-1].headers)
    assert marker is not None and marker.owner == "p-new"


def test_a_standby_named_in_a_release_of_its_round_takes_over_before_its_assignment(
    harness: Harness,
) -> None:
    me = harness.state_dir.process_id
    harness.manager.on_assigned(plan((), standby=(T00, T01), generation=1))
    for task_id, owner in ((T00, me), (T01, "someone-else")):
        marker = ReleaseMarker(2, {ev(task_id): 1}, owner)
        harness.restore_consumer.append(*cl(task_id), RELEASE_KEY, None, marker.headers())
    harness.tasks.restore_step(timeout=0.0)

    harness.manager.check_releases(generation=2)  # joined round 2, assignment not here yet

    assert harness.manager.tasks[T00].role is TaskRole.ACTIVE
    assert harness.manager.tasks[T01].role is TaskRole.STANDBY, "given to another client"
    written = len(harness.collector.changelog)
    harness.manager.on_assigned(plan((), standby=(T00, T01)), incoming=frozenset({T00}))
    assert harness.manager.tasks[T00].role is TaskRole.ACTIVE, "its assignment keeps it"
    assert len(harness.collector.changelog) == written, "nothing released back"
    harness.manager.close_all(clean=False)


def test_a_task_taken_over_on_its_release_asks_the_group_for_no_offsets(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.manager.on_assigned(plan((), standby=(T00,)), incoming=frozenset({T00}))
    released_by_other(harness, T00, generation=2, offset=7)

    def joining(partitions: object) -> None:
        raise AssertionError("an OffsetFetch waits for the JoinGroup while the member joins")

    monkeypatch.setattr(harness.group_offsets, "committed_with_metadata", joining)
    step(harness)

    task = harness.manager.tasks[T00]
    assert task.role is TaskRole.ACTIVE and task.state is TaskState.RUNNING
    assert harness.consumer.added[-1][ev(T00)] == 7
    harness.manager.close_all(clean=False)


def test_a_take_over_shows_as_two_records_past_the_release_in_every_changelog() -> None:
    ends = {cl(T00): 10, cl(T01): 20}
    watch = TakeOverWatch(lambda tps: {tp: ends[tp] for tp in tps}, [cl(T00), cl(T01)])
    ends[cl(T00)] = 11  # the old owner's transaction marker, after the baseline
    assert not watch.taken_over()
    ends[cl(T00)] = 12
    assert not watch.taken_over(), "one new owner has written, the other not yet"
    ends[cl(T01)] = 25
    assert watch.taken_over()


def test_the_last_hand_over_is_watched_for_its_take_over(harness: Harness) -> None:
    assert harness.manager.take_over_watch() is None, "nothing released yet"
    run(harness, T00)
    harness.manager.on_assigned(plan((), generation=2))
    assert harness.manager.take_over_watch() is not None
    harness.manager.on_assigned(plan((), standby=(T01,), generation=3))
    assert harness.manager.take_over_watch() is None, "only the last assignment's releases"
