"""A snapshot load and an export of a large table with Spark, against plain clients, same run.

The table is the example app's ``account-profiles`` (a store of its topology): N keys,
values ``{"mean", "std", "n"}``, generated inside Spark. The job (``local[2]``):

1. loads the first snapshot (all N rows: setup, reported apart);
2. loads a second snapshot in which 10% of the rows changed and 1% vanished: the loader
   reads the table back through the ``worker`` data source, compares, and writes only the
   changes (one transaction per partition);
3. exports the store to Parquet (``worker spark export``) through the data source.

Baselines, in this process and on the same broker:

- for the snapshot, a plain confluent-kafka producer (idempotent, acks=all, murmur2, the
  writers' config) writing every row of the second snapshot, pre-serialised, to another
  topic: what reloading the table whole costs, with nothing else to do;
- for the export, a plain confluent-kafka consumer reading the whole topic to its end
  (bytes only, no decoding, no Parquet).

The exported Parquet must hold exactly the second snapshot; the benchmark fails if not.
``python -m benchmarks.spark_load [--quick]`` prints the raw figures as JSON. The Spark
job runs in a child process (``--job``) so Spark's JVM ends with it; broker and child are
stopped by PID whatever happens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import orjson

from benchmarks.results import PlotPath, Result, Row, table
from worker.config import Settings, load
from worker.dev.broker import EmbeddedBroker
from worker.dev.sample_data import create_example_topics
from worker.examples import payments as app
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.error_classifier import is_partition_eof
from worker.kafka.table_writer import writer_config
from worker.partitioner import partition_for

PARTITIONS = 4
BASELINE_TOPIC = "account-profiles-baseline"
# quick -> keys in the table; quick runs only show the plumbing (tests/integration/test_benchmarks_smoke.py)
SIZES = {True: 2_000, False: 1_000_000}


def second_snapshot(keys: int) -> dict[bytes, bytes]:
    """The second snapshot's records as the job computes them (``_snapshot`` with change)."""
    out = {}
    for i in range(keys):
        if i % 100 == 0:
            continue  # vanished
        n = 5 + i % 50 + (1 if i % 10 == 1 else 0)  # changed
        value = {"mean": float(i % 1000), "std": 1.5, "n": n}
        out[f"acct-{i:07d}".encode()] = orjson.dumps(value)
    return out


def _snapshot(spark: Any, keys: int, changed: bool) -> Any:
    from pyspark.sql import functions as F

    rows = spark.range(keys).select(
        F.format_string("acct-%07d", "id").alias("account"),
        (F.col("id") % 1000).cast("double").alias("mean"),
        F.lit(1.5).alias("std"),
        (F.lit(5) + F.col("id") % 50).alias("n"),
        F.col("id"),
    )
    if changed:
        rows = rows.where(F.col("id") % 100 != 0).withColumn(
            "n", F.when(F.col("id") % 10 == 1, F.col("n") + 1).otherwise(F.col("n"))
        )
    return rows.drop("id")


def _job(bootstrap: str, keys: int, out: str) -> dict[str, float]:
    """In the child process: both loads and the export; their timings and counts."""
    from worker.spark.export import export_store
    from worker.spark.load import load_table
    from worker.spark.session import session

    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    spark = session("local[2]", "worker-benchmark-spark-load")
    columns = ["mean", "std", "n"]
    try:
        started = time.monotonic()
        first = load_table(
            _snapshot(spark, keys, False), app.PROFILES, "account", columns, settings
        )
        first_seconds = time.monotonic() - started
        started = time.monotonic()
        second = load_table(
            _snapshot(spark, keys, True), app.PROFILES, "account", columns, settings
        )
        snapshot_seconds = time.monotonic() - started
        exported = export_store(spark, app.PROFILES, out, settings)
    finally:
        spark.stop()
    return {
        "first_rows": first.rows,
        "first_seconds": first_seconds,
        "snapshot_rows": second.rows,
        "snapshot_seconds": snapshot_seconds,
        "snapshot_written": second.written,
        "snapshot_deletes": second.deletes,
        "snapshot_write_seconds": second.write_seconds,
        "export_rows": exported.rows,
        "export_seconds": exported.seconds,
    }


def _run_job(bootstrap: str, keys: int, out: Path, timeout: float = 1800.0) -> dict[str, float]:
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.spark_load", "--job", bootstrap, str(keys), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,  # where `benchmarks` imports from
    )
    try:
        stdout, err = child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the Spark job exited {child.returncode}: {err[-2000:]}")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def _plain_producer_load(settings: Settings, records: dict[bytes, bytes]) -> float:
    """Seconds for a plain producer to write and flush ``records``; raises if any failed."""
    config = writer_config(settings)  # idempotent, acks=all, murmur2_random, same batching
    config["client.id"] = "benchmark-plain-producer"
    producer = ck.Producer(config)
    failed: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    started = time.monotonic()
    for key, value in records.items():
        partition = partition_for(key, PARTITIONS)
        while True:
            try:
                producer.produce(BASELINE_TOPIC, value, key, partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(300)
    seconds = time.monotonic() - started
    if remaining or failed:
        raise RuntimeError(f"baseline: {remaining} unacknowledged, {len(failed)} failed")
    return seconds


def _plain_read(bootstrap: str, topic: str) -> tuple[int, float]:
    """(records, seconds) for a plain consumer reading every partition of ``topic`` to its end."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "benchmark-plain-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 50,
        }
    )
    started = time.monotonic()
    records = 0
    try:
        consumer.assign(
            [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        pending = set(range(PARTITIONS))
        while pending:
            for msg in consumer.consume(10000, 1.0):
                err = msg.error()
                if err is None:
                    records += 1
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise RuntimeError(f"baseline read: {err}")
            if time.monotonic() - started > 600:
                raise RuntimeError("baseline read: not at the end after 600 s")
    finally:
        consumer.close()
    return records, time.monotonic() - started


NAME = "spark_load"
TITLE = "Spark snapshot load and export (account-profiles) vs plain clients"
FULL = False  # the suite's parameters: quick or not
QUICK = True


@dataclass(frozen=True)
class Measured:
    """Every raw figure of the job and its baselines; seconds unless noted."""

    keys: int  # rows of the first snapshot
    first_seconds: float  # the first load (setup)
    snapshot_rows: int  # rows of the second snapshot
    snapshot_seconds: float  # the whole second load: read back, compare, write
    snapshot_write_seconds: float  # its write phase alone
    snapshot_written: int  # records it wrote: upserts and tombstones
    snapshot_deletes: int
    baseline_write_seconds: float  # a plain producer writing every row of the snapshot
    export_rows: int
    export_seconds: float
    read_records: int  # what the plain consumer read (every record of the topic)
    read_seconds: float
    total_seconds: float


def measure(_ctx: object, quick: bool) -> Measured:
    """Run the job and the baselines; raises if the export differs from the snapshot.

    The suite's context is not used: this benchmark starts and stops its own broker.
    """
    import pyarrow.parquet as pq

    keys = SIZES[quick]
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-load-") as scratch,
        EmbeddedBroker(log_path=Path(scratch) / "broker.log") as broker,
    ):
        settings = load(None, {"bootstrap.servers": broker.bootstrap}, environ={}).settings
        create_example_topics(settings, PARTITIONS)
        Admin(settings).create_topics(
            [TopicSpec(BASELINE_TOPIC, PARTITIONS, {"cleanup.policy": "compact"})]
        )
        out = Path(scratch) / "export.parquet"
        job = _run_job(broker.bootstrap, keys, out)
        read_records, read_seconds = _plain_read(broker.bootstrap, app.PROFILES)
        expected = second_snapshot(keys)
        table = pq.read_table(out, columns=["key", "mean", "std", "n"]).to_pydict()
        exported = {
            key.encode(): orjson.dumps({"mean": mean, "std": std, "n": n})
            for key, mean, std, n in zip(
                table["key"], table["mean"], table["std"], table["n"], strict=True
            )
        }
        del table
        if exported != expected:
            raise RuntimeError(
                f"the export ({len(exported)} keys) is not the snapshot ({len(expected)})"
            )
        baseline_seconds = _plain_producer_load(settings, expected)

    return Measured(
        keys=keys,
        first_seconds=job["first_seconds"],
        snapshot_rows=int(job["snapshot_rows"]),
        snapshot_seconds=job["snapshot_seconds"],
        snapshot_write_seconds=job["snapshot_write_seconds"],
        snapshot_written=int(job["snapshot_written"]),
        snapshot_deletes=int(job["snapshot_deletes"]),
        baseline_write_seconds=baseline_seconds,
        export_rows=int(job["export_rows"]),
        export_seconds=job["export_seconds"],
        read_records=read_records,
        read_seconds=read_seconds,
        total_seconds=time.monotonic() - started,
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The snapshot load against a whole reload, the export against a plain read; the plot."""
    from benchmarks import plots  # matplotlib: not in the Spark job's child process

    m = measured
    rows = [
        Row(
            metric="rows/s, snapshot load (read back, compare, write changes)",
            measured=m.snapshot_rows / m.snapshot_seconds,
            measured_label="worker spark load --mode snapshot, local[2]",
            baseline=m.snapshot_rows / m.baseline_write_seconds,
            baseline_label="plain producer writing every row (pre-serialised)",
            unit="rows/s",
        ),
        Row(
            metric="records written for the snapshot",
            measured=m.snapshot_written,
            measured_label="upserts of changed rows + tombstones of vanished keys",
            baseline=m.snapshot_rows,
            baseline_label="every row, as an upsert load writes",
            unit="records",
        ),
        Row(
            metric="rows/s, export of the store to Parquet",
            measured=m.export_rows / m.export_seconds,
            measured_label="worker spark export (data source, decode, Parquet)",
            baseline=m.read_records / m.read_seconds,
            baseline_label="plain confluent-kafka read of the topic (bytes only)",
            unit="rows/s",
        ),
    ]
    phases = [
        ("first load, all rows (setup)", m.first_seconds),
        ("snapshot load: read back, compare, write", m.snapshot_seconds),
        ("snapshot load: writing", m.snapshot_write_seconds),
        ("plain producer, every row of the snapshot", m.baseline_write_seconds),
        ("export to Parquet", m.export_seconds),
        ("plain read of the topic (both snapshots' records)", m.read_seconds),
    ]
    details = [table(["phase", "seconds"], [[p, f"{sec:.1f}"] for p, sec in phases])]
    facts = {
        "keys": m.keys,
        "snapshot_rows": m.snapshot_rows,
        "upserts": m.snapshot_written - m.snapshot_deletes,
        "tombstones": m.snapshot_deletes,
        "exported_rows": m.export_rows,
        "partitions": PARTITIONS,
    }
    plot = plots.comparison(
        plot_path(NAME),
        TITLE,
        [(r.metric, r.measured, r.baseline) for r in rows],
        ("Spark job", "plain client"),
    )
    return Result(NAME, TITLE, rows=rows, details=details, plots=[plot], facts=facts)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--job"]:
        print(json.dumps(_job(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
    else:
        print(json.dumps(asdict(measure(None, "--quick" in sys.argv[1:])), indent=2))
