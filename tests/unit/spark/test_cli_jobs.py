"""``worker spark submit``: the package is shipped, and an unreachable master is named."""

from __future__ import annotations

import socket
import sys
import zipfile

from click.testing import CliRunner

from worker.cli import main
from worker.spark.cli_jobs import package_archive, unreachable


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_archive_holds_the_worker_package_with_the_data_source():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        names = zipfile.ZipFile(package_archive(Path(scratch))).namelist()

    assert "worker/spark/datasource.py" in names and "worker/__init__.py" in names
    assert not any("__pycache__" in name for name in names)


def test_dry_run_prints_spark_submit_with_the_package_and_the_job():
    result = CliRunner().invoke(
        main,
        ["spark", "submit", "--master", "spark://h:7077", "--dry-run", "--", "export", "s",
         "--to", "out.parquet"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    line = result.stdout
    assert "spark-submit --master spark://h:7077" in line
    assert "--py-files" in line and "worker.zip" in line
    assert f"spark.pyspark.python={sys.executable}" in line
    assert line.rstrip().endswith("submit.py export s --to out.parquet")


def test_an_unreachable_master_fails_before_spark_submit_runs():
    master = f"spark://127.0.0.1:{closed_port()}"

    result = CliRunner().invoke(main, ["spark", "submit", "--master", master, "--", "load", "x"])

    assert result.exit_code == 1
    assert "cannot reach the Spark master at 127.0.0.1:" in result.stderr
    assert "start it, or fix --master" in result.stderr
    assert unreachable("yarn") == "", "other masters are left to spark-submit"


def test_an_unknown_job_is_a_usage_error():
    result = CliRunner().invoke(main, ["spark", "submit", "--master", "yarn", "--", "dance"])

    assert result.exit_code == 2 and "unknown job 'dance'" in result.stderr
