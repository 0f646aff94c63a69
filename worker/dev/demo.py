"""``make demo``: a local broker, sample data, workers that crash and join under a minute of
payments.

Everything runs on loopback. The broker listens on a port picked here; each worker
binds an HTTP port the OS picks (``http.port=0``) and reports it in its log, so the demo
needs no particular port to be free. Every process the demo starts is stopped by its
PID: on success, on failure, on Ctrl-C, SIGTERM or SIGHUP, and (on Linux) even if the
demo itself is killed, through the parent-death signal set before each child starts.

Two workers start; while payments flow, one is killed with SIGKILL and started again at
once over its state dir, and later a third worker joins. Afterwards the summary shows
what that cost each task: its longest stall (the longest silence of its partition of the
``account-totals`` changelog, which every commit writes for every account the task
updated) and the changelog records restored (a restart over local state restores only
the tail written since its last commit, not the whole changelog).

When the traffic has been processed the workers are stopped cleanly (a final commit),
and the output topics are checked against a plain-Python reference computation of the
same input: every alert, and every account's running totals (the ``account-totals``
changelog). The workers run ``exactly_once_v2``, so the kill leaves no double counts.
The exit code is 0 only when both match and every worker's last run exited 0.
"""

from __future__ import annotations

import http.client
import shutil
import signal
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from worker.config import Settings, load
from worker.dev import history, sample_data
from worker.dev.broker import EmbeddedBroker
from worker.dev.processes import START_LINE, WorkerProcess, WorkerProcessFailed, guarded
from worker.dev.stalls import max_gap
from worker.errors import WorkerError
from worker.examples import payments as app
from worker.kafka.consumers import DataConsumer
from worker.kafka.loader import produce_records, read_topic
from worker.serde import JSON, STR

ACCOUNTS = 200
PARTITIONS = 4
WORKERS = 2  # at the start; a third joins later
KILL_AT = 0.25  # share of the traffic's duration: SIGKILL worker-1, start it again
JOIN_AT = 0.55  # share of the traffic's duration: start worker-3
# The demo's worker settings: commit four times a second (each commit writes the
# changelogs, whose timestamps show the stalls), notice a dead member within seconds,
# exactly-once so that a SIGKILL leaves no double counts in the totals.
WORKER_SETTINGS = {
    "processing.guarantee": "exactly_once_v2",
    "commit.interval.ms": "250",
    "session.timeout.ms": "6000",
    "max.poll.interval.ms": "10000",
}
READY_TIMEOUT = 60.0  # workers joined, tasks restored, processing
DRAIN_TIMEOUT = 120.0  # after the last payment: everything processed
STOP_GRACE = 30.0  # SIGTERM -> exit, before SIGKILL
IDLE_SECONDS = 2.0  # the processed count must stand still this long to call it drained
_MARKER = ".worker-demo"  # a --workdir is emptied only if it has this (or is empty)


def load_sample_data(
    settings: Settings, accounts: int, payments: int, partitions: int
) -> dict[str, int]:
    sample_data.create_example_topics(settings, partitions)
    accts = sample_data.accounts(accounts)
    loaded_profiles = produce_records(
        settings, app.PROFILES, sample_data.profiles(accts), STR, JSON
    )
    loaded_payments = 0
    if payments:
        loaded_payments = produce_records(
            settings, app.PAYMENTS, sample_data.payments(accts, payments), STR, JSON
        )
    return {"profiles": loaded_profiles, "payments": loaded_payments}


# -- child processes ---------------------------------------------------------------------


class DemoFailed(WorkerError):
    """The demo cannot go on (a process died, nothing became ready...)."""


class _Broker(EmbeddedBroker):
    def command(self) -> list[str]:
        return guarded(super().command())

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


def _start_broker(workdir: Path, brokers: list[_Broker], attempts: int = 3) -> _Broker:
    """A broker on a port picked here; another port if that one was taken meanwhile.

    Each broker is appended to ``brokers`` before it starts, so clean-up always sees it.
    """
    problem = ""
    for _ in range(attempts):
        broker = _Broker(log_path=workdir / "broker.log")
        brokers.append(broker)
        try:
            broker.start()
            time.sleep(0.2)  # a broker that lost the race for its port exits right away
            if broker.alive():
                return broker
            problem = "it exited right after start-up"
        except WorkerError as exc:
            problem = str(exc)
        broker.stop()
    raise DemoFailed(f"no broker could start ({problem}); see {workdir / 'broker.log'}")


@dataclass
class Scrape:
    """One ``/metrics`` scrape: every sample, summed per (name) or per (name, label value)."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def total(self, name: str, **labels: str) -> int:
        return int(
            sum(
                value
                for sample, sample_labels, value in self.samples
                if sample == name and all(sample_labels.get(k) == v for k, v in labels.items())
            )
        )


class DemoWorker(WorkerProcess):
    """A worker of the demo: an OS-picked HTTP port, dies with the demo, and remembers its
    last scrape and what its earlier runs processed (a restart's counters start at 0)."""

    def __init__(self, name: str, bootstrap: str, workdir: Path) -> None:
        super().__init__(
            state_dir=workdir / name,
            http_port=0,
            settings={"bootstrap.servers": bootstrap, **WORKER_SETTINGS},
            name=name,
            die_with_parent=True,
        )
        self.last = Scrape()
        self.earlier_processed = 0  # records processed by its runs before this one

    def start(self) -> DemoWorker:
        """Start the process (again, after it exited: same state dir, a new HTTP port)."""
        if self.alive:
            raise DemoFailed(f"{self.name} is running already (pid {self.pid})")
        if self.pid is not None:
            self.earlier_processed += self.last.total("worker_processed_records_total")
        self.last = Scrape()
        super().start()
        return self

    def check_alive(self) -> None:
        if self.pid is not None and not self.alive:
            raise DemoFailed(
                f"{self.name} (pid {self.pid}) exited with code {self.returncode}; "
                + self.log_tail(15)
            )

    def scrape(self) -> Scrape:
        """The latest scrape of this run; the previous one if the worker does not answer now."""
        with suppress(OSError, ValueError, WorkerProcessFailed):
            self.last = Scrape(self.metric_samples())
        return self.last

    def processed(self) -> int:
        """Records processed over all its runs (as last scraped): a restart starts at 0."""
        return self.earlier_processed + self.scrape().total("worker_processed_records_total")


def _stop_workers(workers: list[DemoWorker], grace: float, hurry: Callable[[], bool]) -> None:
    """SIGTERM every worker, wait for their clean stop, SIGKILL whatever is left."""
    for w in workers:
        w.request_stop()
    deadline = time.monotonic() + grace
    while any(w.alive for w in workers) and time.monotonic() < deadline and not hurry():
        time.sleep(0.05)
    for w in workers:
        if w.alive:
            print(f"{w.name} (pid {w.pid}) did not stop in time: SIGKILL", flush=True)
        w.close()


# -- signals -----------------------------------------------------------------------------


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Signals:
    """One handler for Ctrl-C, SIGTERM (e.g. from make) and SIGHUP, for the whole run.

    Until clean-up starts, a signal raises Interrupted. From then on nothing can interrupt
    the clean-up: a further signal only makes it skip the waiting and SIGKILL.
    """

    def __init__(self) -> None:
        self.cleaning = False
        self.hurry = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        self._previous = {s: signal.signal(s, self._handle) for s in _STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.cleaning:
            self.cleaning = True
            raise Interrupted(signum)
        if not self.hurry:
            print("\nstopping at once (SIGKILL)", file=sys.stderr, flush=True)
        self.hurry = True

    def hurried(self) -> bool:
        return self.hurry


# -- the demo ----------------------------------------------------------------------------


def run_demo(duration: float, rate: int, workdir: Path) -> int:
    """Run the whole demo; 0 when the output matches the reference and the workers stopped cleanly."""
    workdir = workdir.resolve()
    ours = any((workdir / name).exists() for name in (_MARKER, "broker.log"))
    if workdir.exists() and any(workdir.iterdir()) and not ours:
        print(f"demo: {workdir} is not empty and not a demo directory; not touching it")
        return 2
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / _MARKER).write_text("created by `worker dev demo`; emptied by the next run\n")
    brokers: list[_Broker] = []
    workers: list[DemoWorker] = []
    code = 1
    with _Signals() as signals:
        try:
            broker = _start_broker(workdir, brokers)
            code = _run(broker, workers, duration, rate, workdir, signals)
        except Interrupted as exc:
            signals.cleaning = True
            print(f"\ninterrupted ({exc}): stopping the workers and the broker", flush=True)
            code = 128 + exc.signum
        except WorkerError as exc:  # DemoFailed, or the broker/loader failing
            signals.cleaning = True
            print(f"\ndemo failed: {exc}", flush=True)
            code = 1
        finally:
            signals.cleaning = True
            _stop_workers(workers, STOP_GRACE, signals.hurried)
            for broker in brokers:
                broker.stop(timeout=0.5 if signals.hurry else 10.0)
            if code != 0 and workers:
                print(
                    "stopped "
                    + ", ".join(f"{w.name} (exit {w.returncode})" for w in workers if w.pid)
                    + " and the broker",
                    flush=True,
                )
    print(f"logs and state: {workdir}", flush=True)
    return code


def _run(
    broker: _Broker,
    workers: list[DemoWorker],
    duration: float,
    rate: int,
    workdir: Path,
    signals: _Signals,
) -> int:
    bootstrap = broker.bootstrap
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    print(
        f"broker on {bootstrap} (pid {broker.pid}); loading {ACCOUNTS} account profiles", flush=True
    )
    accts = sample_data.accounts(ACCOUNTS)
    load_sample_data(settings, ACCOUNTS, 0, PARTITIONS)
    # The historical payments a Spark job turns into these profiles (docs/spark.md):
    # `worker spark load account-profiles --input <workdir>/history` recomputes them.
    written = history.write_history(workdir / "history", ACCOUNTS, 50)
    print(f"wrote {written.rows} historical payments to {written.out} for the Spark loader")

    for i in range(1, WORKERS + 1):
        worker = DemoWorker(f"worker-{i}", bootstrap, workdir)
        workers.append(worker)  # tracked before it exists: clean-up covers a failed start
        worker.start()
    print("started " + ", ".join(f"{w.name} (pid {w.pid})" for w in workers), flush=True)
    started = time.monotonic()
    _wait_ready(workers, READY_TIMEOUT)
    print(f"workers ready in {time.monotonic() - started:.1f}s; "
          f"producing {rate} payments/s for {duration:.0f}s", flush=True)  # fmt: skip

    def crash(_at: float) -> DemoWorker:
        victim = workers[0]
        victim.scrape()  # its count so far, carried into the next run's
        old = victim.pid
        victim.kill()
        victim.start()
        print(
            f"         killed pid {old}; started again over its state dir as pid {victim.pid}",
            flush=True,
        )
        return victim

    def join(_at: float) -> DemoWorker:
        newcomer = DemoWorker(f"worker-{len(workers) + 1}", bootstrap, workdir)
        workers.append(newcomer)
        newcomer.start()
        print(f"         started pid {newcomer.pid}", flush=True)
        return newcomer

    schedule: list[tuple[float, str, Callable[[float], DemoWorker]]] = [
        (duration * KILL_AT, f"kill -9 {workers[0].name}", crash),
        (duration * JOIN_AT, f"worker-{WORKERS + 1} joins", join),
    ]
    producing = time.monotonic()
    traffic = _produce_for(settings, accts, duration, rate, workers, schedule)
    produced_in = time.monotonic() - producing
    drained_in = _wait_drained(workers, traffic, DRAIN_TIMEOUT)
    for w in workers:
        w.scrape()  # the final numbers, before the workers go away
    where = where_to_look(workers[0].port, accts[0].id)  # a live query, before the stop
    signals.cleaning = True  # from here on a Ctrl-C only hurries the stop
    _stop_workers(workers, STOP_GRACE, signals.hurried)  # each commits its last records
    code = _summarise(settings, accts, traffic, produced_in, drained_in, workers)
    print("\n".join(where), flush=True)
    return code


def _wait_ready(workers: list[DemoWorker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in workers:
            w.check_alive()
        if all(w.ready() for w in workers):
            return
        time.sleep(0.2)
    raise DemoFailed(
        f"the workers were not ready within {timeout:.0f}s (not ready: "
        + ", ".join(w.name for w in workers if not w.ready())
        + ")"
    )


@dataclass
class Happening:
    """A membership change the demo caused while payments flowed."""

    what: str
    worker: DemoWorker  # the worker that (re)started
    restart: bool  # the worker ran before (its tasks stopped with its process)
    at: float  # seconds after the first payment
    wall_ms: int  # when, on the clock of the records' timestamps
    before: dict[str, str]  # task -> the worker it was active on just before
    after: dict[str, str] = field(default_factory=dict)  # ... just before the next change
    active_after: float | None = None  # seconds until it was ready with active tasks
    active_wall_ms: int = 0
    active: frozenset[str] = frozenset()  # its active tasks then
    restored: dict[str, int] = field(default_factory=dict)  # task -> records, by then

    def fate(self, task: str) -> str:
        """What the change did to ``task``: stayed (same worker before and after), moved,
        or restarted (its worker was the one restarted)."""
        before, after = self.before.get(task), self.after.get(task)
        if before is None or after is None:
            return "?"
        if self.restart and before == self.worker.name:
            return "restarted"
        return "stayed" if before == after else "moved"


@dataclass
class Traffic:
    stream: list[tuple[str, dict[str, Any]]]
    started: float  # time.monotonic() at the first payment
    start_ms: int
    end_ms: int
    happenings: list[Happening]


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _restored_by_task(scrape: Scrape) -> dict[str, int]:
    """task -> ``account-totals`` changelog records restored into its active store."""
    restored: dict[str, int] = {}
    for name, labels, value in scrape.samples:
        if name == "worker_restored_records_total" and labels.get("store") == app.TOTALS:
            restored[labels["task"]] = restored.get(labels["task"], 0) + int(value)
    return restored


def _owners(workers: list[DemoWorker]) -> dict[str, str]:
    """task -> the worker it is active on, from each running worker's ``/tasks``."""
    owners: dict[str, str] = {}
    for w in workers:
        if not w.alive:
            continue
        with suppress(OSError, ValueError, KeyError, TypeError):
            status, body = w.get("/tasks")
            if status != 200:
                continue
            for task in orjson.loads(body)["tasks"]:
                if task["kind"] == "active":
                    owners[str(task["task_id"])] = w.name
    return owners


def _note_active(happening: Happening, started: float) -> None:
    """Once the worker of ``happening`` is ready with active tasks: when, and what it restored."""
    worker = happening.worker
    if happening.active_after is not None or not worker.ready():
        return
    scrape = worker.scrape()
    if scrape.total("worker_tasks", kind="active") == 0:
        return
    happening.active_after = time.monotonic() - started - happening.at
    happening.active_wall_ms = _wall_ms()
    happening.active = frozenset(t for t, w in _owners([worker]).items() if w == worker.name)
    happening.restored = _restored_by_task(scrape)
    restored = sum(happening.restored.values())
    print(
        f"  {worker.name} ready with active tasks {happening.active_after:.1f}s after it "
        f"started; restored {restored} {app.TOTALS} records",
        flush=True,
    )


def _produce_for(
    settings: Settings,
    accts: list[sample_data.Account],
    duration: float,
    rate: int,
    workers: list[DemoWorker],
    schedule: list[tuple[float, str, Callable[[float], DemoWorker]]],
) -> Traffic:
    """``rate`` payments a second for ``duration`` seconds; a progress line every 10 s.

    ``schedule``: (seconds after the first payment, what, action) run on time, each
    action (re)starting one worker, whose readiness is then followed.
    """
    stream: list[tuple[str, dict[str, Any]]] = []
    pending = sorted(schedule, key=lambda item: item[0])
    happenings: list[Happening] = []
    start_ms = _wall_ms()
    started = time.monotonic()
    second = 0
    # Every 100 ms: run what is due, note who became ready; each second, its payments.
    while (elapsed := time.monotonic() - started) < duration:
        while pending and pending[0][0] <= elapsed:
            _, what, action = pending.pop(0)
            owners, wall_ms = _owners(workers), _wall_ms()
            if happenings:
                happenings[-1].after = owners
            print(f"  {elapsed:5.1f}s: {what}", flush=True)
            ran_before = {w.name for w in workers if w.pid is not None}
            worker = action(elapsed)
            restart = worker.name in ran_before
            happenings.append(Happening(what, worker, restart, elapsed, wall_ms, owners))
        for happening in happenings:
            _note_active(happening, started)
        if time.monotonic() >= started + second:
            for w in workers:
                w.check_alive()
            chunk = list(sample_data.payments(accts, rate, start=len(stream)))
            produce_records(settings, app.PAYMENTS, chunk, STR, JSON)
            stream.extend(chunk)
            second += 1
            if second % 10 == 0:
                processed = sum(w.processed() for w in workers)
                print(f"  {second:3d}s: {len(stream)} payments produced, "
                      f"{processed} records processed", flush=True)  # fmt: skip
        time.sleep(min(0.1, max(0.0, started + second - time.monotonic())))  # pacing
    if happenings:
        happenings[-1].after = _owners(workers)
    return Traffic(stream, started, start_ms, _wall_ms(), happenings)


def _wait_drained(workers: list[DemoWorker], traffic: Traffic, timeout: float) -> float | None:
    """Seconds until the workers processed every payment and went idle (all ready); None if
    that did not happen within ``timeout``.

    Approximate on purpose: the exact check is the output, read after the workers stop.
    """
    expected = len(traffic.stream)
    started = time.monotonic()
    last, since = -1, started
    while time.monotonic() - started < timeout:
        for w in workers:
            w.check_alive()
        for happening in traffic.happenings:
            _note_active(happening, traffic.started)
        total = sum(w.processed() for w in workers)
        now = time.monotonic()
        if total != last:
            last, since = total, now
        elif total >= expected and now - since >= IDLE_SECONDS and all(w.ready() for w in workers):
            return since - started
        time.sleep(0.25)
    return None


# -- the summary -------------------------------------------------------------------------


def _fold_changelog(settings: Settings, topic: str) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for key, value in read_topic(settings, topic):
        if key is None:
            continue
        if value is None:
            table.pop(STR.deserialize(key), None)
        else:
            table[STR.deserialize(key)] = JSON.deserialize(value)
    return table


def _log_findings(path: Path) -> tuple[Counter[str], int]:
    """(level:event counts of warnings and errors, lines that are not JSON log records)."""
    findings: Counter[str] = Counter()
    other = 0
    with suppress(OSError), path.open("rb") as log:
        for line in log:
            if line.startswith(START_LINE.encode()):
                continue  # the command of a run, written by WorkerProcess
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                other += 1
                if b"Traceback" in line:
                    findings["error:traceback"] += 1
                continue
            level = record.get("level", "")
            if level in ("warning", "error", "critical"):
                findings[f"{level}:{record.get('event')}"] += 1
    return findings, other


_ROW = "{:<10} {:>9} {:>7} {:>8} {:>7} {:>8} {:>10}  {}"


def _summarise(
    settings: Settings,
    accts: list[sample_data.Account],
    traffic: Traffic,
    produced_in: float,
    drained_in: float | None,
    workers: list[DemoWorker],
) -> int:
    stream = traffic.stream
    profiles = dict(sample_data.profiles(accts))
    expected_totals, expected_alerts = sample_data.reference(profiles, stream)
    alert_records = [orjson.loads(v) for _, v in read_topic(settings, app.ALERTS) if v]
    got_alerts = {str(a.get("payment_id")): a for a in alert_records}
    totals_topic = app.build().build().store(app.TOTALS)[1].changelog(settings.application_id)
    got_totals = _fold_changelog(settings, totals_topic)

    print("\n=== demo summary ===")
    print(f"payments produced:  {len(stream)} in {produced_in:.0f}s")
    if drained_in is None:
        print(f"processing:         NOT caught up {DRAIN_TIMEOUT:.0f}s after the last payment")
    else:
        print(f"processing:         caught up {drained_in:.1f}s after the last payment")
    print(_ROW.format("", "processed", "active", "standby", "commits", "restored", "rebalances",
                      "log warnings/errors"))  # fmt: skip
    for w in workers:
        m = w.last
        findings, other = _log_findings(w.log_path)
        notes = ", ".join(f"{k} x{n}" for k, n in sorted(findings.items())) or "none"
        if other:
            notes += f" (+{other} non-JSON lines)"
        print(
            _ROW.format(
                w.name,
                w.earlier_processed + m.total("worker_processed_records_total"),
                m.total("worker_tasks", kind="active"),
                m.total("worker_tasks", kind="standby"),
                m.total("worker_commits_total"),
                m.total("worker_restored_records_total"),
                m.total("worker_rebalances_total"),
                notes,
            )
        )
    processed = sum(
        w.earlier_processed + w.last.total("worker_processed_records_total") for w in workers
    )
    print(
        f"{'all':<10} {processed:>9}  (input records: payments and account-profile records;"
        " a restarted worker's row adds up its runs, the other columns are its last run's)"
    )
    _print_tasks(settings, totals_topic, traffic)

    missing = sorted(set(expected_alerts) - set(got_alerts))
    extra = sorted(set(got_alerts) - set(expected_alerts))
    differing = sorted(
        k for k in set(expected_alerts) & set(got_alerts) if expected_alerts[k] != got_alerts[k]
    )
    alerts_ok = not (missing or extra or differing)
    duplicates = len(alert_records) - len(got_alerts)
    print(f"alerts expected:    {len(expected_alerts)} (plain-Python reference, same input)")
    print(
        f"alerts produced:    {len(got_alerts)} distinct, {duplicates} duplicate records -> "
        + _verdict(alerts_ok, missing=missing, extra=extra, different=differing)
    )

    keys = set(expected_totals) | set(got_totals)
    wrong = sorted(k for k in keys if expected_totals.get(k) != got_totals.get(k))
    totals_ok = not wrong
    counted = sum(int(t.get("count", 0)) for t in got_totals.values())
    print(
        f"account totals:     {counted} payments over {len(got_totals)} accounts "
        f"(reference: {len(stream)} over {len(expected_totals)}) -> "
        + _verdict(totals_ok, wrong=wrong)
    )

    codes = [w.returncode for w in workers]
    stopped_ok = all(c == 0 for c in codes)
    killed = {h.worker.name for h in traffic.happenings if h.what.startswith("kill")}
    print(
        "worker exit codes:  "
        + ", ".join(
            f"{w.name} {w.returncode}"
            + (" (its run before was the one killed)" if w.name in killed else "")
            for w in workers
        )
    )
    matches = alerts_ok and totals_ok
    print(f"match with reference: {'yes' if matches else 'NO'}")
    return 0 if matches and stopped_ok else 1


def _changelog_timestamps(
    settings: Settings, topic: str, timeout: float = 60.0
) -> dict[int, list[int]]:
    """Every record's timestamp (ms) per partition of ``topic``, from its start to its end.

    Transaction markers take offsets but are never delivered, so a partition counts as
    read once its last record is at most one offset short of the end, or once nothing new
    came for a few seconds.
    """
    reader = load(
        None,
        {"bootstrap.servers": settings.bootstrap_servers, "application.id": "worker-demo-reader"},
        environ={},
    ).settings
    consumer = DataConsumer(reader)  # assigned partitions only: never joins a group
    stamps: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    last = dict.fromkeys(range(PARTITIONS), -1)
    try:
        consumer.add({(topic, p): None for p in range(PARTITIONS)})
        pending = set(range(PARTITIONS))
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while pending:
            if time.monotonic() > deadline:
                raise DemoFailed(f"reading {topic}: partitions {sorted(pending)} unfinished")
            messages = consumer.consume(10000, 0.5)
            for msg in messages:
                stamps[msg.partition()].append(msg.timestamp()[1])
                last[msg.partition()] = msg.offset()
            now = time.monotonic()
            if messages:
                quiet_since = now
            for p in list(pending):
                high = consumer.high_watermark((topic, p))
                if (high is not None and high - last[p] - 1 <= 1) or now - quiet_since > 3.0:
                    pending.discard(p)
    finally:
        consumer.close()
    return stamps


def _print_tasks(settings: Settings, totals_topic: str, traffic: Traffic) -> None:
    """Per task: its longest stall after each membership change and over the whole run, and
    what each (re)started worker restored for it against the changelog's length then."""
    print("membership changes (seconds after the first payment):")
    for h in traffic.happenings:
        after = (
            "not ready with active tasks"
            if h.active_after is None
            else (
                f"ready with active tasks after {h.active_after:.1f}s, "
                f"{sum(h.restored.values())} {app.TOTALS} records restored"
            )
        )
        print(f"  {h.at:5.1f}s  {h.what}: {after}")
    stamps = _changelog_timestamps(settings, totals_topic)
    ends = [h.wall_ms for h in traffic.happenings[1:]] + [traffic.end_ms]
    windows = [(h.wall_ms, end) for h, end in zip(traffic.happenings, ends, strict=True)]
    headers = [f"stall after {h.what}" for h in traffic.happenings] + ["whole run"]
    headers += [f"restored by {h.worker.name} (of changelog)" for h in traffic.happenings]
    rows = []
    for p in range(PARTITIONS):
        task, times = f"0_{p}", stamps[p]
        cells = [
            f"{max_gap(times, a, b) / 1000:.1f}s {h.fate(task)}"
            for h, (a, b) in zip(traffic.happenings, windows, strict=True)
        ]
        cells.append(f"{max_gap(times, traffic.start_ms, traffic.end_ms) / 1000:.1f}s")
        for h in traffic.happenings:
            written = sum(1 for t in times if t <= h.active_wall_ms)
            got = h.restored.get(task, 0)
            cells.append(f"{got} of {written}" if task in h.active else "-")
        rows.append([task, *cells])
    widths = [max(len(c) for c in col) for col in zip(["task", *headers], *rows, strict=True)]
    print(
        f"per task: its longest stall (silence of its {app.TOTALS} changelog partition, which "
        f"every commit writes, every {WORKER_SETTINGS['commit.interval.ms']} ms) after each "
        "change, until the next, and whether it stayed on its worker, moved, or was on the "
        "restarted one; the records a (re)started worker restored for it once active, of "
        "those the changelog held then"
    )
    for row in [["task", *headers], *rows]:
        print("  " + "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _get(url: str) -> tuple[int, str, str]:
    """(status, Location header, body) of one GET, redirects not followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=5)
    try:
        connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        response = connection.getresponse()
        return response.status, response.getheader("Location") or "", response.read().decode()
    finally:
        connection.close()


def where_to_look(port: int | None, key: str) -> list[str]:
    """Where an operator looks: the metrics URL and an interactive query with its answer.

    The query runs while the workers are still up; a 307 (the key's task is active on the
    other worker) is shown and followed once.
    """
    if port is None:
        return []
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/stores/{app.TOTALS}/keys/{key}"
    lines = [
        "",
        "where to look while workers run (this run's ports; every run picks new ones):",
        f"  metrics:  {base}/metrics   (also /healthz, /readyz, /tasks)",
        f"  query:    curl -sL {url}",
    ]
    try:
        status, location, body = _get(url)
        if status == 307:
            lines.append(f"            -> 307, the key's task is active at {location}")
            status, _, body = _get(location)
        lines.append(f"            -> {status} {body}  (asked before the workers stopped)")
    except OSError as exc:
        lines.append(f"            -> no answer ({exc})")
    lines.append("  more:     docs/operations.md (endpoints, state tools, deployment)")
    return lines


def _verdict(ok: bool, **problems: list[str]) -> str:
    if ok:
        return "match"
    parts = [
        f"{len(keys)} {what} (e.g. {', '.join(keys[:3])})"
        for what, keys in problems.items()
        if keys
    ]
    return "MISMATCH: " + "; ".join(parts)
