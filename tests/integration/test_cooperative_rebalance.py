"""Cooperative rebalancing on the broker: tasks that stay with their owner never stop.

Real worker processes run ``worker.examples.counting`` (one output per input; a key stays in
its partition, so partition ``p`` of ``outputs`` is written by task ``0_p`` alone) over 6
partitions with a standby per task, while a background producer sends ~700 inputs/s over
120 keys. Around each membership event (a worker joins; a worker is restarted) the test
reads every worker's ``/tasks`` before and after: a task active on the same worker before
and after the event *stayed*, the others *moved*. Stalls are read from the outputs, from
their record timestamps (written when the task processed the input), per partition,
over the event's window: from just before the event until the group settled and every
partition produced again (worker/dev/stalls.py).

Asserted: a task that stayed never went longer than 1.5 s without output; every moved
task resumed; once the input stops and everything is processed, every input has an output
(at-least-once, duplicates allowed) or exactly one (exactly_once_v2, read as Kafka's
read_committed does: tests/support/transaction_log.py).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import confluent_kafka as ck
import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.fixtures import WorkerFactory
from tests.support.traffic import SteadyProducer
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess
from worker.dev.stalls import max_gap
from worker.examples import counting
from worker.processing import timestamps

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]

PARTITIONS = 6
TASKS = [f"0_{p}" for p in range(PARTITIONS)]
KEYS = [f"key-{i:03d}" for i in range(120)]
PER_TICK = 70  # every 0.1 s: ~700 inputs/s, ~115 per partition and second
MAX_STALL = 1.5  # s: the longest silence a task that stays may show
RESUMED_AFTER = 0.5  # s: every partition produced this long after the group settled
SETTLE_TIMEOUT = 45.0
DRAIN_TIMEOUT = 45.0
APP = "worker.examples.counting:build"
# The outputs' timestamps show when each partition last produced: stamp them when written.
SETTINGS = {
    "num.standby.replicas": 1,
    "commit.interval.ms": 200,
    "timestamp.extractor": timestamps.WALL_CLOCK,
}


# -- input and output ------------------------------------------------------------------


class Inputs:
    """The ``inputs`` and ``outputs`` topics, and a producer of numbered inputs.

    ``produce`` runs on the SteadyProducer's thread only; ``sent`` counts what it queued.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        self._producer = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",  # the worker's sink partitioner
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        self._rng = random.Random(20261213)
        self._failures: list[str] = []
        self.sent = 0

    def _delivered(self, err: ck.KafkaError | None, _msg: object) -> None:
        if err is not None:
            self._failures.append(str(err))

    def produce(self, count: int) -> None:
        for _ in range(count):
            key = self._rng.choice(KEYS).encode()
            value = orjson.dumps({"id": self.sent})
            self._producer.produce(counting.INPUTS, value, key, on_delivery=self._delivered)
            self.sent += 1
        self._producer.poll(0)

    def flush(self) -> None:
        """Wait until every input is acknowledged, then let the producer go."""
        remaining = self._producer.flush(30)
        assert not remaining and not self._failures, f"inputs: {self._failures or remaining}"
        del self._producer


class OutputWatch:
    """The latest output timestamp (ms) per partition, followed live from a thread.

    Reads uncommitted data: it only tells when each task last produced, to wait for
    resumption. Stalls and counts come from the committed log at the end.
    """

    def __init__(self, bootstrap: str) -> None:
        self._consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "test-output-watch",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self._consumer.assign(
            [ck.TopicPartition(counting.OUTPUTS, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        self._latest: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-watch", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self._consumer.consume(10000, 0.2):
                    if msg.error() is None:
                        partition, stamp = msg.partition(), msg.timestamp()[1]
                        with self._lock:
                            if stamp > self._latest.get(partition, 0):  # type: ignore[arg-type]
                                self._latest[partition] = stamp  # type: ignore[index]
        except BaseException as exc:  # reported by latest()
            self.error = exc
        finally:
            self._consumer.close()

    def latest(self) -> dict[int, int]:
        if self.error is not None:
            raise AssertionError(f"output watch failed: {self.error!r}")
        with self._lock:
            return dict(self._latest)

    def __enter__(self) -> OutputWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def committed_outputs(bootstrap: str) -> list[tuple[int, int, dict[str, int]]]:
    """(partition, timestamp ms, value) of every committed output record."""
    return [
        (p, r.timestamp, orjson.loads(r.value))
        for p, r in read_committed_topic(bootstrap, counting.OUTPUTS, PARTITIONS)
        if r.value
    ]


# -- the group as /tasks shows it -------------------------------------------------------


def tasks_view(worker: WorkerProcess) -> tuple[int, frozenset[str]] | None:
    """(generation, active task ids) from the worker's ``/tasks``; None if it does not answer."""
    try:
        status, body = worker.get("/tasks")
    except OSError:
        return None
    if status != 200:
        return None
    listing = orjson.loads(body)
    actives = frozenset(t["task_id"] for t in listing["tasks"] if t["kind"] == "active")
    return int(listing.get("generation") or -1), actives


def settled_owners(workers: Sequence[WorkerProcess]) -> dict[str, str]:
    """task -> worker name once the group has settled, else {}.

    Settled: every worker is ready, all report the same generation, each is active for
    its even share of the tasks, and every task is active on exactly one worker.
    """
    share = PARTITIONS // len(workers)
    owners: dict[str, str] = {}
    generations = set()
    for w in workers:
        if w.returncode is not None:
            raise AssertionError(f"{w.name} exited with {w.returncode}\n{w.log_tail()}")
        view = tasks_view(w)
        if view is None or not w.ready():
            return {}
        generation, actives = view
        generations.add(generation)
        if len(actives) != share:
            return {}
        for task in actives:
            if task in owners:
                return {}
            owners[task] = w.name
    if len(generations) != 1 or sorted(owners) != TASKS:
        return {}
    return owners


def describe(workers: Sequence[WorkerProcess]) -> str:
    parts = []
    for w in workers:
        view = tasks_view(w)
        shown = "no answer" if view is None else f"gen {view[0]} active {sorted(view[1])}"
        parts.append(f"{w.name}: {shown}, ready={w.ready()}")
    return "; ".join(parts)


def wait_settled(workers: Sequence[WorkerProcess], what: str) -> dict[str, str]:
    return wait_until(
        lambda: settled_owners(workers),
        SETTLE_TIMEOUT,
        interval=0.2,
        message=lambda: f"{what}: the group to settle ({describe(workers)})",
    )


# -- membership events ------------------------------------------------------------------


@dataclass
class Event:
    """One membership change: who owned what before and after, and its window (ms)."""

    name: str
    start_ms: int
    before: dict[str, str]
    after: dict[str, str] = field(default_factory=dict)
    settled_ms: int = 0
    end_ms: int = 0
    restarted: str | None = None  # a worker whose own tasks stopped with its process

    @property
    def stayed(self) -> list[str]:
        return [
            t for t in TASKS if self.before[t] == self.after[t] and self.before[t] != self.restarted
        ]

    def fate(self, task: str) -> str:
        if task in self.stayed:
            return "stayed"
        if self.before[task] == self.restarted:
            return "restarted"
        return "moved"


def now_ms() -> int:
    return int(time.time() * 1000)


def membership_event(
    name: str,
    before: dict[str, str],
    act: Callable[[], object],
    group: Sequence[WorkerProcess],
    watch: OutputWatch,
    restarted: str | None = None,
) -> Event:
    """Do ``act``; the event lasts until the group settled and every partition produced
    again ``RESUMED_AFTER`` seconds after that (so a moved task resumed)."""
    event = Event(name, now_ms(), before, restarted=restarted)
    act()
    event.after = wait_settled(group, name)
    event.settled_ms = now_ms()
    target = event.settled_ms + int(RESUMED_AFTER * 1000)
    wait_for_output_after(watch, target, f"{name}: every task producing again")
    event.end_ms = now_ms()
    return event


def wait_for_output_after(watch: OutputWatch, since_ms: int, what: str) -> None:
    def silent() -> list[str]:
        latest = watch.latest()
        return [TASKS[p] for p in range(PARTITIONS) if latest.get(p, 0) < since_ms]

    wait_until(
        lambda: not silent(), 30, interval=0.1, message=lambda: f"{what} (silent: {silent()})"
    )


# -- the scenarios ---------------------------------------------------------------------


def new_worker(
    worker_factory: WorkerFactory, name: str, bootstrap: str, guarantee: str, start: bool = True
) -> WorkerProcess:
    settings = {**SETTINGS, "bootstrap.servers": bootstrap, "processing.guarantee": guarantee}
    return worker_factory(name, settings=settings, args=["--app", APP], start=start)


@contextmanager
def flowing(inputs: Inputs) -> Iterator[OutputWatch]:
    """Input flows and the output is watched for the length of the block."""
    with OutputWatch(inputs.bootstrap) as watch, SteadyProducer(inputs, PER_TICK, 0.1):
        yield watch
    inputs.flush()


def scale_out(bootstrap: str, worker_factory: WorkerFactory, guarantee: str) -> Outcome:
    inputs = Inputs(bootstrap)
    group = [new_worker(worker_factory, "a", bootstrap, guarantee)]
    owners = wait_settled(group, "a alone")
    events = []
    with flowing(inputs) as watch:
        wait_for_output_after(watch, now_ms(), "a processing every task")
        for name in ("b", "c"):
            newcomer = new_worker(worker_factory, name, bootstrap, guarantee, start=False)
            group.append(newcomer)
            event = membership_event(f"{name} joins", owners, newcomer.start, group, watch)
            owners = event.after
            events.append(event)
    return Outcome(inputs, group, events)


def rolling_restart(bootstrap: str, worker_factory: WorkerFactory, guarantee: str) -> Outcome:
    inputs = Inputs(bootstrap)
    group = [new_worker(worker_factory, n, bootstrap, guarantee) for n in ("a", "b", "c")]
    owners = wait_settled(group, "three workers")
    events = []

    def restart(worker: WorkerProcess) -> None:
        assert worker.terminate() == 0, f"{worker.name}: a clean stop exits 0"
        worker.start()  # over the same state dir

    with flowing(inputs) as watch:
        wait_for_output_after(watch, now_ms(), "every task processing")
        for w in group:
            event = membership_event(
                f"{w.name} restarts", owners, partial(restart, w), group, watch, w.name
            )
            owners = event.after
            events.append(event)
    return Outcome(inputs, group, events)


# -- the checks ------------------------------------------------------------------------


@dataclass
class Outcome:
    inputs: Inputs
    group: list[WorkerProcess]
    events: list[Event]


def drained_outputs(outcome: Outcome) -> list[tuple[int, int, dict[str, int]]]:
    """The committed outputs, once every input has at least one."""
    expected = outcome.inputs.sent
    seen: list[list[tuple[int, int, dict[str, int]]]] = []

    def complete() -> bool:
        seen.append(committed_outputs(outcome.inputs.bootstrap))
        return len({value["id"] for _, _, value in seen[-1]}) == expected

    wait_until(
        complete,
        DRAIN_TIMEOUT,
        interval=1.0,
        message=lambda: (
            f"an output for every one of {expected} inputs "
            f"(have {len({v['id'] for _, _, v in seen[-1]})})"
        ),
    )
    return seen[-1]


def check(outcome: Outcome, exactly_once: bool) -> None:
    outputs = drained_outputs(outcome)
    stamps: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
    for partition, stamp, _ in outputs:
        stamps[partition].append(stamp)
    problems: list[str] = []
    report: list[str] = []
    for event in outcome.events:
        gaps = {
            t: max_gap(stamps[p], event.start_ms, event.end_ms) / 1000 for p, t in enumerate(TASKS)
        }
        report.append(
            f"{event.name} ({(event.end_ms - event.start_ms) / 1000:.1f} s): "
            + ", ".join(
                f"{t} {event.fate(t)} {event.before[t]}->{event.after[t]} {gaps[t]:.2f} s"
                for t in TASKS
            )
        )
        for p, t in enumerate(TASKS):
            if not any(event.settled_ms <= s <= event.end_ms for s in stamps[p]):
                problems.append(f"{event.name}: {t} ({event.fate(t)}) did not resume")
        if not event.stayed:
            problems.append(f"{event.name}: no task stayed with its owner")
        for t in event.stayed:
            if gaps[t] > MAX_STALL:
                problems.append(
                    f"{event.name}: {t} stayed on {event.before[t]} but produced nothing "
                    f"for {gaps[t]:.2f} s (> {MAX_STALL} s)"
                )
    ids = Counter(value["id"] for _, _, value in outputs)
    sent = outcome.inputs.sent
    duplicates = len(outputs) - len(ids)
    repeated: Counter[str] = Counter()  # task -> outputs beyond the first for its inputs
    firsts: set[int] = set()
    for partition, _, value in outputs:
        if value["id"] in firsts:
            repeated[TASKS[partition]] += 1
        firsts.add(value["id"])
    report.append(
        f"{sent} inputs, {len(outputs)} outputs, {duplicates} duplicates"
        + (f" (by task: {dict(sorted(repeated.items()))})" if repeated else "")
    )
    missing = sorted(set(range(sent)) - set(ids))
    if missing:
        problems.append(f"{len(missing)} inputs without an output, e.g. {missing[:5]}")
    if exactly_once and duplicates:
        problems.append(f"exactly-once: {duplicates} inputs with more than one output")
    print("\n".join(report))
    assert not problems, "\n".join(["", *problems, "per event:", *report])
    for w in outcome.group:
        assert w.terminate() == 0, f"{w.name}: a clean stop exits 0"


@pytest.mark.duration(38)
def test_scale_out_stops_only_the_tasks_that_move(own_broker, worker_factory):
    outcome = scale_out(own_broker.bootstrap, worker_factory, "at_least_once")
    check(outcome, exactly_once=False)


@pytest.mark.duration(22)
def test_rolling_restart_stops_only_the_restarted_workers_tasks(own_broker, worker_factory):
    outcome = rolling_restart(own_broker.bootstrap, worker_factory, "at_least_once")
    check(outcome, exactly_once=False)


@pytest.mark.duration(37)
def test_exactly_once_scale_out_keeps_one_output_per_input(own_broker, worker_factory):
    outcome = scale_out(own_broker.bootstrap, worker_factory, "exactly_once_v2")
    check(outcome, exactly_once=True)
