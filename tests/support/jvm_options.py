"""pytest plugin: the short-lived JVMs the tests start run with the test Kafka broker's flags.

Registered from tests/conftest.py (``pytest_plugins``). A test's Spark JVM lives for
seconds to minutes over tables of a few hundred rows, and Maven builds the Kafka Streams
baseline once; C2's compilations cost them more CPU than they ever win back, and
``make test`` is CPU-bound (six xdist workers on two cores). C1 only and the serial
collector (worker.dev.kafka_broker.JVM_FLAGS) halve a local Spark session's CPU and
Maven's (measured in docs/platform-notes.md, "Short-lived JVMs in the tests").

Spark and Maven read the options from the environment, which every child process
inherits: the sessions the tests open in-process and ``worker spark ...`` subprocesses
(spark-submit's driver: ``SPARK_SUBMIT_OPTS``), the standalone cluster's master and
worker daemons (``SPARK_DAEMON_JAVA_OPTS``), ``mvn`` (``MAVEN_OPTS``). A cluster's
executors take theirs from the job's conf: EXECUTOR_CONF. A value already in the
environment is kept (an empty one turns the flags off). Only the tests set these:
``make bench`` and users' jobs run the JVM's defaults.
"""

from __future__ import annotations

import os

from worker.dev.kafka_broker import JVM_FLAGS

OPTIONS = " ".join(JVM_FLAGS)
EXECUTOR_CONF = ("--conf", f"spark.executor.extraJavaOptions={OPTIONS}")
VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "MAVEN_OPTS")


def pytest_configure() -> None:
    for variable in VARIABLES:
        os.environ.setdefault(variable, OPTIONS)
