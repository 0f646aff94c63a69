"""A topology's CPU per record through the task layer, over records fetched beforehand.

The join benchmarks compare topologies by the CPU time of the one thread doing the work
(``time.thread_time``), as :mod:`benchmarks.dsl_cost` does, in a process of their own
(:func:`benchmarks.spawned.measure_in_child`).
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.task_layer import RunningTasks

BATCH = 500  # records handed to the router at once (what one consume returns under load)


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
