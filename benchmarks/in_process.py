"""Measuring a topology's CPU per record in a process of its own, through the task layer.

The join benchmarks compare topologies by the CPU time of the one thread doing the work
(``time.thread_time``) over records fetched beforehand, as :mod:`benchmarks.dsl_cost`
does: the work runs in a spawned process (RocksDB's threads and a fresh heap, as
:mod:`benchmarks.per_record` explains), which sends back what it measured.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable
from typing import Any

from benchmarks.harness import BenchmarkFailed, RunContext
from benchmarks.per_record import _stop
from benchmarks.task_layer import RunningTasks
from worker.observability import configure_logging

BATCH = 500  # records handed to the router at once (what one consume returns under load)


def in_child(ctx: RunContext, work: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
    """``work(*args)`` in a spawned process (a module-level function, picklable
    arguments), stopped by its handle when the benchmark ends; what it returned.

    Raises:
        BenchmarkFailed: it raised (its traceback in the message), or sent nothing in
            ``timeout_s``.
    """
    spawn = multiprocessing.get_context("spawn")
    receiver, sender = spawn.Pipe(duplex=False)
    child = spawn.Process(target=_serve, args=(work, args, sender))
    ctx.own(child.start, lambda: _stop(child))
    sender.close()
    if not receiver.poll(timeout_s):
        raise BenchmarkFailed(f"the measuring process sent nothing in {timeout_s:.0f}s")
    ok, outcome = receiver.recv()
    child.join(30)
    if not ok:
        raise BenchmarkFailed(f"the measuring process failed:\n{outcome}")
    return outcome


def _serve(work: Callable[..., Any], args: tuple[Any, ...], sender: Any) -> None:
    configure_logging("warning", "console")
    try:
        sender.send((True, work(*args)))
    except Exception:
        sender.send((False, traceback.format_exc(limit=8)))
    finally:
        sender.close()


def feed(run: RunningTasks, records: list[Any], commit_every: int) -> None:
    """Process ``records`` in batches of :data:`BATCH`, punctuating after each as the
    loop does, a commit every ``commit_every`` records and one at the end."""
    parts, since = run.parts, 0
    for i in range(0, len(records), BATCH):
        since += parts.router.process(records[i : i + BATCH])
        parts.router.punctuate()
        run.collector.poll()
        if since >= commit_every:
            parts.committer.commit()
            since = 0
    parts.committer.commit()


def cpu_us_per_record(run: RunningTasks, records: list[Any], commit_every: int) -> float:
    """:func:`feed`'s CPU time per record, in us, commits included."""
    started = time.thread_time()
    feed(run, records, commit_every)
    return 1e6 * (time.thread_time() - started) / max(len(records), 1)
