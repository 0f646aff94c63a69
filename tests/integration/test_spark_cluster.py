"""``worker spark submit`` runs a load and an export on a Spark standalone cluster, and
the export equals what a worker serves through interactive queries.

The cluster (one master, one worker, loopback only, small memory) is started from the
installed PySpark and stopped by PID (tests/support/spark_cluster.py). Its worker daemon
has no PYTHONPATH: the executors run the ``worker`` package the submit ships.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.waiting import wait_until
from worker.config import load
from worker.dev import history, sample_data
from worker.dev.processes import WorkerProcess
from worker.dev.sample_data import create_example_topics
from worker.examples import payments as app

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")
pq = pytest.importorskip("pyarrow.parquet")

from tests.support.jvm_options import EXECUTOR_CONF  # noqa: E402
from tests.support.process_groups import run_group  # noqa: E402
from tests.support.spark_cluster import StandaloneCluster  # noqa: E402

pytestmark = pytest.mark.integration

SMALL = [
    "--conf",
    "spark.executor.memory=512m",
    "--conf",
    "spark.driver.memory=512m",
    *EXECUTOR_CONF,
]


@pytest.fixture
def cluster(tmp_path: Path, ports) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(
        tmp_path / "spark", ports.take(), ports.take(), (ports.take(), ports.take())
    ) as running:
        yield running


def submit(
    cluster: StandaloneCluster, bootstrap: str, *job: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    argv = [sys.executable, "-m", "worker", "spark", "submit", "--master", cluster.master]
    argv += [*SMALL, "--", *job, "--set", f"bootstrap.servers={bootstrap}"]
    return run_group(argv, timeout=400, env=env)


# 240-260 s seen with Kafka's JVMs beside it; its two spark-submit runs take 400 s at most
@pytest.mark.duration(250)
@pytest.mark.timeout(900)
def test_a_load_and_an_export_run_on_a_standalone_cluster(
    cluster, own_broker, worker_factory, tmp_path
):
    settings = load(None, {"bootstrap.servers": own_broker.bootstrap}, environ={}).settings
    create_example_topics(settings, 4)
    history.write_history(tmp_path / "history", accounts=300, per_account=5, files=2)
    worker = worker_factory("w", settings={"bootstrap.servers": own_broker.bootstrap})

    loaded = submit(
        cluster,
        own_broker.bootstrap,
        "load",
        "account-profiles",
        "--input",
        str(tmp_path / "history"),
    )
    exported = submit(
        cluster, own_broker.bootstrap, "export", app.PROFILES, "--to", str(tmp_path / "out.parquet")
    )

    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert "loaded 300 rows into account-profiles (300 upserts, 0 deletes" in loaded.stdout
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (
        "exported account-profiles to" in exported.stdout
        and ": 300 rows from 4 partitions" in exported.stdout
    )
    shipped = list((cluster.base / "work").glob("app-*/*/worker.zip"))
    assert len(shipped) == 2, "each job's executor fetched the shipped package"
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    reference = history.reference_profiles(history.payments(sample_data.accounts(300), 5))
    assert {row["key"] for row in table} == set(reference)
    for row in table:
        expected = reference[row["key"]]
        assert row["n"] == expected["n"]
        assert math.isclose(row["mean"], expected["mean"], rel_tol=1e-12)
        assert math.isclose(row["std"], expected["std"], rel_tol=1e-9, abs_tol=1e-9)
    worker.wait_ready(120)
    exported_rows = {row["key"]: {c: row[c] for c in ("mean", "std", "n")} for row in table}
    wait_until(
        lambda: all(served(worker, key) == value for key, value in exported_rows.items()),
        60,
        message="the worker serves exactly the exported profiles",
    )


def served(worker: WorkerProcess, key: str) -> Any:
    code, body = worker.get(f"/stores/{app.PROFILES}/keys/{key}")
    return orjson.loads(body)["value"] if code == 200 else None
