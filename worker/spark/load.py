"""``load_table``: write a DataFrame into a table's compacted topic, as the worker reads it.

The load protocol (the body of :func:`load_table` follows these steps):

1. check the DataFrame's schema: key and value columns exist, their types suit the
   serdes (no data read yet);
2. check the target topic: it exists (or may be created), and its partition count is the
   one the job expects (``partitions``, or that of the topics it must be co-partitioned
   with);
3. check the keys are unique (a table has one row per key; with two, which one the
   worker ends up with would depend on Spark's scheduling);
4. encode every row into (partition, key bytes, value bytes) with the worker's serdes
   and ``worker.partitioner``, persist the result and scan it: any row that cannot be
   encoded (null key, value that does not serialise) rejects the whole load;
5. create the topic if it is missing and ``create`` was given (compacted), then write
   each Spark partition with an idempotent acks=all producer to the computed
   partitions (``foreachPartition``), each reporting what was acknowledged;
6. return the counts when every row was acknowledged; otherwise raise LoadIncomplete
   with exactly what was.

Steps 1-4 raise LoadRejected and change nothing, not even by creating the topic. Only this module and its siblings in
``worker.spark`` import pyspark.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark import AccumulatorParam, SparkContext, StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from worker.config import Settings
from worker.kafka.admin import Admin
from worker.kafka.table_writer import WriteSummary, writer_config
from worker.serde import Serde
from worker.spark.encoding import TableEncoder, ValueSpec, check_columns, resolve_serde
from worker.spark.errors import LoadIncomplete, LoadRejected
from worker.spark.executor import EncodeStats, PartitionWriter, encode_rows, encode_stats
from worker.spark.target import Target, TopicAdmin, check_target
from worker.spark.target import create as create_topic

Progress = Callable[[str], None]
# Each writer (one producer per Spark partition) pays a connection and an idempotent
# producer id (~0.5 s on the test broker) before its first record, and writers beyond
# the cluster's task slots only run in later waves, paying it again. So the encoded
# partitions are coalesced to one writer per slot, plus one per this many rows so that
# no single task grows unboundedly (retries and progress stay fine-grained).
ROWS_PER_WRITER = 2_000_000


def quiet(_message: str) -> None:
    """The default progress callback: say nothing."""


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A finished load: every one of ``rows`` acknowledged, per partition in ``summary``."""

    target: Target
    rows: int
    summary: WriteSummary
    check_seconds: float  # steps 1-4: schema, topic, keys, encoding scan
    write_seconds: float  # step 5

    @property
    def seconds(self) -> float:
        return self.check_seconds + self.write_seconds

    @property
    def rows_per_second(self) -> float:
        """Rows loaded per second of the whole job (checks, encoding and writing)."""
        return self.rows / self.seconds if self.seconds else 0.0


class _SummaryParam(AccumulatorParam[WriteSummary]):
    """Spark accumulator of the writers' summaries."""

    def zero(self, value: WriteSummary) -> WriteSummary:
        return WriteSummary()

    def addInPlace(self, value1: WriteSummary, value2: WriteSummary) -> WriteSummary:
        return value1 + value2


def load_table(
    df: DataFrame,
    topic: str,
    key_column: str,
    value: ValueSpec,
    settings: Settings,
    *,
    key_serde: Serde | str = "str",
    value_serde: Serde | str = "json",
    partitions: int | None = None,
    co_partition_with: Sequence[str] = (),
    create: bool = False,
    check_unique_keys: bool = True,
    write_timeout: float = 180.0,
    admin: TopicAdmin | None = None,
    progress: Progress = quiet,
) -> LoadResult:
    """Load ``df`` into the table topic ``topic`` (see the module docstring for the steps).

    ``value`` is a column name, a list of column names (a dict value) or a function of
    the row as a dict (None = delete). ``check_unique_keys=False`` skips step 3 for
    DataFrames unique by construction (an aggregation grouped by the key).

    Raises LoadRejected (nothing written), LoadIncomplete (some rows written; exactly
    which are acknowledged is in its ``summary``), KafkaUnavailable (metadata).
    """
    started = time.monotonic()
    key_codec, value_codec = resolve_serde(key_serde), resolve_serde(value_serde)
    schema = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    check_columns(schema, key_column, value, key_codec, value_codec)  # step 1
    admin = admin or Admin(settings)
    target = check_target(  # step 2
        admin,
        topic,
        partitions=partitions,
        co_partition_with=co_partition_with,
        create=create,
    )
    missing = "" if target.exists else " (to be created)"
    progress(f"{topic}: {target.partitions} partitions{missing}, {target.reason}")
    df = _needed_columns(df, key_column, value)
    if check_unique_keys:  # step 3
        _check_unique(df, key_column)
    encoder = TableEncoder(
        tuple(df.columns), key_column, value, key_codec, value_codec, target.partitions
    )
    encoded = df.rdd.mapPartitions(functools.partial(encode_rows, encoder))
    encoded = encoded.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats = _scan(encoded, topic)  # step 4
        check_seconds = time.monotonic() - started
        progress(f"{topic}: {stats.rows} rows encoded and checked in {check_seconds:.1f}s")
        written = time.monotonic()
        target = create_topic(admin, target)  # step 5
        summary, cause = _write(encoded, stats.rows, target, settings, write_timeout, progress)
        write_seconds = time.monotonic() - written
    finally:
        encoded.unpersist()
    if cause or not summary.ok or summary.total_acked != stats.rows:  # step 6
        raise LoadIncomplete(topic, stats.rows, summary, cause)
    return LoadResult(target, stats.rows, summary, check_seconds, write_seconds)


def _needed_columns(df: DataFrame, key_column: str, value: ValueSpec) -> DataFrame:
    """Only the key and value columns cross to Python (a value function sees them all)."""
    if callable(value) and not isinstance(value, str):
        return df
    named = [value] if isinstance(value, str) else list(value)
    return df.select(key_column, *[c for c in dict.fromkeys(named) if c != key_column])


def _check_unique(df: DataFrame, key_column: str) -> None:
    duplicates = (  # null keys are step 4's to report
        df.where(F.col(key_column).isNotNull())
        .groupBy(key_column)
        .agg(F.count(F.lit(1)).alias("rows"))
        .where(F.col("rows") > 1)
        .limit(3)
        .collect()
    )
    if duplicates:
        listing = ", ".join(f"{row[0]!r} ({row[1]} rows)" for row in duplicates)
        raise LoadRejected(f"key column {key_column!r} is not unique: {listing}")


def _scan(encoded: Any, topic: str) -> EncodeStats:
    stats: EncodeStats = encoded.mapPartitions(encode_stats).fold(EncodeStats(), operator.add)
    if stats.rejected:
        reasons = "; ".join(stats.reasons)
        raise LoadRejected(
            f"{topic}: {stats.rejected} of {stats.rows} rows cannot be written, nothing was"
            f" written: {reasons}"
        )
    return stats


def _write(
    encoded: Any,
    rows: int,
    target: Target,
    settings: Settings,
    timeout: float,
    progress: Progress,
) -> tuple[WriteSummary, str]:
    """Step 5: (what was acknowledged, why the Spark job failed or "")."""
    context = SparkContext.getOrCreate()
    slots = max(1, context.defaultParallelism)
    writers = min(encoded.getNumPartitions(), max(slots, -(-rows // ROWS_PER_WRITER)))
    if writers < encoded.getNumPartitions():
        encoded = encoded.coalesce(writers)  # narrow: reads the persisted partitions
    sink = context.accumulator(WriteSummary(), _SummaryParam())
    writer = PartitionWriter(
        writer_config(settings), target.topic, target.partitions, timeout, sink
    )
    cause = ""
    with _job_progress(context, f"write {target.topic}", progress):
        try:
            encoded.foreachPartition(writer)
        except Exception as exc:  # a Spark failure: report what the accumulator has
            cause = f"Spark job failed: {_first_line(exc)}"
    return sink.value, cause


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def _job_progress(
    context: SparkContext, description: str, progress: Progress, interval: float = 2.0
) -> Iterator[None]:
    """Report ``done/total`` Spark tasks of the jobs run inside the block, every ``interval``."""
    group = f"worker-{uuid.uuid4().hex[:8]}"
    context.setJobGroup(group, description)
    stop = threading.Event()

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
            line = f"{description}: {done}/{total} Spark partitions written"
            if total and line != last:
                progress(line)
                last = line

    thread = threading.Thread(target=report, name="load-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
