"""The availability benchmark's three scenarios (rolling restart, scale-out, kill -9), each
on its own broker with the topology ``worker.examples.counting`` in 6 partitions, once per
processing guarantee, and what each observed: per membership event, every task's longest
stall and the tasks that moved. :mod:`benchmarks.availability` describes them and reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from benchmarks.availability_owners import (
    KILL,
    PARTITIONS,
    TASKS,
    Event,
    Move,
    moved_tasks,
    ownership,
    replay,
    worker_timeline,
)
from benchmarks.harness import (
    BenchmarkFailed,
    RunContext,
    new_application_id,
    readyz_tasks,
    side_by_side,
    start_broker,
    start_worker,
    stop_worker,
    wait_for,
    worker_settings,
)
from benchmarks.kafka_io import (
    ArrivalWatch,
    Record,
    SteadyProducer,
    create_topics,
    read_timestamps,
)
from worker.dev.processes import WorkerProcess
from worker.dev.stalls import longest_stalls, stalled_share
from worker.examples import counting
from worker.processing import timestamps
from worker.serde import JSON, STR

APP = "worker.examples.counting:build"
STALLED = 1.5  # s: a stall longer than this counts (issue 13)
EXACTLY_ONCE = "exactly_once_v2"
AT_LEAST_ONCE = "at_least_once"


@dataclass(frozen=True)
class Params:
    rate: int = 1000  # input records per second
    keys: int = 600
    commit_interval_ms: int = 100
    warm_seconds: float = 5.0  # input flowing before the first event
    event_seconds: float = 14.0  # after each (re)start, before the next event
    down_seconds: float = 6.0  # rolling restart: a stopped worker stays down this long
    scale_seconds: float = 18.0  # scale-out: between starts, and after the last
    kill_seconds: float = 20.0  # kill -9: dead this long before its restart
    workers: int = 3  # in the rolling restart and the kill -9 scenario; scale-out's target
    restarts: int = 3  # rolling restart: how many of the workers are restarted
    restart_killed: bool = True
    timeout: float = 120.0
    # Every scenario runs once per guarantee; exactly-once output is read as a
    # read_committed consumer sees it (issue 23).
    guarantees: tuple[str, ...] = (AT_LEAST_ONCE, EXACTLY_ONCE)
    # Run the scenarios side by side (each has its own broker): for the smoke test's
    # short quick run only; with the real rate they would slow each other down.
    parallel: bool = False


FULL = Params()


QUICK = Params(
    rate=300,
    keys=120,
    warm_seconds=1.0,
    event_seconds=5.0,
    down_seconds=4.0,
    scale_seconds=7.0,
    kill_seconds=10.0,
    workers=2,
    restarts=1,
    restart_killed=False,
    parallel=True,
    guarantees=(EXACTLY_ONCE,),
)


@dataclass
class EventOutcome:
    event: Event
    start: float
    end: float
    stalls: dict[str, float]  # task -> longest silent stretch in the window (s)
    moves: dict[str, Move]  # the tasks that changed owner

    @property
    def stalled_share(self) -> float:
        return stalled_share(self.stalls, STALLED)

    @property
    def moved_share(self) -> float:
        return len(self.moves) / len(self.stalls) if self.stalls else 0.0

    @property
    def kept_stalls(self) -> dict[str, float]:
        return {t: s for t, s in self.stalls.items() if t not in self.moves}


@dataclass
class ScenarioOutcome:
    key: str  # a key of SCENARIOS
    guarantee: str  # processing.guarantee of its workers
    t0: float  # epoch s: the input started
    end: float  # epoch s: the input stopped
    events: list[EventOutcome]
    # task -> when each output could be read (epoch s): its CreateTime under
    # at-least-once, its arrival at a read_committed consumer under exactly-once
    outputs: dict[str, list[float]]
    owners: dict[str, list[tuple[float, str | None]]]  # task -> (since, owner)
    rounds: dict[str, list[tuple[float, float]]]  # worker -> rebalance rounds (epoch s)


def input_records(keys: int, count: int, start: int) -> Iterator[Record]:
    """``count`` inputs of the counting app with ids from ``start``, keys round-robin."""
    for n in range(start, start + count):
        yield STR.serialize(f"key-{n % keys}"), JSON.serialize({"id": n})


class Group:
    """One scenario's broker, workers and the membership events sent to them."""

    def __init__(self, ctx: RunContext, params: Params, tag: str, guarantee: str) -> None:
        self.ctx = ctx
        self.params = params
        self.guarantee = guarantee
        self.tag = tag = f"{tag}-{'eos' if guarantee == EXACTLY_ONCE else 'alo'}"
        broker = start_broker(ctx, f"broker-{tag}")
        self.bootstrap = broker.bootstrap
        create_topics(self.bootstrap, {counting.INPUTS: PARTITIONS, counting.OUTPUTS: PARTITIONS})
        self.settings = worker_settings(
            self.bootstrap,
            new_application_id(f"bench-avail-{tag}"),
            {
                "commit.interval.ms": params.commit_interval_ms,
                "num.standby.replicas": 1,
                # Stalls are silences in the outputs' timestamps: stamp them when written.
                "timestamp.extractor": timestamps.WALL_CLOCK,
                "processing.guarantee": guarantee,
            },
        )
        self.arrivals: ArrivalWatch | None = None
        self.workers: dict[str, WorkerProcess] = {}
        self.exits: dict[str, list[float]] = {}
        self.events: list[Event] = []
        self.input: SteadyProducer | None = None
        self.t0 = 0.0

    def start(self, name: str, event: bool = True) -> WorkerProcess:
        at = time.time()
        worker = self.workers.get(name)
        if worker is None:
            worker = start_worker(self.ctx, f"{self.tag}-{name}", self.settings, app=APP)
            self.workers[name] = worker
            self.exits[name] = []
        else:
            self.ctx.own(worker.start, worker.close)  # again, over the same state dir
        if event:
            self.events.append(Event(at, "start", name))
        return worker

    def stop(self, name: str) -> None:
        # A SIGTERMed worker stops processing at once: its tasks are given up at the signal.
        at = time.time()
        self.events.append(Event(at, "SIGTERM", name))
        self.exits[name].append(at)
        stop_worker(self.workers[name])

    def kill(self, name: str) -> None:
        at = time.time()
        self.events.append(Event(at, KILL, name))
        self.exits[name].append(at)
        self.workers[name].kill()

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.workers.values() if w.alive]

    def wait_balanced(self) -> None:
        """Every task active and running on exactly one worker, each worker its share,
        no warmup left."""
        wait_for(
            lambda: _balanced(self.alive()),
            self.params.timeout,
            f"{self.tag}: the tasks spread over {len(self.alive())} worker(s)",
            interval=0.3,
            alive=self.alive(),
        )

    def start_input(self) -> None:
        if self.guarantee == EXACTLY_ONCE:
            self.arrivals = ArrivalWatch(self.bootstrap, counting.OUTPUTS)
            self.ctx.own(self.arrivals.start, self.arrivals.close)
        keys = self.params.keys
        self.input = SteadyProducer(
            self.bootstrap,
            counting.INPUTS,
            lambda count, start: input_records(keys, count, start),
            self.params.rate,
        )
        self.t0 = time.time()
        self.ctx.own(self.input.start, self.input.close)

    def begin(self, names: Sequence[str]) -> None:
        """Start the first workers (no events), wait until they share the tasks, start
        the input and let it flow ``warm_seconds``."""
        for name in names:
            self.start(name, event=False)
        self.wait_balanced()
        self.start_input()
        self.pause(self.params.warm_seconds)

    def pause(self, seconds: float) -> None:
        """Let the scenario run (pacing); fail at once if a worker that should run died."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            for worker in self.workers.values():
                if worker.pids and not worker.alive and worker.returncode not in (0, -9):
                    raise BenchmarkFailed(
                        f"{worker.name} exited with {worker.returncode}\n{worker.log_tail(30)}"
                    )
            time.sleep(min(0.5, left))

    def finish(self, key: str) -> ScenarioOutcome:
        end = time.time()
        assert self.input is not None
        self.input.close()
        for name, worker in self.workers.items():
            if worker.alive:
                stop_worker(worker)
                self.exits[name].append(time.time())
        outputs = self._outputs()
        timelines = {
            name: worker_timeline(name, worker.log_events(), self.exits[name])
            for name, worker in self.workers.items()
        }
        takeovers = replay(timelines)
        bounds = [e.at for e in self.events] + [end]
        events = []
        for event, (start, stop) in zip(
            self.events, zip(bounds, bounds[1:], strict=False), strict=True
        ):
            events.append(
                EventOutcome(
                    event,
                    start,
                    stop,
                    longest_stalls(outputs, start, stop),
                    moved_tasks(takeovers, timelines, start, stop),
                )
            )
        return ScenarioOutcome(
            key=key,
            guarantee=self.guarantee,
            t0=self.t0,
            end=end,
            events=events,
            outputs=outputs,
            owners=ownership(takeovers),
            rounds={name: t.rounds for name, t in timelines.items()},
        )

    def _outputs(self) -> dict[str, list[float]]:
        """Per task, when each of its outputs could be read (see ScenarioOutcome)."""
        if self.arrivals is not None:
            arrivals = self.arrivals.close()
            return {f"0_{p}": arrivals.get(p, []) for p in range(PARTITIONS)}
        stamps = read_timestamps(self.bootstrap, counting.OUTPUTS)
        return {f"0_{p}": [t / 1000 for t in ts] for p, ts in stamps.items()}


def _balanced(workers: Sequence[WorkerProcess]) -> bool:
    if not workers:
        return False
    running: list[str] = []
    for worker in workers:
        tasks = readyz_tasks(worker)
        mine = [t["task_id"] for t in tasks if t["kind"] == "active" and t["state"] == "running"]
        if any(t["kind"] == "warmup" for t in tasks) or len(mine) != PARTITIONS // len(workers):
            return False
        running += mine
    return sorted(running) == TASKS


def worker_names(count: int) -> list[str]:
    return [f"w{i + 1}" for i in range(count)]


def rolling_restart(ctx: RunContext, params: Params, guarantee: str) -> ScenarioOutcome:
    group = Group(ctx, params, "rolling", guarantee)
    names = worker_names(params.workers)
    group.begin(names)
    for name in names[: params.restarts]:
        group.stop(name)
        group.pause(params.down_seconds)
        group.start(name)
        group.pause(params.event_seconds)
    return group.finish("rolling")


def scale_out(ctx: RunContext, params: Params, guarantee: str) -> ScenarioOutcome:
    group = Group(ctx, params, "scale", guarantee)
    names = worker_names(params.workers)
    group.begin(names[:1])
    for name in names[1:]:
        group.start(name)
        group.pause(params.scale_seconds)
        group.wait_balanced()  # a move still under way would fall outside its window
    return group.finish("scale_out")


def kill_one(ctx: RunContext, params: Params, guarantee: str) -> ScenarioOutcome:
    group = Group(ctx, params, "kill", guarantee)
    names = worker_names(params.workers)
    group.begin(names)
    victim = names[-1]
    group.kill(victim)
    group.pause(params.kill_seconds)
    if params.restart_killed:
        group.start(victim)
        group.pause(params.event_seconds)
    return group.finish("kill")


SCENARIOS: dict[str, Callable[[RunContext, Params, str], ScenarioOutcome]] = {
    "rolling": rolling_restart,
    "scale_out": scale_out,
    "kill": kill_one,
}


@dataclass(frozen=True)
class Measured:
    """What every scenario observed."""

    params: Params
    outcomes: list[ScenarioOutcome]  # per guarantee, in the order of SCENARIOS


def measure(ctx: RunContext, params: Params) -> Measured:
    """Every scenario under every guarantee, one after another (side by side in quick mode)."""
    calls = {
        f"{key}-{guarantee}": partial(scenario, ctx, params, guarantee)
        for guarantee in params.guarantees
        for key, scenario in SCENARIOS.items()
    }
    if params.parallel:
        return Measured(params, list(side_by_side(calls).values()))
    return Measured(params, [call() for call in calls.values()])
