"""A task reading several partitions processes their records in timestamp order, however
the fetches interleave them.

Each partition's records arrive in chunks, the chunks of the partitions interleaved at
random and cut into consume batches at random; a partition's end is reported after its
last chunk, in the same batch or later (its data is on the broker all along: before that
its lag is not 0). After every batch the group processes what it can, as the router
does. Whatever the interleaving, the records come out as the merge that always takes the
head with the smallest timestamp, ties to the partition ranked first (tables first), and
nothing is left behind. When every partition's timestamps rise, that is the sort by
(timestamp, rank, offset).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from worker.assignment.task_id import TP
from worker.clock import FakeClock
from worker.tasks.partition_group import PartitionGroup
from worker.testing.logs import LogRecord

Event = tuple[str, int, int]  # ("chunk", partition index, size) or ("end", index, 0)


@dataclass(frozen=True)
class Scenario:
    logs: list[list[int]]  # each partition's timestamps, in offset order
    events: list[Event]
    drain_after: list[bool]  # one per event: a batch ends after it


def partitions(n: int) -> list[TP]:
    return [(f"topic-{i}", 0) for i in range(n)]


@st.composite
def scenarios(draw: st.DrawFn, rising: bool = False) -> Scenario:
    n = draw(st.integers(min_value=2, max_value=3))
    times = st.lists(st.integers(min_value=0, max_value=12), max_size=20)
    logs = [sorted(draw(times)) if rising else draw(times) for _ in range(n)]
    pending: list[list[Event]] = []
    for i, log in enumerate(logs):
        chunks: list[Event] = []
        left = len(log)
        while left:
            size = draw(st.integers(min_value=1, max_value=left))
            chunks.append(("chunk", i, size))
            left -= size
        pending.append([*chunks, ("end", i, 0)])
    events: list[Event] = []
    while any(pending):
        i = draw(st.sampled_from([i for i, queue in enumerate(pending) if queue]))
        events.append(pending[i].pop(0))
    drain_after = draw(st.lists(st.booleans(), min_size=len(events), max_size=len(events)))
    return Scenario(logs, events, drain_after)


def processed_order(scenario: Scenario) -> list[tuple[int, int]]:
    """(partition index, offset) of each record in the order the group processed them."""
    tps = partitions(len(scenario.logs))
    index = {tp: i for i, tp in enumerate(tps)}
    group = PartitionGroup(tps, 0, FakeClock(), lambda r: r.timestamp()[1], 1000)
    fetched = [0] * len(tps)
    done: list[tuple[int, int]] = []

    def drain() -> None:
        while (run := group.next_run()) is not None:
            done.extend(
                (index[run.partition], r.offset()) for r in run.records[run.start : run.stop]
            )
            group.consumed(run, run.stop)

    for (kind, i, size), cut in zip(scenario.events, scenario.drain_after, strict=True):
        tp = tps[i]
        if kind == "chunk":
            batch = [
                LogRecord(tp[0], tp[1], offset, b"k", b"v", scenario.logs[i][offset])
                for offset in range(fetched[i], fetched[i] + size)
            ]
            group.add(batch, 0, size)
            fetched[i] += size
        else:
            group.reached_end(tp, fetched[i])
        if cut:
            drain()
    drain()
    return done


def merged(logs: list[list[int]]) -> list[tuple[int, int]]:
    """The reference: one record at a time, the smallest (head timestamp, partition rank)."""
    heads = [0] * len(logs)
    out: list[tuple[int, int]] = []
    while True:
        waiting = [(log[heads[i]], i) for i, log in enumerate(logs) if heads[i] < len(log)]
        if not waiting:
            return out
        _, i = min(waiting)
        out.append((i, heads[i]))
        heads[i] += 1


@given(scenarios())
def test_any_fetch_interleaving_processes_the_merge_by_head_timestamp(scenario: Scenario) -> None:
    assert processed_order(scenario) == merged(scenario.logs)


@given(scenarios(rising=True))
def test_rising_partitions_come_out_sorted_by_timestamp_then_rank(scenario: Scenario) -> None:
    order = processed_order(scenario)

    keys = [(scenario.logs[i][offset], i, offset) for i, offset in order]
    assert keys == sorted(keys)
    assert len(order) == sum(map(len, scenario.logs))
