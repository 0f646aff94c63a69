"""The demo's payments while its workers crash and join: produced at a steady rate, with
each membership change the demo causes noted (who owned which task before and after, when
the (re)started worker was ready with active tasks, what it restored by then).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.config import Settings
from worker.dev import sample_data
from worker.dev.demo_processes import DemoWorker, Scrape
from worker.dev.enrichment import ProfileChange
from worker.examples import payments as app
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

IDLE_SECONDS = 2.0  # the processed count must stand still this long to call it drained


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
    clock: sample_data.EventClock  # payment n's event time


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


def produce_for(
    settings: Settings,
    accts: list[sample_data.Account],
    duration: float,
    rate: int,
    workers: list[DemoWorker],
    schedule: list[tuple[float, str, Callable[[float], DemoWorker]]],
    clock: sample_data.EventClock,
    quiet: dict[str, int],
    bursts: dict[str, range],
    changes: Mapping[str, ProfileChange] | None = None,
) -> Traffic:
    """``rate`` payments a second for ``duration`` seconds; a progress line every 10 s.

    Payment ``n`` carries the event time ``clock.at(n)``; the accounts of ``quiet`` stop
    paying from their payment number on, those of ``bursts`` pay in a burst, those of
    ``changes`` pay differently from theirs on (``sample_data.payments``).

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
            chunk = list(
                sample_data.payments(
                    accts, rate, start=len(stream), quiet=quiet, bursts=bursts, changes=changes
                )
            )
            times = clock.times(len(stream), rate)
            produce_records(settings, app.PAYMENTS, chunk, STR, JSON, timestamps=times)
            stream.extend(chunk)
            second += 1
            if second % 10 == 0:
                processed = sum(w.processed() for w in workers)
                print(f"  {second:3d}s: {len(stream)} payments produced, "
                      f"{processed} records processed", flush=True)  # fmt: skip
        time.sleep(min(0.1, max(0.0, started + second - time.monotonic())))  # pacing
    if happenings:
        happenings[-1].after = _owners(workers)
    return Traffic(stream, started, start_ms, _wall_ms(), happenings, clock)


def wait_drained(workers: list[DemoWorker], traffic: Traffic, timeout: float) -> float | None:
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
