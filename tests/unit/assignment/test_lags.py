"""Task lags from changelog end offsets and the members' reported offset sums."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from worker.assignment import lags
from worker.assignment.lags import TaskLags, changelog_partitions
from worker.assignment.model import LATEST_OFFSET, Subscription
from worker.assignment.task_id import TP, TaskId

T = TaskId
PARTS = {T(0, 0): (("c1", 0), ("c2", 0)), T(0, 1): (("c1", 1), ("c2", 1))}


def task_lags(
    tasks: Iterable[TaskId],
    parts: Mapping[TaskId, Sequence[TP]],
    ends: Mapping[TP, int],
    clients: Mapping[str, Subscription],
) -> dict[str, dict[TaskId, int]]:
    """Every client's lag on every task, as a table (what :func:`lags.task_lags` spares)."""
    wanted = list(tasks)
    found: TaskLags[str] = lags.task_lags(wanted, parts, ends, clients)
    return {key: {t: found.of(key, t) for t in wanted} for key in clients}


def _sub(sums: dict[TaskId, int], active: frozenset[TaskId] = frozenset()) -> Subscription:
    return Subscription("p", "", sums, active, frozenset())


def test_each_task_uses_its_own_partition_of_every_changelog_of_its_subtopology() -> None:
    parts = changelog_partitions([T(0, 3), T(1, 0)], {0: ["c2", "c1"]})
    assert parts == {T(0, 3): (("c1", 3), ("c2", 3)), T(1, 0): ()}


def test_lag_is_the_end_offset_sum_minus_the_reported_sum() -> None:
    ends = {("c1", 0): 100, ("c2", 0): 50, ("c1", 1): 10, ("c2", 1): 0}
    lags = task_lags(PARTS, PARTS, ends, {"a": _sub({T(0, 0): 120, T(0, 1): 10})})
    assert lags == {"a": {T(0, 0): 30, T(0, 1): 0}}


def test_a_client_reporting_nothing_is_behind_by_the_whole_changelog() -> None:
    ends = {("c1", 0): 100, ("c2", 0): 50}
    lags = task_lags([T(0, 0)], PARTS, ends, {"a": _sub({})})
    assert lags == {"a": {T(0, 0): 150}}


def test_a_running_active_has_lag_zero_whatever_it_reports() -> None:
    ends = {("c1", 0): 100, ("c2", 0): 50}
    active = frozenset({T(0, 0)})
    lags = task_lags([T(0, 0)], PARTS, ends, {"a": _sub({T(0, 0): 3}, active), "b": _sub({})})
    assert lags == {"a": {T(0, 0): 0}, "b": {T(0, 0): 150}}


def test_an_under_reported_end_is_raised_to_the_highest_reported_sum() -> None:
    # The test broker reports 1 for a partition holding 1,000 records in one batch.
    ends = {("c1", 0): 1, ("c2", 0): 0}
    clients = {"a": _sub({T(0, 0): 1000}), "b": _sub({T(0, 0): 400})}
    lags = task_lags([T(0, 0)], PARTS, ends, clients)
    assert lags == {"a": {T(0, 0): 0}, "b": {T(0, 0): 600}}


def test_without_any_end_offsets_the_reports_decide() -> None:
    clients = {"a": _sub({T(0, 0): 700}), "b": _sub({T(0, 0): 200}), "c": _sub({})}
    lags = task_lags([T(0, 0)], PARTS, {}, clients)
    assert lags == {"a": {T(0, 0): 0}, "b": {T(0, 0): 500}, "c": {T(0, 0): 700}}


def test_a_missing_partition_counts_as_unknown_not_as_a_failure() -> None:
    ends = {("c1", 0): 100}  # ("c2", 0) could not be fetched
    clients = {"a": _sub({T(0, 0): 90}), "b": _sub({T(0, 0): 130})}
    lags = task_lags([T(0, 0)], PARTS, ends, clients)
    assert lags == {"a": {T(0, 0): 40}, "b": {T(0, 0): 0}}


def test_stateless_tasks_have_lag_zero_everywhere() -> None:
    lags = task_lags([T(1, 0)], {T(1, 0): ()}, {}, {"a": _sub({}), "b": _sub({})})
    assert lags == {"a": {T(1, 0): 0}, "b": {T(1, 0): 0}}


def test_a_task_without_changelog_partitions_given_counts_as_stateless() -> None:
    assert task_lags([T(7, 0)], {}, {}, {"a": _sub({})}) == {"a": {T(7, 0): 0}}


def test_a_negative_sentinel_from_an_old_member_counts_as_no_report() -> None:
    ends = {("c1", 0): 100, ("c2", 0): 50}
    lags = task_lags([T(0, 0)], PARTS, ends, {"a": _sub({T(0, 0): LATEST_OFFSET})})
    assert lags == {"a": {T(0, 0): 150}}


def test_every_client_gets_a_lag_for_every_task() -> None:
    ends = {tp: 10 for parts in PARTS.values() for tp in parts}
    lags = task_lags(list(PARTS), PARTS, ends, {"a": _sub({}), "b": _sub({T(0, 1): 5})})
    assert lags == {"a": {T(0, 0): 20, T(0, 1): 20}, "b": {T(0, 0): 20, T(0, 1): 15}}


def test_only_reported_and_running_tasks_are_listed_per_client() -> None:
    ends = {tp: 10 for parts in PARTS.values() for tp in parts}
    clients = {"a": _sub({}), "b": _sub({T(0, 1): 5}, frozenset({T(0, 0)}))}
    found = lags.task_lags(list(PARTS), PARTS, ends, clients)
    assert found.reported == {"a": {}, "b": {T(0, 0): 0, T(0, 1): 15}}
    assert found.unreported == {T(0, 0): 20, T(0, 1): 20}


def test_a_warmup_is_measured_against_its_owners_report_not_the_later_listed_ends() -> None:
    # Reports are taken at each member's JoinGroup, the ends seconds later at planning:
    # a busy changelog has grown by then, a warmup as current as its owner would look
    # thousands behind in every round (and the group would probe forever).
    ends = {("c1", 0): 9000, ("c2", 0): 3000}
    clients = {
        "owner": _sub({T(0, 0): 8000}, frozenset({T(0, 0)})),
        "warmup": _sub({T(0, 0): 7400}),
        "fresh": _sub({}),
    }
    lags = task_lags([T(0, 0)], PARTS, ends, clients)
    assert lags == {"owner": {T(0, 0): 0}, "warmup": {T(0, 0): 600}, "fresh": {T(0, 0): 12000}}
