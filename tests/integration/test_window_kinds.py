"""Every window kind on the broker through a restart, a kill -9 mid-emission, a worker
joining and the first worker killed: emit-final results exactly once under exactly-once,
at least once and in order per key under at-least-once; late records dropped and counted.

The app (``tests.apps.window_kinds``) runs a tumbling, a hopping, a sliding and a session
aggregation, each collecting the event times of its windows' records, over one input of
two partitions. The input comes in four phases of 20 s of event time, each key's records
in time order but for one in 12, which is 15 s behind its partition's newest (late for
every window of every kind), and another in 12, 3.5 s behind (late for some windows of
some kinds). The run:

1. worker ``a`` processes phase 1: ``worker_late_records_total`` of each aggregation
   counts the phase's late records, and ``a`` stops cleanly and starts again;
2. phase 2: ``a`` SIGKILLs itself while one kind's final results pass its output
   processor, before their commit, and is started again over its state;
3. worker ``b`` joins and takes one of the two tasks; phase 3;
4. ``a`` is killed (kill -9) and ``b`` takes its task; phase 4, which ends with a record
   per partition far ahead, closing every earlier window.

The expected results are the reference models' (tests/support/window_models.py), per
partition. Outputs are read as a read_committed consumer on Kafka sees them
(tests/support/transaction_log.py: the test broker serves aborted records).

``a`` is killed in step 4 only once its transactions have committed: the test broker
never aborts a dead producer's open transaction and serves its records to the
read_committed restore of the task's new owner (docs/platform-notes.md), which would test
the broker, not the worker. Step 2 kills it mid-transaction and restarts it, whose
``init_transactions`` aborts the open one, as on Kafka.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import window_kinds as app
from tests.support.transaction_log import read_committed_partition
from tests.support.waiting import wait_until
from tests.support.window_models import (
    Record,
    closed_windows,
    fixed_model,
    session_model,
    sliding_model,
)
from worker.dev.processes import WorkerProcess
from worker.processing.windows import SessionWindows, TimeWindows, Window
from worker.serde import STR
from worker.windowed_serde import Windowed, WindowedSerde

pytestmark = pytest.mark.integration

APP = "tests.apps.window_kinds:build"
REPO = str(Path(__file__).resolve().parents[2])  # the worker processes import tests.apps
PARTITIONS = 2
PHASE_MS = 20_000
LATE_BY_MS = 15_000
BEHIND_MS = 3_500  # late for some windows of some kinds only
KEYS = WindowedSerde(STR)
Results = dict[Windowed[str], list[int]]


def phase_records(rng: random.Random, partition: int, start_ms: int) -> list[Record]:
    """One phase of a partition: two keys, two 5 s bursts of a record every 50-500 ms
    with 6 s of silence between them (every session closes); one record in 12 late, and
    one in 12 ``BEHIND_MS`` behind."""
    keys = [f"p{partition}-k{i}" for i in range(2)]
    found: list[Record] = []
    newest = start_ms
    for burst in (start_ms + 1_000, start_ms + 12_000):
        t = burst
        while t < burst + 5_000:
            if len(found) % 12 == 11:
                found.append((rng.choice(keys), newest - LATE_BY_MS))
                continue
            if len(found) % 12 == 5:
                found.append((rng.choice(keys), newest - BEHIND_MS))
                continue
            found.append((rng.choice(keys), t))
            newest = t
            t += rng.choice((50, 100, 250, 500))
    return found


def model(kind: str, recs: list[Record]) -> tuple[Results, int]:
    """(the windows closed at the end with their records, late records) of one partition."""
    windows = app.KINDS[kind]
    if isinstance(windows, TimeWindows):
        _updates, contents, late, observed = fixed_model(windows, recs)
    elif isinstance(windows, SessionWindows):
        _updates, contents, late, observed = session_model(windows, recs)
    else:
        contents, late, observed = sliding_model(windows, recs)

    def close_time(window: Windowed[str]) -> int:
        return windows.close_time(Window(window.start_ms, window.end_ms))

    return closed_windows(contents, observed, close_time), late


class KindsApp:
    """Fresh topics on the session broker, the input produced so far, the outputs."""

    def __init__(self, worker_factory: Any, guarantee: str, crash_kind: str, marker: Path):
        self.factory = worker_factory
        self.bootstrap: str = worker_factory.bootstrap
        suffix = uuid.uuid4().hex[:8]
        self.source, self.sink = f"wkinds-in-{suffix}", f"wkinds-out-{suffix}"
        self.outputs = {kind: app.output_topic(self.sink, kind) for kind in app.KINDS}
        topics = [NewTopic(self.source, PARTITIONS, 1)]
        topics += [NewTopic(topic, 1, 1) for topic in self.outputs.values()]
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics(topics).values():
            future.result(30)
        # event times near now: the changelogs' time retention would drop older ones
        self.base = int(time.time() * 1000) // 10_000 * 10_000 - 300_000
        self.rng = random.Random(22)
        self.produced: dict[int, list[Record]] = defaultdict(list)
        self.phases = 0
        self.env = {
            "PYTHONPATH": REPO,
            app.INPUT_ENV: self.source,
            app.OUTPUT_ENV: self.sink,
            app.CRASH_KIND_ENV: crash_kind,
            app.CRASH_AT_ENV: str(self.base + PHASE_MS),  # a window of phase 2
            app.CRASH_MARKER_ENV: str(marker),
        }
        self.settings = {"processing.guarantee": guarantee, "commit.interval.ms": 200}

    def worker(self, name: str) -> WorkerProcess:
        return self.factory(name, settings=self.settings, args=["--app", APP], env=self.env)

    def produce_phase(self, *, last: bool = False) -> None:
        """The next phase on both partitions (the last one with a closing record each)."""
        start = self.base + self.phases * PHASE_MS
        self.phases += 1
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        for partition in range(PARTITIONS):
            recs = phase_records(self.rng, partition, start)
            if last:  # on a multiple of every window's advance, far past every close
                recs.append((f"p{partition}-end", start + 3 * PHASE_MS))
            for key, ts in recs:
                value = orjson.dumps({"ts": ts})
                producer.produce(
                    self.source, value, key.encode(), partition=partition, timestamp=ts
                )
            self.produced[partition] += recs
        assert producer.flush(30) == 0

    def committed_everything(self) -> bool:
        """The group's committed offsets are at the end of every input partition (under
        exactly-once: the transactions that processed them have committed)."""
        consumer = ck.Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": self.factory.application_id}
        )
        try:
            wanted = [ck.TopicPartition(self.source, p) for p in range(PARTITIONS)]
            offsets = consumer.committed(wanted, timeout=10)
        finally:
            consumer.close()
        return all(tp.offset == len(self.produced[tp.partition]) for tp in offsets)

    def expected(self, kind: str) -> tuple[Results, int]:
        results: Results = {}
        late = 0
        for recs in self.produced.values():
            closed, late_here = model(kind, recs)
            results.update(closed)
            late += late_here
        return results, late

    def results(self, kind: str) -> list[tuple[Windowed[str], list[int]]]:
        return [
            (KEYS.deserialize(r.key), orjson.loads(r.value or b"null"))
            for r in read_committed_partition(self.bootstrap, self.outputs[kind], 0)
        ]

    def all_results(self) -> dict[str, list[tuple[Windowed[str], list[int]]]] | None:
        """Every kind's outputs once each holds every expected window, else None."""
        found = {kind: self.results(kind) for kind in app.KINDS}
        return None if any(self.missing(kind, found[kind]) for kind in found) else found

    def missing(self, kind: str, outputs: list[tuple[Windowed[str], Any]]) -> list[Any]:
        missing = self.expected(kind)[0].keys() - {window for window, _ in outputs}
        return sorted(missing, key=lambda w: (w.key, w.start_ms, w.end_ms))

    def describe_missing(self) -> str:
        missing = {kind: self.missing(kind, self.results(kind)) for kind in app.KINDS}
        return "every expected window; missing: " + "; ".join(
            f"{kind} {len(m)} of {len(self.expected(kind)[0])} ({m[:2]})"
            for kind, m in missing.items()
        )


def active(worker: WorkerProcess) -> float:
    return worker.metric("worker_tasks", kind="active")


@pytest.mark.parametrize(
    "guarantee, crash_kind", [("exactly_once_v2", "session"), ("at_least_once", "sliding")]
)
@pytest.mark.duration(35)
def test_every_window_kind_emits_its_final_results_through_restarts_kills_and_moves(
    worker_factory: Any, tmp_path: Path, guarantee: str, crash_kind: str
) -> None:
    kinds = KindsApp(worker_factory, guarantee, crash_kind, tmp_path / "crashed")
    a = kinds.worker("a")
    a.wait_ready(60)

    # 1. late records dropped and counted, per aggregation; a clean restart
    kinds.produce_phase()
    late = {kind: kinds.expected(kind)[1] for kind in app.KINDS}
    assert all(late.values())

    def counted() -> dict[str, float]:
        return {kind: a.metric("worker_late_records_total", processor=kind) for kind in late}

    wait_until(lambda: counted() == late, 60, message=lambda: f"{counted()} late, not {late}")
    assert a.terminate() == 0
    a.start().wait_ready(60)

    # 2. a kill -9 between a final result and its commit, and a restart
    kinds.produce_phase()
    assert a.wait_exit(60) == -9
    assert (tmp_path / "crashed").exists(), f"{crash_kind} crashed the worker mid-emission"
    a.start().wait_ready(60)

    # 3. a second worker joins and takes a task
    b = kinds.worker("b")
    wait_until(lambda: b.ready() and active(a) == active(b) == 1, 90, message="a task each")
    kinds.produce_phase()

    # 4. the first worker killed once phase 3 is committed: its task moves
    wait_until(kinds.committed_everything, 60, message="phase 3 committed")
    assert a.kill() == -9
    wait_until(lambda: b.ready() and active(b) == 2, 90, message="b took both tasks")
    kinds.produce_phase(last=True)
    found = wait_until(kinds.all_results, 60, message=kinds.describe_missing)
    assert found is not None

    for kind, outputs in found.items():
        expected = kinds.expected(kind)[0]
        assert expected, kind
        if guarantee == "exactly_once_v2":
            assert len(outputs) == len({window for window, _ in outputs}), f"{kind}: twice"
            assert dict(outputs) == expected, kind
            continue
        # at least once: a record may count twice in a window, none is missing or foreign
        assert all(set(times) == set(expected[window]) for window, times in outputs), kind
        firsts: dict[str, list[int]] = defaultdict(list)
        for window, _times in outputs:
            if window.end_ms not in firsts[window.key]:
                firsts[window.key].append(window.end_ms)
        assert all(ends == sorted(ends) for ends in firsts.values()), (kind, firsts)
    assert b.terminate() == 0
