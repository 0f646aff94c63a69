"""Rows per second a Spark load writes into a table topic, against a plain producer, same run.

The example app's job (``worker spark load account-profiles``) computes the
``account-profiles`` table from generated history files and writes it with one
idempotent acks=all producer per Spark partition (``local[2]``, checks included). The
baseline is a plain confluent-kafka producer, configured the same way (idempotent,
acks=all, murmur2) in this process, writing the very same key and value bytes, already
serialised, to another topic with the same partition count: the cost of getting those
rows into Kafka with nothing else to do. Both tables are read back and must be equal.

Rows:

- *job*: the whole job (read the files, aggregate, check, encode, write) against the
  baseline's produce-and-flush time; Spark's start-up (a running cluster has paid it
  already) is reported apart;
- *write phase*: step 5 alone (the writers' produce and flush inside Spark).

``measure(ctx, quick)`` returns the raw figures and ``report`` turns them into the rows;
``python -m benchmarks.spark_load [--quick]`` prints the figures as JSON. It starts its
own broker, and runs the Spark job in a child process
(``python -m benchmarks.spark_load --job ...``) so that Spark's JVM ends with it instead
of lingering in the benchmark process; both are stopped, by PID, whatever happens.
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

from benchmarks.results import PlotPath, Result, Row, table
from worker.config import Settings, load
from worker.dev import history
from worker.dev.broker import EmbeddedBroker
from worker.dev.sample_data import create_example_topics
from worker.examples import payments as app
from worker.kafka.admin import Admin, TopicSpec
from worker.kafka.loader import read_topic
from worker.kafka.table_writer import writer_config

PARTITIONS = 4
BASELINE_TOPIC = "account-profiles-baseline"
SIZES = {
    True: (20_000, 3),
    False: (200_000, 5),
}  # quick -> (accounts = rows loaded, history per account)


def _plain_producer_load(settings: Settings, records: list[tuple[bytes, bytes]]) -> float:
    """Seconds for a plain producer to write and flush ``records``; raises if any failed."""
    config = writer_config(settings)  # idempotent, acks=all, murmur2_random, same batching
    config["client.id"] = "benchmark-plain-producer"
    producer = ck.Producer(config)
    failed: list[str] = []

    def on_delivery(err: ck.KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    started = time.monotonic()
    for key, value in records:
        while True:
            try:
                producer.produce(BASELINE_TOPIC, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    seconds = time.monotonic() - started
    if remaining or failed:
        raise RuntimeError(f"baseline: {remaining} unacknowledged, {len(failed)} failed")
    return seconds


def _job(bootstrap: str, history_dir: str) -> dict[str, float]:
    """In the child process: start Spark, run the example job, return its timings."""
    from worker.spark.profiles import load_account_profiles
    from worker.spark.session import session

    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    started = time.monotonic()
    spark = session("local[2]", "worker-benchmark-spark-load")
    session_seconds = time.monotonic() - started
    try:
        job_started = time.monotonic()
        result = load_account_profiles(spark, [history_dir], settings)
        job_seconds = time.monotonic() - job_started
    finally:
        spark.stop()
    return {
        "rows": result.rows,
        "session_seconds": session_seconds,
        "job_seconds": job_seconds,
        "check_seconds": result.check_seconds,
        "write_seconds": result.write_seconds,
    }


def _run_job(bootstrap: str, history_dir: Path, timeout: float = 900.0) -> dict[str, float]:
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.spark_load", "--job", bootstrap, str(history_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,  # where `benchmarks` imports from
    )
    try:
        out, err = child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the Spark job exited {child.returncode}: {err[-2000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


NAME = "spark_load"
TITLE = "Spark table load (account-profiles) vs a plain producer"
FULL = False  # the suite's parameters: quick or not
QUICK = True


@dataclass(frozen=True)
class Measured:
    """Every raw figure of one load and its baseline; seconds unless noted."""

    rows: int  # profile rows loaded (one per account)
    history_rows: int  # the input files' rows
    spark_session_seconds: float  # Spark's start-up, not counted in the job
    job_seconds: float
    job_check_seconds: float  # reading and checks
    job_write_seconds: float  # step 5: the writers' produce and flush
    baseline_seconds: float  # the plain producer's produce and flush of the same rows
    total_seconds: float

    @property
    def job_rows_per_second(self) -> float:
        return self.rows / self.job_seconds

    @property
    def write_phase_rows_per_second(self) -> float:
        return self.rows / self.job_write_seconds

    @property
    def baseline_rows_per_second(self) -> float:
        return self.rows / self.baseline_seconds


def measure(_ctx: object, quick: bool) -> Measured:
    """Load the table with the Spark job, then the same rows with a plain producer; both
    tables are read back. Raises if a load fails or the two tables differ.

    The suite's context is not used: this benchmark starts and stops its own broker.
    """
    accounts, per_account = SIZES[quick]
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
        written = history.write_history(Path(scratch) / "history", accounts, per_account, "csv")
        job = _run_job(broker.bootstrap, written.out)

        loaded = read_topic(settings, app.PROFILES, timeout=120)
        records = [(k, v) for k, v in loaded if k is not None and v is not None]
        if len(records) != job["rows"]:
            raise RuntimeError(f"the job reported {job['rows']} rows, the topic has {len(records)}")
        baseline_seconds = _plain_producer_load(settings, records)
        if dict(read_topic(settings, BASELINE_TOPIC, timeout=120)) != dict(records):
            raise RuntimeError("the plain producer's table differs from the Spark job's")

    return Measured(
        rows=int(job["rows"]),
        history_rows=written.rows,
        spark_session_seconds=job["session_seconds"],
        job_seconds=job["job_seconds"],
        job_check_seconds=job["check_seconds"],
        job_write_seconds=job["write_seconds"],
        baseline_seconds=baseline_seconds,
        total_seconds=time.monotonic() - started,
    )


def report(measured: Measured, plot_path: PlotPath) -> Result:
    """The whole job and its write phase against the plain producer; the plot."""
    from benchmarks import plots  # matplotlib: not in the Spark job's child process

    m = measured
    baseline_label = "plain confluent-kafka producer, same rows (pre-serialised)"
    rows = [
        Row(
            metric="rows/s, whole job (files -> aggregate -> checks -> write)",
            measured=m.job_rows_per_second,
            measured_label="worker spark load account-profiles, local[2]",
            baseline=m.baseline_rows_per_second,
            baseline_label=baseline_label,
            unit="rows/s",
        ),
        Row(
            metric="rows/s, write phase only",
            measured=m.write_phase_rows_per_second,
            measured_label="one idempotent producer per Spark partition",
            baseline=m.baseline_rows_per_second,
            baseline_label=baseline_label,
            unit="rows/s",
        ),
    ]
    phases = [
        ("Spark session start-up (not in the job's rate)", m.spark_session_seconds),
        ("the job", m.job_seconds),
        ("the job: reading and checks", m.job_check_seconds),
        ("the job: writing", m.job_write_seconds),
        ("plain producer", m.baseline_seconds),
    ]
    details = [table(["phase", "seconds"], [[p, f"{sec:.1f}"] for p, sec in phases])]
    facts = {"rows": m.rows, "history_rows": m.history_rows, "partitions": PARTITIONS}
    plot = plots.comparison(
        plot_path(NAME),
        TITLE,
        [(r.metric, r.measured, r.baseline) for r in rows],
        ("Spark job", "plain producer"),
    )
    return Result(NAME, TITLE, rows=rows, details=details, plots=[plot], facts=facts)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--job"]:
        print(json.dumps(_job(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(asdict(measure(None, "--quick" in sys.argv[1:])), indent=2))
