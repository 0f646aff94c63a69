"""Progress of a Spark job as its user expects it: partitions done of all, and the rate.

The jobs run inside the block are put in a job group; a thread reads Spark's status
tracker every ``interval`` seconds and reports ``done/total`` tasks (one task per Kafka
partition for the table reads and writes) with the elapsed time, only when it changed.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark import SparkContext

from worker.errors import WorkerError
from worker.kafka.loader import LoadFailed
from worker.spark import errors

Progress = Callable[[str], None]
# A worker exception raised in a Spark Python worker, as its traceback's last line shows it.
_RAISED = re.compile(r"^worker\.[\w.]+\.(\w+): (.+)$", re.MULTILINE)
_KINDS: dict[str, type[WorkerError]] = {
    "SchemaMismatch": errors.SchemaMismatch,
    "TableNotFound": errors.TableNotFound,
    "LoadRejected": errors.LoadRejected,
    "TableWriteFailed": LoadFailed,
    "LoadFailed": LoadFailed,
}


def quiet(_message: str) -> None:
    """The default progress callback: say nothing."""


def rate(count: int, seconds: float) -> str:
    """``12,345 rows/s``."""
    return f"{count / seconds if seconds > 0 else 0:,.0f} rows/s"


def worker_error(exc: BaseException) -> WorkerError | None:
    """The worker error a Spark job failed with in a Python worker, rebuilt on the driver.

    Spark wraps it in its own exception with the Python traceback as text; the last
    ``worker....Error: message`` line names it. None if the failure was not one of ours.
    """
    found = _RAISED.findall(str(exc))
    for name, message in reversed(found):
        kind = _KINDS.get(name)
        if kind is not None:
            return kind(message)
    return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def job_progress(
    context: SparkContext, description: str, progress: Progress, interval: float = 2.0
) -> Iterator[None]:
    """Report the tasks of the jobs run inside the block (see the module doc)."""
    group = f"worker-{uuid.uuid4().hex[:8]}"
    context.setJobGroup(group, description)
    stop = threading.Event()
    started = time.monotonic()

    def report() -> None:
        tracker, last = context.statusTracker(), ""
        while not stop.wait(interval):
            done = total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done, total = done + stage.numCompletedTasks, total + stage.numTasks
            line = f"{description}: {done}/{total} partitions done"
            if total and line != last:
                progress(f"{line} ({time.monotonic() - started:.0f}s)")
                last = line

    thread = threading.Thread(target=report, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
