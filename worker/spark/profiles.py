"""The example app's table job: ``account-profiles`` from historical payments.

For every account, the mean and the population standard deviation of its historical
payment amounts (in cents), and how many payments they rest on: the value
``{"mean", "std", "n"}`` that ``worker.examples.payments`` scores new payments against.
The input is any table with an ``account`` (string) and an ``amount_cents`` (integer)
column, e.g. the files ``worker dev history`` writes. Payments without an amount are
ignored; a payment without an account rejects the load (a table key cannot be null).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from worker.config import Settings
from worker.examples import payments as app
from worker.serde import JSON, STR
from worker.spark.files import detect_format, read_input
from worker.spark.load import LoadResult, Mode, Progress, load_table, quiet

# Column types of the history files; explicit so CSV needs no inference pass.
HISTORY_SCHEMA = "id STRING, account STRING, amount_cents LONG, ts LONG"
PROFILE_COLUMNS = ("mean", "std", "n")


def account_profiles(history: DataFrame) -> DataFrame:
    """One row per account: ``account``, ``mean``, ``std`` (population), ``n``."""
    return (
        history.where(F.col("amount_cents").isNotNull())
        .groupBy("account")
        .agg(
            F.avg("amount_cents").alias("mean"),
            F.stddev_pop("amount_cents").alias("std"),
            F.count("amount_cents").alias("n"),
        )
    )


def load_account_profiles(
    spark: SparkSession,
    source: Sequence[str] | DataFrame,
    settings: Settings,
    *,
    fmt: str = "auto",
    partitions: int | None = None,
    co_partition_with: Sequence[str] = (app.PAYMENTS,),
    create: bool = False,
    mode: Mode = "snapshot",
    progress: Progress = quiet,
) -> LoadResult:
    """Compute the profiles from history files (or a DataFrame) and load them.

    The table must be co-partitioned with ``payments`` (both feed one sub-topology), so
    that is what the target's partition count is checked against by default. Raises as
    :func:`worker.spark.load.load_table` does.
    """
    if isinstance(source, DataFrame):
        history = source
    else:
        paths = list(source)
        fmt = detect_format(paths) if fmt == "auto" else fmt
        # Parquet carries its own schema; text formats get the history's, unread.
        history = read_input(spark, paths, fmt, None if fmt == "parquet" else HISTORY_SCHEMA)
    return load_table(
        account_profiles(history),
        app.PROFILES,
        "account",
        list(PROFILE_COLUMNS),
        settings,
        key_serde=STR,
        value_serde=JSON,
        partitions=partitions,
        co_partition_with=co_partition_with,
        create=create,
        mode=mode,
        check_unique_keys=False,  # grouped by the key: unique by construction
        progress=progress,
    )
