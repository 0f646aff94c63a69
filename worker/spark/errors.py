"""Errors of the Spark loaders, by what the caller must do about them."""

from __future__ import annotations

from worker.errors import WorkerError
from worker.kafka.loader import LoadFailed


class LoadRejected(WorkerError):
    """The load was refused before anything was written: fix the input or the target.

    A missing column, a key or value that does not serialise, a null or duplicate key, a
    topic that is missing or has another partition count than the job expects.
    """


class SparkUnavailable(WorkerError):
    """pyspark (the ``spark`` extra) or a Java runtime is missing."""


class LoadIncomplete(LoadFailed):
    """Some partitions' transactions did not commit: run the load again.

    Each Kafka partition of the table is written in one transaction, so each partition
    holds either its previous content or the whole new one; which ones committed is not
    known to the driver (the writers that failed took it with them). A snapshot load run
    again compares with what is there and writes only what is still missing.
    """

    def __init__(self, topic: str, records: int, cause: str) -> None:
        super().__init__(
            f"{topic}: load incomplete: {records} records were to be written, and at least"
            " one partition's transaction did not commit (each partition holds its previous"
            f" content or all of the new one; run the load again): {cause}"
        )
        self.topic = topic
        self.records = records
        self.cause = cause


class SchemaMismatch(WorkerError):
    """A table's records do not fit the schema or serdes they are read with: fix the schema
    (or the serde option) to match what the table holds."""


class TableNotFound(WorkerError):
    """The table's topic does not exist: check the topic or store name and the broker."""
