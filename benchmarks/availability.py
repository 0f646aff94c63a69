"""Availability through membership changes: which tasks stop, for how long, and whether
they had to (issue 13, item 5).

Three scenarios, each on its own broker, with the topology ``worker.examples.counting``
(one output per input; ``--app worker.examples.counting:build``), ``inputs`` and ``outputs``
in 6 partitions, so 6 tasks ``0_0``..``0_5``. Input flows at ``rate`` records/s over
``keys`` keys (every partition) from before the first membership event to the end.
Workers: ``num.standby.replicas=1``, ``commit.interval.ms`` 100, the harness's group
timing, otherwise defaults (``max.warmup.replicas`` 2, ``acceptable.recovery.lag``
10,000).

- **Rolling restart**: three workers; one after the other is SIGTERMed, stays down for
  ``down_seconds`` once it exited, is started again over the same state dir, and runs
  ``event_seconds`` before the next one. The pause between the stop and the start keeps
  the leave's rebalance and the rejoin's in separate windows; restarted at once, both
  would fall into one window and neither could be told apart.
- **Scale-out**: one worker, ready before the input starts; a second and a third start
  ``scale_seconds`` apart, or later when the tasks have not spread over the workers by
  then (a loaded machine): each event's window holds its whole move.
- **Kill -9**: three workers; one is SIGKILLed, stays dead for ``kill_seconds`` (its
  group session has to expire first), then is started again over its state dir (the
  restart after a crash is the scenario's second event); ``event_seconds`` follow.

**Membership events and their windows.** Each SIGTERM, start and kill is an event, timed
by the benchmark when it sends the signal or launches the process; its window runs to the
next event (the last one's to the end of the input).

**Stalls** come from the output: librdkafka stamps each output record (CreateTime) when
the worker produces it, and task ``0_p`` writes only to partition ``p`` of ``outputs``, so
a silent stretch in a partition's timestamps is a stretch in which that task produced
nothing, whoever owned it (:mod:`worker.dev.stalls`). A task's stall in an event is its
longest silent stretch in the window, the window's edges included.

**Owners come from the workers' JSON logs, not from polling ``/tasks``.** The logs hold
every assignment a worker applied, stamped to the microsecond, written before a kill -9
can lose them, and readable after the worker is gone; a poller sees a dead worker as
nothing, a busy one late, and misses an assignment that lasted less than its interval.
What the benchmark reads, per worker (the lead engineer's membership rewrite should keep
these events and fields, or update ``_worker_timeline``):

- ``assignment.applied`` with ``active``, ``standby`` and ``warmup`` lists of task ids:
  the worker's whole assignment from that moment (the owner of a task is the worker
  whose latest applied assignment lists it as active; a worker gives up every task
  when the benchmark sends it SIGTERM or SIGKILL);
- ``initial_standbys.opened`` with ``tasks``: local state it opened before its first
  assignment (a restarted worker's copy of its old tasks);
- ``restore.done`` with ``task_id``, ``role`` and ``records``: what a moved task restored
  on its new owner before it ran (a caught-up copy restores a short tail);
- rebalance rounds, for the report only: a round starts at a ``membership.transition``
  out of ``stable`` or into ``joining`` (the member's state machine), and ends at the next
  ``membership.assigned`` or ``membership.transition`` into ``stable``, whichever comes
  first; ``membership.started`` begins a new run. Unknown events are ignored.

A task **changed owner** in an event when some worker other than its owner at the start of
the window became its owner in the window, or its owner's process exited. For a moved
task the report names where it went, what the new owner held of it before (``standby``,
``warmup``, ``local state`` for an initial standby, or nothing), the records it restored
there, and its **handover**: from its old owner giving it up (an applied assignment
without it, or the signal that stopped the old owner) to the new owner's applied
assignment with it. The eager protocol hands a task over within one round, so its
handover is about 0; the cooperative one revokes in one round and assigns in the
follow-up round, so its handover is that follow-up round; after a kill -9 it also holds
the wait for the dead member's session to expire.

**Targets** (issue 13): a task that did not change owner never stalls longer than 1.5 s;
per event the share of tasks that stalled longer than 1.5 s is at most the share that
changed owner; a moved task that had a standby, warmup or local copy stalls at most its
handover plus 0.5 s (one follow-up round plus 0.5 s). The eager protocol misses them all
(every rebalance stops every task); the figures the issue measured on it are the
baselines.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from benchmarks import plots
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
from benchmarks.kafka_io import Record, SteadyProducer, create_topics, read_timestamps
from benchmarks.log_events import log_time
from benchmarks.results import PlotPath, Result, Row, Target
from worker.dev.processes import WorkerProcess
from worker.dev.stalls import gap_intervals, longest_stalls, stalled_share
from worker.events import (
    ASSIGNMENT_APPLIED,
    INITIAL_STANDBYS_OPENED,
    MEMBERSHIP_ASSIGNED,
    MEMBERSHIP_STARTED,
    MEMBERSHIP_TRANSITION,
    RESTORE_DONE,
)
from worker.examples import counting
from worker.serde import JSON, STR

NAME = "availability"
TITLE = "Availability through membership changes"
APP = "worker.examples.counting:build"
PARTITIONS = 6
TASKS = [f"0_{p}" for p in range(PARTITIONS)]
STALLED = 1.5  # s: a stall longer than this counts (issue 13)
DRAWN = 0.5  # s: the plots draw silent stretches longer than this
ROUND_SLACK = 0.5  # s: a moved task with a copy may stall its handover plus this
SOURCE = "issue 13"


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
)

# The scenarios' names in the summary's rows (the same in quick mode).
SHORT = {"rolling": "rolling restart", "scale_out": "scale-out", "kill": "kill -9"}
# What the issue measured on the eager protocol (the same workloads): the baselines.
EAGER = {
    "rolling": (
        5.9,
        "for 93% of the restart events every partition stopped for more than 1.5 s; "
        "the longest gap 5.9 s",
    ),
    "scale_out": (4.1, "every partition stopped 3.2-4.1 s"),
    "kill": (9.6, "gaps of 5-9.6 s on every partition"),
}


# -- what a scenario observed -----------------------------------------------------------


@dataclass(frozen=True)
class Event:
    at: float  # epoch s, when the signal was sent or the process launched
    kind: str  # "SIGTERM", "start", "kill -9"
    worker: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.worker}"


@dataclass(frozen=True)
class Move:
    """A task that changed owner in an event's window."""

    before: str | None  # its owner at the window's start
    after: str | None  # the first other owner it got in the window (None: nobody yet)
    had: str | None  # what the new owner held of it before: standby, warmup, local state
    restored: int | None  # records it restored on the new owner before running
    handover_seconds: float | None  # from its old owner giving it up to the new one's assignment


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
    t0: float  # epoch s: the input started
    end: float  # epoch s: the input stopped
    events: list[EventOutcome]
    outputs: dict[str, list[float]]  # task -> output timestamps (epoch s)
    owners: dict[str, list[tuple[float, str | None]]]  # task -> (since, owner)
    rounds: dict[str, list[tuple[float, float]]]  # worker -> rebalance rounds (epoch s)


# -- the workers' logs ------------------------------------------------------------------


@dataclass
class _Change:
    """One worker's assignment from ``at`` on (``exited``: it owns nothing any more)."""

    at: float
    worker: str
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    local: frozenset[str] = frozenset()  # initial standbys opened from its state dir
    exited: bool = False
    first_of_run: bool = False


@dataclass
class _Timeline:
    changes: list[_Change] = field(default_factory=list)
    rounds: list[tuple[float, float]] = field(default_factory=list)
    restores: list[tuple[float, str, int]] = field(default_factory=list)  # (at, task, records)


def _tasks(value: Any) -> frozenset[str]:
    if isinstance(value, list | tuple):
        return frozenset(str(v) for v in value)
    return frozenset()


def _worker_timeline(
    name: str, events: Sequence[dict[str, Any]], exits: Sequence[float]
) -> _Timeline:
    """What one worker's log lines (every run of it) and its exits say, in time order."""
    timeline = _Timeline()
    round_start: float | None = None
    local: frozenset[str] = frozenset()
    for event in events:
        kind = str(event.get("event", ""))
        try:
            at = log_time(event)
        except (KeyError, ValueError):
            continue
        if kind == MEMBERSHIP_STARTED:
            round_start = None  # a new run: a join the last one left unfinished is over
        elif kind == INITIAL_STANDBYS_OPENED:
            local = _tasks(event.get("tasks"))
            timeline.changes.append(_Change(at, name, local=local))
        elif kind == ASSIGNMENT_APPLIED:
            timeline.changes.append(
                _Change(
                    at,
                    name,
                    active=_tasks(event.get("active")),
                    standby=_tasks(event.get("standby")),
                    warmup=_tasks(event.get("warmup")),
                )
            )
        elif kind == RESTORE_DONE and event.get("role") == "active":
            timeline.restores.append((at, str(event.get("task_id")), int(event.get("records", 0))))
        elif _round_starts(kind, event):
            round_start = at if round_start is None else round_start
        elif _round_ends(kind, event) and round_start is not None:
            timeline.rounds.append((round_start, at))
            round_start = None
    timeline.changes += [_Change(at, name, exited=True) for at in exits]
    timeline.changes.sort(key=lambda c: c.at)
    return timeline


def _round_starts(kind: str, event: dict[str, Any]) -> bool:
    if kind != MEMBERSHIP_TRANSITION:
        return False
    return str(event.get("src", "")).lower() == "stable" or (
        str(event.get("dst", "")).lower() == "joining"
    )


def _round_ends(kind: str, event: dict[str, Any]) -> bool:
    if kind == MEMBERSHIP_ASSIGNED:
        return True
    return kind == MEMBERSHIP_TRANSITION and str(event.get("dst", "")).lower() == "stable"


@dataclass
class _Held:
    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    warmup: frozenset[str] = frozenset()
    local: frozenset[str] = frozenset()

    def had(self, task: str) -> str | None:
        for kind, tasks in (
            ("standby", self.standby),
            ("warmup", self.warmup),
            ("local state", self.local),
        ):
            if task in tasks:
                return kind
        return None


@dataclass(frozen=True)
class _Takeover:
    at: float
    task: str
    owner: str | None
    had: str | None  # what ``owner`` held of the task just before


def _replay(timelines: dict[str, _Timeline]) -> list[_Takeover]:
    """Every change of a task's owner, in time order (owner None: its owner exited)."""
    changes = sorted((c for t in timelines.values() for c in t.changes), key=lambda c: c.at)
    held: dict[str, _Held] = {}
    owner: dict[str, str | None] = {}
    out: list[_Takeover] = []
    for change in changes:
        before = held.get(change.worker, _Held())
        if change.exited:
            held[change.worker] = _Held()
            for task, who in list(owner.items()):
                if who == change.worker:
                    owner[task] = None
                    out.append(_Takeover(change.at, task, None, None))
            continue
        if change.local:
            held[change.worker] = _Held(local=change.local)
            continue
        held[change.worker] = _Held(change.active, change.standby, change.warmup)
        for task, who in list(owner.items()):
            if who == change.worker and task not in change.active:
                owner[task] = None
                out.append(_Takeover(change.at, task, None, None))
        for task in sorted(change.active):
            if owner.get(task) != change.worker:
                owner[task] = change.worker
                out.append(_Takeover(change.at, task, change.worker, before.had(task)))
    return out


def _owner_at(takeovers: Sequence[_Takeover], task: str, at: float) -> str | None:
    who: str | None = None
    for takeover in takeovers:
        if takeover.at >= at:
            break
        if takeover.task == task:
            who = takeover.owner
    return who


def _moves(
    takeovers: Sequence[_Takeover], timelines: dict[str, _Timeline], start: float, end: float
) -> dict[str, Move]:
    moves: dict[str, Move] = {}
    for task in TASKS:
        first = _owner_at(takeovers, task, start)
        inside = [t for t in takeovers if t.task == task and start <= t.at < end]
        changed = [t for t in inside if t.owner != first]
        if not changed:
            continue
        new = next((t for t in changed if t.owner is not None), None)
        if new is None or new.owner is None:
            moves[task] = Move(first, None, None, None, None)
            continue
        restored = next(
            (n for at, t, n in timelines[new.owner].restores if t == task and new.at <= at < end),
            None,
        )
        # Given up (owner None) before the new owner's assignment: the handover took that
        # long. Taken straight from one owner by the next: no time between them.
        before = [t for t in inside if t.at <= new.at and t is not new]
        lost = before[-1].at if before and before[-1].owner is None else new.at
        moves[task] = Move(first, new.owner, new.had, restored, new.at - lost)
    return moves


def _ownership(takeovers: Sequence[_Takeover]) -> dict[str, list[tuple[float, str | None]]]:
    spans: dict[str, list[tuple[float, str | None]]] = {t: [] for t in TASKS}
    for takeover in takeovers:
        if takeover.task in spans:
            spans[takeover.task].append((takeover.at, takeover.owner))
    return spans


# -- running a scenario -------------------------------------------------------------------


def input_records(keys: int, count: int, start: int) -> Iterator[Record]:
    """``count`` inputs of the counting app with ids from ``start``, keys round-robin."""
    for n in range(start, start + count):
        yield STR.serialize(f"key-{n % keys}"), JSON.serialize({"id": n})


class Group:
    """One scenario's broker, workers and the membership events sent to them."""

    def __init__(self, ctx: RunContext, params: Params, tag: str) -> None:
        self.ctx = ctx
        self.params = params
        self.tag = tag
        broker = start_broker(ctx, f"broker-{tag}")
        self.bootstrap = broker.bootstrap
        create_topics(self.bootstrap, {counting.INPUTS: PARTITIONS, counting.OUTPUTS: PARTITIONS})
        self.settings = worker_settings(
            self.bootstrap,
            new_application_id(f"bench-avail-{tag}"),
            {
                "commit.interval.ms": params.commit_interval_ms,
                "num.standby.replicas": 1,
            },
        )
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
        self.events.append(Event(at, "kill -9", name))
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
        stamps = read_timestamps(self.bootstrap, counting.OUTPUTS)
        outputs = {f"0_{p}": [t / 1000 for t in ts] for p, ts in stamps.items()}
        timelines = {
            name: _worker_timeline(name, worker.log_events(), self.exits[name])
            for name, worker in self.workers.items()
        }
        takeovers = _replay(timelines)
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
                    _moves(takeovers, timelines, start, stop),
                )
            )
        return ScenarioOutcome(
            key=key,
            t0=self.t0,
            end=end,
            events=events,
            outputs=outputs,
            owners=_ownership(takeovers),
            rounds={name: t.rounds for name, t in timelines.items()},
        )


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


def _names(count: int) -> list[str]:
    return [f"w{i + 1}" for i in range(count)]


def rolling_restart(ctx: RunContext, params: Params) -> ScenarioOutcome:
    group = Group(ctx, params, "rolling")
    names = _names(params.workers)
    group.begin(names)
    for name in names[: params.restarts]:
        group.stop(name)
        group.pause(params.down_seconds)
        group.start(name)
        group.pause(params.event_seconds)
    return group.finish("rolling")


def scale_out(ctx: RunContext, params: Params) -> ScenarioOutcome:
    group = Group(ctx, params, "scale")
    names = _names(params.workers)
    group.begin(names[:1])
    for name in names[1:]:
        group.start(name)
        group.pause(params.scale_seconds)
        group.wait_balanced()  # a move still under way would fall outside its window
    return group.finish("scale_out")


def kill_one(ctx: RunContext, params: Params) -> ScenarioOutcome:
    group = Group(ctx, params, "kill")
    names = _names(params.workers)
    group.begin(names)
    victim = names[-1]
    group.kill(victim)
    group.pause(params.kill_seconds)
    if params.restart_killed:
        group.start(victim)
        group.pause(params.event_seconds)
    return group.finish("kill")


SCENARIOS: dict[str, Callable[[RunContext, Params], ScenarioOutcome]] = {
    "rolling": rolling_restart,
    "scale_out": scale_out,
    "kill": kill_one,
}


@dataclass(frozen=True)
class Measured:
    """What every scenario observed."""

    params: Params
    outcomes: list[ScenarioOutcome]  # in the order of SCENARIOS


def measure(ctx: RunContext, params: Params) -> Measured:
    """Every scenario, one after another (side by side in quick mode)."""
    calls = {key: partial(scenario, ctx, params) for key, scenario in SCENARIOS.items()}
    if params.parallel:
        return Measured(params, list(side_by_side(calls).values()))
    return Measured(params, [call() for call in calls.values()])


# -- the report ---------------------------------------------------------------------------


def _title(key: str, params: Params) -> str:
    return {
        "rolling": f"Rolling restart of {params.workers} workers",
        "scale_out": "Scale-out " + " -> ".join(str(n) for n in range(1, params.workers + 1)),
        "kill": f"Kill -9 of one of {params.workers}",
    }[key]


def _setup(key: str, params: Params) -> str:
    """What the scenario did, in a sentence (the scenario functions above do it)."""
    if key == "rolling":
        return (
            f"{params.workers} workers, balanced before the input starts; {params.restarts} of "
            f"them in turn: SIGTERM, {params.down_seconds:g} s down once it exited, started "
            f"again over its state dir, {params.event_seconds:g} s before the next."
        )
    if key == "scale_out":
        return (
            f"1 worker, ready before the input starts; then {params.workers - 1} more, "
            f"{params.scale_seconds:g} s apart, each once the tasks have spread (the last "
            "one's window as long)."
        )
    then = "left dead to the end"
    if params.restart_killed:
        then = f"then started again over its state dir, {params.event_seconds:g} s to the end"
    return (
        f"{params.workers} workers, balanced before the input starts; kill -9 of "
        f"{_names(params.workers)[-1]}, dead for {params.kill_seconds:g} s, {then}."
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """Per scenario its two rows, details and timeline; the copy row; the shares plot."""
    params, outcomes = measured.params, measured.outcomes
    result = Result(NAME, TITLE)
    for outcome in outcomes:
        result.rows += _rows(outcome)
    result.rows.append(_copy_row(outcomes))
    result.details.append(
        f"Input: {params.rate:,} records/s over {params.keys} keys into `{counting.INPUTS}` "
        f"({PARTITIONS} partitions), app `{APP}` (one output per input). Workers: "
        f"`num.standby.replicas=1`, `commit.interval.ms={params.commit_interval_ms}`, "
        "`max.warmup.replicas` and `acceptable.recovery.lag` at their defaults (2, 10,000), "
        "group timing of the integration tests (`session.timeout.ms=6000`). A task's stall "
        "in an event is its longest silent stretch in `outputs` from the event to the next "
        "one; owners, rounds and restores come from the workers' logs (module docstring of "
        "`benchmarks/availability.py`). Baselines: the eager protocol's figures measured in "
        "issue 13."
    )
    for outcome in outcomes:
        result.details += _scenario_details(outcome, params)
        result.plots.append(
            plots.availability_timeline(
                plot_path(f"{NAME}-{outcome.key}"), **_plot_args(outcome, params)
            )
        )
    result.plots.insert(
        0,
        plots.availability_shares(
            plot_path(NAME),
            {
                _title(o.key, params): [
                    (e.event.label, e.stalled_share, e.moved_share) for e in o.events
                ]
                for o in outcomes
            },
            STALLED,
        ),
    )
    return result


def _rows(outcome: ScenarioOutcome) -> list[Row]:
    eager, _ = EAGER[outcome.key]
    kept = [s for e in outcome.events for s in e.kept_stalls.values()]
    return [
        Row(
            metric=f"{SHORT[outcome.key]}: longest stall of a task that kept its owner",
            measured=max(kept, default=float("nan")),
            measured_label=(
                f"{sum(len(e.kept_stalls) for e in outcome.events)} kept tasks "
                f"in {len(outcome.events)} events"
            ),
            baseline=eager,
            baseline_label=f"eager, {SOURCE}: longest gap, every task",
            unit="s",
            target=Target("<=", STALLED, SOURCE, unit="s"),
        ),
        Row(
            metric=f"{SHORT[outcome.key]}: share of tasks stalled > {STALLED:g} s per event (mean)",
            measured=100 * statistics.mean(e.stalled_share for e in outcome.events),
            measured_label=f"{len(outcome.events)} events",
            baseline=100 * statistics.mean(e.moved_share for e in outcome.events),
            baseline_label="share that changed owner",
            unit="%",
            target=Target("<=", 1.0, f"{SOURCE}: at most the share that moved"),
        ),
    ]


def _allowed(move: Move) -> float | None:
    """What a moved task with a copy may stall: its handover + 0.5 s."""
    if move.had is None or move.handover_seconds is None:
        return None
    return move.handover_seconds + ROUND_SLACK


def _copy_row(outcomes: Sequence[ScenarioOutcome]) -> Row:
    """The moved task with a copy that stalled longest against what it may stall."""
    worst: tuple[float, float, str] | None = None
    for outcome in outcomes:
        for event in outcome.events:
            for task, move in event.moves.items():
                allowed = _allowed(move)
                if allowed is None:
                    continue
                stall = event.stalls[task]
                if worst is None or stall / allowed > worst[0] / worst[1]:
                    where = f"{SHORT[outcome.key]}, {event.event.label}, {task}"
                    worst = (stall, allowed, where)
    stall, allowed, where = worst or (float("nan"), float("nan"), "no such task")
    return Row(
        metric="a moved task with a standby, warmup or local copy: stall against its handover",
        measured=stall,
        measured_label=f"worst: {where}",
        baseline=allowed,
        baseline_label=f"its handover + {ROUND_SLACK:g} s",
        unit="s",
        target=Target("<=", 1.0, SOURCE),
    )


def _scenario_details(outcome: ScenarioOutcome, params: Params) -> list[str]:
    _, eager = EAGER[outcome.key]
    met = sum(1 for e in outcome.events if e.stalled_share <= e.moved_share)
    kept = max((s for e in outcome.events for s in e.kept_stalls.values()), default=0.0)
    lines = [
        "| event | at (s) | window (s) | stalled > 1.5 s | changed owner | "
        "longest stall per task (s; * moved) | moved: from -> to (what the new owner held; "
        "records it restored; handover; the stall allowed) |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for e in outcome.events:
        stalls = ", ".join(
            f"{t}{'*' if t in e.moves else ''} {s:.1f}" for t, s in sorted(e.stalls.items())
        )
        moves = "; ".join(_move_cell(e, t, m) for t, m in sorted(e.moves.items()))
        lines.append(
            f"| {e.event.label} | {e.start - outcome.t0:.1f} | {e.end - e.start:.1f} "
            f"| {e.stalled_share:.0%} | {e.moved_share:.0%} | {stalls} | {moves or 'none'} |"
        )
    rounds = [b - a for spans in outcome.rounds.values() for a, b in spans if a >= outcome.t0]
    return [
        f"### {_title(outcome.key, params)}",
        f"{_setup(outcome.key, params)} Eager baseline ({SOURCE}): {eager}. Here: per event, the tasks "
        f"that stalled were at most those that changed owner in {met} of "
        f"{len(outcome.events)} events; the tasks that kept their owner stalled up to "
        f"{kept:.1f} s; rebalance rounds after the input started took "
        + (
            f"{min(rounds):.1f}-{max(rounds):.1f} s ({len(rounds)} rounds over all workers)."
            if rounds
            else "- (none logged)."
        ),
        "\n".join(lines),
    ]


def _move_cell(event: EventOutcome, task: str, move: Move) -> str:
    allowed = _allowed(move)
    facts = [
        move.had or "no copy",
        "-" if move.restored is None else f"{move.restored:,}",
        "-" if move.handover_seconds is None else f"{move.handover_seconds:.1f} s",
        "-" if allowed is None else f"{allowed:.1f} s",
    ]
    return f"{task} {move.before or '-'} -> {move.after or 'nobody'} ({'; '.join(facts)})"


def _plot_args(outcome: ScenarioOutcome, params: Params) -> dict[str, Any]:
    t0 = outcome.t0
    span = (0.0, outcome.end - t0)
    # From the first output on: the input's first records take a moment to come out.
    first = min((t for ts in outcome.outputs.values() for t in ts if t >= t0), default=t0)
    gaps = {
        task: gap_intervals([t - t0 for t in ts], first - t0, span[1], longer_than=DRAWN)
        for task, ts in outcome.outputs.items()
    }
    owners = {task: [(at - t0, who) for at, who in spans] for task, spans in outcome.owners.items()}
    return {
        "title": _title(outcome.key, params),
        "gaps": gaps,
        "owners": owners,
        "events": [(e.event.at - t0, e.event.label) for e in outcome.events],
        "span": span,
        "stalled": STALLED,
    }
