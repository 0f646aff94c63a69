"""Errors of the Spark loaders, by what the caller must do about them."""

from __future__ import annotations

from worker.errors import WorkerError
from worker.kafka.loader import LoadFailed
from worker.kafka.table_writer import WriteSummary


class LoadRejected(WorkerError):
    """The load was refused before anything was written: fix the input or the target.

    A missing column, a key or value that does not serialise, a null or duplicate key, a
    topic that is missing or has another partition count than the job expects.
    """


class SparkUnavailable(WorkerError):
    """pyspark (the ``spark`` extra) or a Java runtime is missing."""


class LoadIncomplete(LoadFailed):
    """Writing started and did not finish: ``summary`` holds what was acknowledged.

    Exact when writers failed (each reports its acknowledged records); a lower bound
    when Spark lost a writer (``cause`` says so), which may have had records
    acknowledged before it could report. Records acknowledged stay in the topic; the
    table is upserted, so running the same load again completes it.
    """

    def __init__(self, topic: str, rows: int, summary: WriteSummary, cause: str = "") -> None:
        reason = f"; {cause}" if cause else ""
        super().__init__(
            f"{topic}: load incomplete: {summary.total_acked} of {rows} rows acknowledged"
            f" ({summary.describe()}){reason}"
        )
        self.topic = topic
        self.rows = rows
        self.summary = summary
