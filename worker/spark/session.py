"""The Spark session of a load: local mode by default, or whatever spark-submit provides.

Local mode (``local[N]``) is tuned for one machine: no web UI, no console progress bar
(the loaders report their own progress), shuffles over ``2 * N`` partitions instead of
Spark's 200, and Python workers started with this very interpreter: PySpark otherwise
starts ``python3`` from PATH, which may not be the environment that has ``worker``
installed. Those two settings are environment variables, set (unless already set) in
this process for the session's lifetime.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from worker.spark.errors import SparkUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
_LOCAL = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?$")


def require_spark() -> None:
    """Raise SparkUnavailable, saying how to fix it, when pyspark or Java is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'worker[spark]' (pyspark 4.3, needs Java 17)"
        )
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) and not (
        shutil.which("java")
    ):
        raise SparkUnavailable(
            "Spark needs a Java runtime (17 or newer): none on PATH or JAVA_HOME"
        )


def local_threads(master: str) -> int | None:
    """Worker threads of a local master (``local[4]`` -> 4); None for a cluster master."""
    match = _LOCAL.match(master)
    if match is None:
        return None
    count = match.group(2)
    if count is None:
        return 1
    return (os.cpu_count() or 1) if count == "*" else int(count)


def session(
    master: str = DEFAULT_MASTER,
    app_name: str = "worker-spark-load",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the session. ``master=""`` leaves the master to spark-submit.

    Raises SparkUnavailable when pyspark or Java is missing.
    """
    require_spark()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    threads = local_threads(master) if master else None
    if master:
        builder = builder.master(master)
    if threads is not None:
        # Read when the context starts; explicit settings win. Local mode binds to
        # loopback (and Spark stops warning that the host name resolves to it).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.ui.enabled", "false").config(
            "spark.sql.shuffle.partitions", str(2 * threads)
        )
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
