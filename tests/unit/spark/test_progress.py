"""A worker error raised in a Spark Python worker is rebuilt on the driver by its name."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")

from worker.kafka.loader import LoadFailed  # noqa: E402
from worker.spark.errors import SchemaMismatch, TableNotFound  # noqa: E402
from worker.spark.progress import first_line, rate, worker_error  # noqa: E402

SPARK_TEXT = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/worker/spark/decoding.py", line 120, in _convert
    raise SchemaMismatch(
worker.spark.errors.SchemaMismatch: key 'a': column 'n' is bigint but the table holds 'x'
SQLSTATE: 38000"""


def test_the_last_worker_error_in_the_traceback_is_rebuilt_with_its_message():
    error = worker_error(RuntimeError(SPARK_TEXT))

    assert isinstance(error, SchemaMismatch)
    assert str(error) == "key 'a': column 'n' is bigint but the table holds 'x'"


def test_writer_and_lookup_failures_keep_their_kind():
    written = worker_error(
        Exception("worker.kafka.table_writer.TableWriteFailed: t: 0 acknowledged")
    )
    missing = worker_error(Exception("worker.spark.errors.TableNotFound: topic 't' does not exist"))

    assert isinstance(written, LoadFailed) and str(written) == "t: 0 acknowledged"
    assert isinstance(missing, TableNotFound)


def test_other_failures_are_not_ours_and_keep_their_first_line():
    failure = RuntimeError("Job aborted due to stage failure\n  at org.apache...")

    assert worker_error(failure) is None
    assert first_line(RuntimeError("first\nsecond")) == "first"
    assert rate(1000, 2.0) == "500 rows/s"
