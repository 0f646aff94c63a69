"""``load_table``: write a DataFrame into a table's compacted topic, as the worker reads it.

The load protocol (the body of :func:`load_table` follows these steps):

1. check the DataFrame's schema: key, value and timestamp columns exist, their types
   suit the serdes and a record's time (no data read yet);
2. check the target topic: it exists (or may be created), and its partition count is the
   one the job expects (``partitions``, or that of the topics it must be co-partitioned
   with);
3. check the keys are unique (a table has one row per key; with two, which one the
   worker ends up with would depend on Spark's scheduling); an upsert with a timestamp
   column may hold several versions of a key, one per time;
4. encode every row into (partition, key bytes, value bytes, timestamp) with the
   worker's serdes and ``worker.partitioner``, persist the result and scan it: any row
   that cannot be encoded (null key, value that does not serialise, null or unparseable
   timestamp) rejects the whole load;
5. create the topic if it is missing and ``create`` was given (compacted);
6. in ``snapshot`` mode, read the table's current content (the ``worker`` data source,
   read_committed), check it decodes with the serdes, and keep only the changes: an
   upsert for a new or changed value, a tombstone for a key that is no longer in the
   input, nothing for an unchanged row. ``upsert`` mode writes every row as it is;
7. write each Kafka partition's changes in one transaction (the data source's writer),
   in timestamp order when the rows carry their times (a key's versions then arrive as
   in-order data would): workers reading ``read_committed`` see a partition's whole
   change or none of it;
8. return the counts, or raise LoadIncomplete if any partition's transaction failed.

Steps 1-4 (and the decoding check of 6) raise LoadRejected and change nothing, not even
by creating the topic. Only this module and its siblings in ``worker.spark`` import pyspark.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from worker.config import Settings
from worker.kafka.admin import Admin
from worker.kafka.table_writer import WriteSummary, fence_partitions, writer_config
from worker.serde import Serde
from worker.spark.datasource import FORMAT, register, source_options
from worker.spark.encoding import TableEncoder, ValueSpec, check_columns, resolve_serde
from worker.spark.errors import LoadIncomplete, LoadRejected
from worker.spark.executor import EncodeStats, encode_rows, encode_stats
from worker.spark.progress import Progress, first_line, job_progress, quiet, rate, worker_error
from worker.spark.target import Target, TopicAdmin, check_target
from worker.spark.target import create as create_topic
from worker.spark.timestamps import check_timestamp_column

Mode = Literal["snapshot", "upsert"]
MODES = ("snapshot", "upsert")
_CHANGES = "partition INT, key BINARY, value BINARY, timestamp BIGINT"

__all__ = ["LoadResult", "Progress", "load_table", "quiet"]


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A finished load: ``rows`` in the input, ``summary`` the records committed per partition."""

    target: Target
    rows: int
    summary: WriteSummary  # upserts and tombstones written, per partition
    deletes: int  # tombstones among them
    check_seconds: float  # steps 1-6: schema, topic, keys, encoding, diff
    write_seconds: float  # step 7
    mode: Mode = "snapshot"

    @property
    def written(self) -> int:
        return self.summary.total_acked

    @property
    def unchanged(self) -> int:
        """Input rows not written because the table already held them (snapshot mode)."""
        return self.rows - (self.written - self.deletes)

    @property
    def seconds(self) -> float:
        return self.check_seconds + self.write_seconds

    @property
    def rows_per_second(self) -> float:
        """Input rows per second of the whole job (checks, encoding, diff and writing)."""
        return self.rows / self.seconds if self.seconds else 0.0

    def describe(self) -> str:
        changed = f"{self.written - self.deletes} upserts, {self.deletes} deletes"
        if self.mode == "snapshot":
            changed += f", {self.unchanged} unchanged"
        return f"{changed}; {self.summary.describe()}"


def load_table(
    df: DataFrame,
    topic: str,
    key_column: str,
    value: ValueSpec,
    settings: Settings,
    *,
    mode: Mode = "snapshot",
    key_serde: Serde | str = "str",
    value_serde: Serde | str = "json",
    partitions: int | None = None,
    co_partition_with: Sequence[str] = (),
    create: bool = False,
    check_unique_keys: bool = True,
    timestamp_column: str | None = None,
    write_timeout: float = 180.0,
    transaction_timeout_ms: int = 300_000,
    admin: TopicAdmin | None = None,
    progress: Progress = quiet,
) -> LoadResult:
    """Load ``df`` into ``topic``: one record per changed key (see the module doc).

    ``value`` makes each row's value (:data:`worker.spark.encoding.ValueSpec`); a null
    value deletes the key. ``timestamp_column`` stamps each record with its row's time
    (``worker.spark.timestamps``) instead of the time of the write: the event time a
    versioned table serves the version from. Raises LoadRejected (nothing written),
    LoadIncomplete (some partitions' transactions failed; those kept their previous
    content), KafkaUnavailable.
    """
    if mode not in MODES:
        raise LoadRejected(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    started = time.monotonic()
    key_codec, value_codec = resolve_serde(key_serde), resolve_serde(value_serde)
    schema = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    check_columns(  # step 1
        schema, key_column, value, key_codec, value_codec, timestamp_column=timestamp_column
    )
    if timestamp_column is not None:
        check_timestamp_column(schema, timestamp_column)
    admin = admin or Admin(settings)
    target = check_target(  # step 2
        admin, topic, partitions=partitions, co_partition_with=co_partition_with, create=create
    )
    missing = "" if target.exists else " (to be created)"
    progress(f"{topic}: {target.partitions} partitions{missing}, {target.reason}")
    df = _needed_columns(df, key_column, value, timestamp_column)
    if check_unique_keys:  # step 3
        _check_unique(df, key_column, timestamp_column, mode)
    encoder = TableEncoder(
        tuple(df.columns),
        key_column,
        value,
        key_codec,
        value_codec,
        target.partitions,
        timestamp_column,
    )
    encoded = df.rdd.mapPartitions(functools.partial(encode_rows, encoder))
    encoded = encoded.persist(StorageLevel.MEMORY_AND_DISK)
    changes: Any = None
    try:
        stats = _scan(encoded, topic)  # step 4
        progress(f"{topic}: {stats.rows} rows encoded and checked")
        target = create_topic(admin, target)  # step 5
        spark = df.sparkSession
        register(spark)
        options = {**source_options(settings), "topic": topic}
        rows = spark.createDataFrame(encoded, _CHANGES)
        if mode == "snapshot":  # step 6
            rows = _diff(spark, rows, options, key_codec, value_codec, progress)
        changes = _by_kafka_partition(rows, target.partitions, timestamp_column is not None)
        counts = _counts(changes)
        check_seconds = time.monotonic() - started
        written = time.monotonic()
        total = sum(n for n, _ in counts.values())
        deletes = sum(d for _, d in counts.values())
        progress(
            f"{topic}: writing {total - deletes} upserts and {deletes} deletes"
            f" ({mode}) in {len(counts)} partition transactions"
        )
        options |= {
            "timeout": str(write_timeout),
            "transactionTimeoutMs": str(transaction_timeout_ms),
        }
        _write(spark, changes, settings, options, target.partitions, counts, progress)
        write_seconds = time.monotonic() - written
    finally:
        encoded.unpersist()
        if changes is not None:
            changes.unpersist()
    summary = WriteSummary({p: n for p, (n, _) in counts.items() if n})
    return LoadResult(target, stats.rows, summary, deletes, check_seconds, write_seconds, mode)


def _needed_columns(
    df: DataFrame, key_column: str, value: ValueSpec, timestamp_column: str | None
) -> DataFrame:
    """Only the key, value and timestamp columns cross to Python (a value function sees
    them all)."""
    if callable(value) and not isinstance(value, str):
        return df
    named = [value] if isinstance(value, str) else list(value)
    if timestamp_column is not None:
        named.append(timestamp_column)
    return df.select(key_column, *[c for c in dict.fromkeys(named) if c != key_column])


def _check_unique(df: DataFrame, key_column: str, timestamp_column: str | None, mode: Mode) -> None:
    """One row per key; an upsert with ``timestamp_column``, one per key and time (two
    versions of a key at one time leave which one the table serves to Spark's
    scheduling). A snapshot is the table's one current content, compared key by key."""
    versions = timestamp_column if mode == "upsert" else None
    grouping = [key_column] if versions is None else [key_column, versions]
    duplicates = (  # null keys and times are step 4's to report
        df.where(F.col(key_column).isNotNull())
        .groupBy(*grouping)
        .agg(F.count(F.lit(1)).alias("rows"))
        .where(F.col("rows") > 1)
        .limit(3)
        .collect()
    )
    if not duplicates:
        return
    if versions is None:
        listing = ", ".join(f"{row[0]!r} ({row[1]} rows)" for row in duplicates)
        history = ""
        if timestamp_column is not None:
            history = "; several versions of a key (a history) load with mode upsert"
        raise LoadRejected(f"key column {key_column!r} is not unique: {listing}{history}")
    listing = ", ".join(f"{row[0]!r} at {row[1]!r} ({row[2]} rows)" for row in duplicates)
    raise LoadRejected(
        f"key column {key_column!r} has several rows at one time of {versions!r}: {listing}"
    )


def _scan(encoded: Any, topic: str) -> EncodeStats:
    stats: EncodeStats = encoded.mapPartitions(encode_stats).fold(EncodeStats(), operator.add)
    if stats.rejected:
        reasons = "; ".join(stats.reasons)
        raise LoadRejected(
            f"{topic}: {stats.rejected} of {stats.rows} rows cannot be written, nothing was"
            f" written: {reasons}"
        )
    return stats


def _diff(
    spark: SparkSession,
    new: DataFrame,
    options: dict[str, str],
    key_serde: Serde,
    value_serde: Serde,
    progress: Progress,
) -> DataFrame:
    """The records that turn the table's current content into ``new`` (step 6).

    Joined on the key bytes: a key with another value, or new, is upserted; a key only
    in the table gets a tombstone; an equal value is left alone. ``<=>`` (null-safe
    equality) covers the three at once: a missing side is a null value.
    """
    current = spark.read.format(FORMAT).options(**options, raw="true").load()
    _check_decodes(current.limit(20).collect(), key_serde, value_serde, options["topic"])
    progress(f"{options['topic']}: comparing with the table's current content")
    n, o = new.alias("n"), current.alias("o")
    joined = n.join(o, F.col("n.key") == F.col("o.key"), "full_outer")
    return joined.where(~F.col("n.value").eqNullSafe(F.col("o.value"))).select(
        F.coalesce(F.col("n.partition"), F.col("o.partition")).alias("partition"),
        F.coalesce(F.col("n.key"), F.col("o.key")).alias("key"),
        F.col("n.value").alias("value"),
        F.col("n.timestamp").alias("timestamp"),  # a tombstone of a vanished key: now
    )


def _check_decodes(rows: list[Any], key_serde: Serde, value_serde: Serde, topic: str) -> None:
    """Refuse a snapshot whose serdes cannot read what the table holds: the diff would
    compare bytes of different encodings and rewrite (or delete) every key."""
    for _, key, value in rows:
        for role, serde, data in (("key", key_serde, key), ("value", value_serde, value)):
            try:
                serde.deserialize(bytes(data))
            except Exception as exc:
                raise LoadRejected(
                    f"{topic} holds a {role} that the {serde.name} {role} serde cannot read"
                    f" ({bytes(key)[:40]!r}: {exc}): is that the table's {role} serde?"
                ) from None


def _by_kafka_partition(rows: DataFrame, count: int, in_time_order: bool) -> Any:
    """The changes as an RDD whose Spark partition ``i`` holds exactly Kafka partition ``i``,
    so each Spark task writes one Kafka partition in one transaction; ``in_time_order``
    sorts each by timestamp, so a key's versions reach the topic oldest first and its
    last record is its latest version, as a compacted topic keeps it. Persisted:
    counted, then written, without reading the table twice."""
    if not in_time_order:
        keyed = rows.rdd.map(lambda r: (r[0], (r[1], r[2], r[3])))
        split = keyed.partitionBy(count, _first)
    else:  # keyed by (partition, time): placed by the first, sorted by both
        keyed = rows.rdd.map(lambda r: ((r[0], r[3] or 0), (r[1], r[2], r[3])))
        split = keyed.repartitionAndSortWithinPartitions(count, _first)
    records = split.map(lambda kv: (_first(kv[0]), *kv[1]))
    return records.persist(StorageLevel.MEMORY_AND_DISK)


def _first(key: Any) -> int:
    """The Kafka partition of a (partition, timestamp) key, or of a bare partition."""
    return int(key[0]) if isinstance(key, tuple) else int(key)


def _counts(changes: Any) -> dict[int, tuple[int, int]]:
    """Kafka partition -> (records, tombstones among them) of the changes."""
    pairs = changes.map(lambda r: (r[0], (1, int(r[2] is None))))
    return dict(pairs.reduceByKey(lambda a, b: (a[0] + b[0], a[1] + b[1])).collect())


def _write(
    spark: SparkSession,
    changes: Any,
    settings: Settings,
    options: dict[str, str],
    count: int,
    counts: dict[int, tuple[int, int]],
    progress: Progress,
) -> None:
    """Step 7: raise LoadIncomplete if any partition's transaction did not commit.

    Partitions without changes get no writer, so their load writers are fenced here: a
    transaction a killed load left open on one would hold back the workers reading it
    until the broker's transaction timeout.
    """
    topic = options["topic"]
    idle = [p for p in range(count) if not counts.get(p, (0, 0))[0]]
    transaction_timeout_ms = int(options["transactionTimeoutMs"])
    fence_partitions(
        writer_config(settings), topic, idle, transaction_timeout_ms=transaction_timeout_ms
    )
    total = sum(n for n, _ in counts.values())
    if total == 0:
        return
    started = time.monotonic()
    frame = spark.createDataFrame(changes, _CHANGES)
    writer = frame.write.format(FORMAT).options(**options).mode("append")
    with job_progress(SparkContext.getOrCreate(), f"write {topic}", progress):
        try:
            writer.save()
        except Exception as exc:
            cause = worker_error(exc)
            raise LoadIncomplete(topic, total, str(cause or first_line(exc))) from None
    progress(f"{topic}: {total} records committed, {rate(total, time.monotonic() - started)}")
