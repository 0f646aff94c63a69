"""Stream-stream windowed joins on real stores against a plain-Python reference.

Random interleavings of both sides (out-of-order and late records, null keys and values,
duplicates of one key and time), random windows and grace, restarts and restores from
the changelogs, for inner, left and outer joins: the outputs equal the reference's in
order and timestamp. The reference emits an unmatched result only when stream time has
passed the record's window plus grace, so the test also says: never early, never twice,
never for a record that found a partner (KAFKA-10847).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.joining import Fed, joining
from worker.operators.joins.stream_stream import Kind, add_stream_stream_join, result_parents
from worker.processing.join_windows import JoinWindows
from worker.processing.topology import Topology
from worker.serde import JSON, STR

KEYS = st.sampled_from(["a", "b"])
events = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["l", "r"]),
            st.one_of(KEYS, KEYS, KEYS, st.none()),
            st.one_of(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.none()),
            st.sampled_from([0, 0, 5, 10]),  # coarse times: windows close exactly on
            st.sampled_from([0, 0, 5, 10, 15]),  # a record's time often (the edge cases)
        ),
        st.tuples(st.sampled_from(["restart", "restore"])),
    ),
    max_size=60,
)


def pair(left: Any, right: Any) -> Any:
    return [left, right]


def topology(windows: JoinWindows, kind: Kind) -> Topology:
    t = Topology().add_source("L", "lt", STR, JSON).add_source("R", "rt", STR, JSON)
    add_stream_stream_join(
        t, "J", "L", "R", windows, pair, kind=kind, key_serde=STR, left_serde=JSON, right_serde=JSON
    )
    return t.add_sink("out", "out", result_parents("J"), STR, JSON)


class Reference:
    """Both sides' accepted records kept forever; unmatched ones parked until closed."""

    def __init__(self, windows: JoinWindows, kind: Kind) -> None:
        self.w, self.kind = windows, kind
        self.stream_time = -1
        self.records: list[list[tuple[str, int, int, Any]]] = [[], []]
        self.parked: dict[tuple[int, int, int], tuple[str, int, Any]] = {}
        self.out: list[tuple[Any, Any, int]] = []

    def parks(self, side: int) -> bool:
        return self.kind == "outer" or (self.kind == "left" and side == 0)

    def close(self, side: int, ts: int) -> int:
        return ts + (self.w.after_ms if side == 0 else self.w.before_ms) + self.w.grace_ms

    def joined(self, side: int, value: Any, other: Any) -> Any:
        return [value, other] if side == 0 else [other, value]

    def record(self, side: int, key: str | None, value: Any, ts: int) -> None:
        if value is None:
            return
        if key is None:
            if self.parks(side):
                self.out.append((None, self.joined(side, value, None), ts))
            return
        if ts < self.stream_time - self.w.grace_ms:
            return
        seq = len(self.records[side])
        self.records[side].append((key, ts, seq, value))
        if side == 0:
            lo, hi = ts - self.w.before_ms, ts + self.w.after_ms
        else:
            lo, hi = ts - self.w.after_ms, ts + self.w.before_ms
        matches = sorted(
            (t, s, v) for k, t, s, v in self.records[1 - side] if k == key and lo <= t <= hi
        )
        for t, s, v in matches:
            self.parked.pop((self.close(1 - side, t), 1 - side, s), None)
            self.out.append((key, self.joined(side, value, v), max(ts, t)))
        if not matches and self.parks(side):
            self.parked[(self.close(side, ts), side, seq)] = (key, ts, value)
        self.stream_time = max(self.stream_time, ts)
        for entry in sorted(self.parked):
            if entry[0] < self.stream_time:
                key_, ts_, value_ = self.parked.pop(entry)
                self.out.append((key_, self.joined(entry[1], value_, None), ts_))


@settings(max_examples=80, deadline=None)
@given(
    scale=st.sampled_from([1, 7_000]),
    before=st.sampled_from([0, 5, 10]),
    after=st.sampled_from([0, 5, 10]),
    grace=st.sampled_from([0, 5, 10]),
    kind=st.sampled_from(["inner", "left", "outer"]),
    script=events,
)
def test_stream_stream_join_matches_the_reference(
    scale: int, before: int, after: int, grace: int, kind: Kind, script: list[Any]
) -> None:
    """``scale`` 7000 stretches time past the buffers' segments (a minute at least),
    so expiry by segment and fetches over several segments happen."""
    windows = JoinWindows(before * scale, after * scale, grace * scale)
    reference = Reference(windows, kind)
    now = 0

    def fed(event: Any) -> Fed:
        nonlocal now
        side, key, value, step, lateness = event
        now += step * scale
        ts = max(0, now - lateness * scale)
        reference.record(0 if side == "l" else 1, key, value, ts)
        return f"{side}t", key, value, ts

    with joining(topology(windows, kind).build()) as running:
        running.play(script, fed)
        assert running.outputs("out") == reference.out
