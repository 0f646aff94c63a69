"""Windowed aggregations on the broker: emit-final results across a kill -9 between an
emission and its commit, exactly once under exactly-once, at least once and in order per
key under at-least-once; a bad window definition stops ``worker start`` with exit 2.

The app is ``tests.apps.windowed_counts`` (hopping 10 s windows every 5 s, grace 2 s,
emit final) on one partition, fed records with chosen timestamps, some of them late. The
expected results are the reference model's (tests/support/window_models.py). Outputs are
read as a read_committed consumer on Kafka sees them (tests/support/transaction_log.py).
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import windowed_counts as app
from tests.support.transaction_log import read_committed_partition
from tests.support.waiting import wait_until
from tests.support.window_models import closed_windows, fixed_model
from worker.serde import STR
from worker.windowed_serde import Windowed, WindowedSerde

pytestmark = pytest.mark.integration

APP = "tests.apps.windowed_counts:build"
REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
KEYS = WindowedSerde(STR)


def events(base: int) -> list[tuple[str, int]]:
    """60 s of records, 4 a second over 4 keys; every 25th is 8 s behind (late for some
    of its windows, or all)."""
    found = []
    for i in range(240):
        ts = base + i * 250
        found.append((f"k{i % 4}", ts - 8_000 if i % 25 == 24 else ts))
    return found


def expected_results(recs: list[tuple[str, int]]) -> dict[Windowed[str], int]:
    _updates, contents, _late, stream_time = fixed_model(app.WINDOWS, recs)
    grace = app.WINDOWS.grace_ms
    closed = closed_windows(contents, stream_time, lambda w: w.end_ms - 1 + grace)
    return {window: len(times) for window, times in closed.items()}


class CountsApp:
    """Fresh topics for the app on the session broker, its worker, and its outputs."""

    def __init__(self, worker_factory: Any, guarantee: str, crash_marker: Path) -> None:
        self.bootstrap: str = worker_factory.bootstrap
        suffix = uuid.uuid4().hex[:8]
        self.source, self.sink = f"wagg-in-{suffix}", f"wagg-out-{suffix}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, 1, 1) for t in (self.source, self.sink)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        # event times near now: the changelog's time retention would drop older ones
        self.base = int(time.time() * 1000) // 10_000 * 10_000 - 600_000
        env = {
            "PYTHONPATH": REPO,
            app.INPUT_ENV: self.source,
            app.OUTPUT_ENV: self.sink,
            app.CRASH_AT_ENV: str(self.base + 20_000),
            app.CRASH_MARKER_ENV: str(crash_marker),
        }
        settings = {"processing.guarantee": guarantee, "commit.interval.ms": 200}
        self.worker = worker_factory("w", settings=settings, args=["--app", APP], env=env)

    def produce(self, recs: list[tuple[str, int]]) -> None:
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        for key, ts in recs:
            producer.produce(self.source, b"{}", key.encode(), partition=0, timestamp=ts)
        assert producer.flush(30) == 0

    def outputs(self) -> list[tuple[Windowed[str], int, int, tuple[Any, ...]]]:
        return [
            (KEYS.deserialize(r.key), orjson.loads(r.value or b"null"), r.timestamp, r.headers)
            for r in read_committed_partition(self.bootstrap, self.sink, 0)
        ]

    def run_through_a_crash(self, expected: dict[Windowed[str], int]) -> list[Any]:
        """Start, feed, see the worker kill itself mid-emission, restart, and wait for
        every expected window among the outputs."""
        self.worker.wait_ready(60)
        self.produce(events(self.base))
        assert self.worker.wait_exit(90) == -9
        self.worker.start().wait_ready(60)
        found: list[Any] = wait_until(
            lambda: (got := self.outputs()) and expected.keys() <= {o[0] for o in got} and got,
            90,
            message=lambda: f"{len(expected)} windows among {len(self.outputs())} outputs",
        )
        return found


@pytest.mark.duration(40)
def test_emit_final_results_come_exactly_once_across_a_kill_9(
    worker_factory: Any, tmp_path: Path
) -> None:
    counts = CountsApp(worker_factory, "exactly_once_v2", tmp_path / "crashed")
    expected = expected_results(events(counts.base))

    outputs = counts.run_through_a_crash(expected)

    assert (tmp_path / "crashed").exists(), "the worker crashed mid-emission"
    assert len(outputs) == len({o[0] for o in outputs}), "a window emitted twice"
    assert {window: value for window, value, _ts, _h in outputs} == expected
    assert all(not headers for _w, _v, _ts, headers in outputs)
    assert counts.worker.terminate() == 0


@pytest.mark.duration(40)
def test_emit_final_results_come_at_least_once_and_in_order_per_key(
    worker_factory: Any, tmp_path: Path
) -> None:
    counts = CountsApp(worker_factory, "at_least_once", tmp_path / "crashed")
    expected = expected_results(events(counts.base))

    outputs = counts.run_through_a_crash(expected)

    assert (tmp_path / "crashed").exists(), "the worker crashed mid-emission"
    assert all(expected[window] == value for window, value, _ts, _h in outputs)
    firsts: dict[str, list[int]] = defaultdict(list)
    for window, _value, _ts, _h in outputs:
        if window.start_ms not in firsts[window.key]:
            firsts[window.key].append(window.start_ms)
    assert all(starts == sorted(starts) for starts in firsts.values()), firsts
    assert counts.worker.terminate() == 0


def test_a_bad_window_stops_worker_start_with_exit_2_naming_the_key(
    worker_factory: Any, tmp_path: Path
) -> None:
    module = tmp_path / "bad_windows_app.py"
    module.write_text(
        "from worker.processing import Topology\n"
        "from worker.processing.windows import hopping\n"
        "from worker.serde import JSON, STR\n\n"
        "def build():\n"
        "    return Topology().add_source('in', 'in', STR, JSON).add_windowed_aggregation(\n"
        "        'agg', ['in'], hopping(1000, 2000, grace_ms=0), initializer=lambda: 0,\n"
        "        aggregator=lambda k, v, n: n + 1, emit='final', key_serde=STR,\n"
        "        value_serde=JSON)\n"
    )
    worker = worker_factory(
        "bad",
        args=["--app", "bad_windows_app:build"],
        env={"PYTHONPATH": f"{tmp_path}:{REPO}"},
    )
    assert worker.wait_exit(60) == 2
    assert "advance_ms" in worker.log_tail()
