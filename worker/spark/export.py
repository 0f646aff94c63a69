"""Reading the workers' state in Spark: export a store, reconcile it against its input.

Both read through the ``worker`` data source (``worker.spark.datasource``): a store's
changelog (or a table's topic) as the workers hold it, the latest committed value per
key, decoded with the store's serdes from the app's topology. What the workers serve
through interactive queries is exactly that, once they have applied the changelog's end.

- :func:`export_store`: the store as Parquet (one column per field of an object value);
- :func:`reconcile`: compare a recomputed aggregate with the state, key by key;
  :func:`account_totals_from_payments` recomputes the example app's ``account-totals``
  from the ``payments`` topic, which is what ``worker spark reconcile`` runs. The
  workers' state only equals the recomputation once they have processed every input
  record: run it when the input is quiet, or read the differences as lag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from worker.config import Settings
from worker.examples import payments as example
from worker.spark.datasource import DEFAULT_APP, FORMAT, register, source_options
from worker.spark.errors import SchemaMismatch
from worker.spark.progress import Progress, job_progress, quiet, rate


def read_store(
    spark: SparkSession,
    store: str,
    settings: Settings,
    *,
    app: str = DEFAULT_APP,
    timestamp_column: str | None = None,
) -> DataFrame:
    """The store as the workers hold it: one row per key (``key`` and the value's columns,
    and with ``timestamp_column`` a last column of each row's record time: for a
    versioned table, the time its latest version is valid from)."""
    register(spark)
    options = {**source_options(settings), "store": store, "app": app}
    if timestamp_column is not None:
        options["timestampColumn"] = timestamp_column
    return spark.read.format(FORMAT).options(**options).load()


def read_topic(
    spark: SparkSession,
    topic: str,
    settings: Settings,
    *,
    key_serde: str = "str",
    value_serde: str = "json",
    latest: bool = True,
) -> DataFrame:
    """A topic through the data source: a table (``latest``) or every committed record."""
    register(spark)
    options = {
        **source_options(settings),
        "topic": topic,
        "keySerde": key_serde,
        "valueSerde": value_serde,
        "latest": str(latest).lower(),
    }
    return spark.read.format(FORMAT).options(**options).load()


@dataclass(frozen=True, slots=True)
class ExportResult:
    rows: int
    partitions: int
    seconds: float

    def describe(self) -> str:
        return f"{self.rows} rows from {self.partitions} partitions in {self.seconds:.1f}s, {rate(self.rows, self.seconds)}"


def export_store(
    spark: SparkSession,
    store: str,
    path: str,
    settings: Settings,
    *,
    app: str = DEFAULT_APP,
    timestamp_column: str | None = None,
    progress: Progress = quiet,
) -> ExportResult:
    """Write the store to Parquet at ``path`` (replacing what is there); count what was written.

    Raises TableNotFound (no such store or topic), SchemaMismatch, LoadFailed (broker).
    """
    started = time.monotonic()
    frame = read_store(spark, store, settings, app=app, timestamp_column=timestamp_column)
    partitions = frame.rdd.getNumPartitions()
    progress(f"export {store}: {partitions} partitions, columns {', '.join(frame.columns)}")
    with job_progress(SparkContext.getOrCreate(), f"export {store}", progress):
        frame.write.mode("overwrite").parquet(path)
    rows = spark.read.parquet(path).count()  # from the files' footers: no second read
    return ExportResult(rows, partitions, time.monotonic() - started)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """How the state compares with the recomputation, and the first differing keys."""

    matching: int
    differing: int
    only_in_state: int
    only_recomputed: int
    examples: tuple[tuple[str, dict[str, object] | None, dict[str, object] | None], ...]

    @property
    def equal(self) -> bool:
        return not (self.differing or self.only_in_state or self.only_recomputed)

    def describe(self) -> str:
        return (
            f"{self.matching} keys match, {self.differing} differ, {self.only_in_state} only in"
            f" the state, {self.only_recomputed} only in the recomputation"
        )


def reconcile(
    recomputed: DataFrame, state: DataFrame, key: str, columns: list[str], show: int = 10
) -> Reconciliation:
    """Compare ``columns`` of two DataFrames keyed by ``key``; nulls compare equal to nulls."""
    for name, frame in (("recomputed", recomputed), ("state", state)):
        missing = [c for c in (key, *columns) if c not in frame.columns]
        if missing:
            raise SchemaMismatch(f"the {name} data has no column {missing[0]!r}: {frame.columns}")
    r = recomputed.select(key, *columns).alias("r")
    s = state.select(key, *columns).alias("s")
    joined = r.join(s, F.col(f"r.{key}") == F.col(f"s.{key}"), "full_outer")
    in_r, in_s = F.col(f"r.{key}").isNotNull(), F.col(f"s.{key}").isNotNull()
    same = F.lit(True)
    for column in columns:
        same = same & F.col(f"r.{column}").eqNullSafe(F.col(f"s.{column}"))
    kind = (
        F.when(in_r & in_s & same, "matching")
        .when(in_r & in_s, "differing")
        .when(in_s, "only_in_state")
        .otherwise("only_recomputed")
    )
    marked = joined.withColumn("_kind", kind)
    counts = {row[0]: row[1] for row in marked.groupBy("_kind").count().collect()}
    rows = marked.where(F.col("_kind") != "matching").limit(show).collect()
    examples = tuple(
        (
            str(row[0] if row[0] is not None else row[1 + len(columns)]),
            {c: row[1 + i] for i, c in enumerate(columns)} if row[0] is not None else None,
            {c: row[2 + len(columns) + i] for i, c in enumerate(columns)}
            if row[1 + len(columns)] is not None
            else None,
        )
        for row in rows
    )
    return Reconciliation(
        counts.get("matching", 0),
        counts.get("differing", 0),
        counts.get("only_in_state", 0),
        counts.get("only_recomputed", 0),
        examples,
    )


def account_totals_from_payments(payments: DataFrame) -> DataFrame:
    """The example app's ``account-totals`` recomputed: count and sum of each account's payments."""
    return payments.groupBy(F.col("key").alias("key")).agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount_cents").alias("sum_cents")
    )


def reconcile_account_totals(
    spark: SparkSession, settings: Settings, *, app: str = DEFAULT_APP, show: int = 10
) -> Reconciliation:
    """Recompute ``account-totals`` from every committed payment and compare with the state."""
    payments = read_topic(spark, example.PAYMENTS, settings, latest=False)
    state = read_store(spark, example.TOTALS, settings, app=app)
    return reconcile(
        account_totals_from_payments(payments), state, "key", ["count", "sum_cents"], show
    )
