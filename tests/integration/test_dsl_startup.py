"""A DSL topology whose topics do not fit stops ``worker start`` with exit 1 and a line
naming them: inputs one sub-topology reads that are not co-partitioned, and a repartition
topic left with another partition count than its writer's inputs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.apps import dsl_cases

pytestmark = pytest.mark.integration

REPO = str(Path(__file__).resolve().parents[2])
APP = "tests.apps.dsl_cases:build"


def start(worker_factory: Any, case: str, topics: dict[str, int]) -> tuple[Any, str]:
    prefix = f"dsl-{uuid.uuid4().hex[:8]}-"
    admin = AdminClient({"bootstrap.servers": worker_factory.bootstrap})
    new = [NewTopic(t if t.startswith("test-") else prefix + t, n, 1) for t, n in topics.items()]
    for future in admin.create_topics(new).values():
        future.result(30)
    env = {"PYTHONPATH": REPO, dsl_cases.CASE_ENV: case, dsl_cases.PREFIX_ENV: prefix}
    return worker_factory("w", env=env, args=["--app", APP]), prefix


def error_line(worker: Any) -> str:
    (line,) = [x for x in worker.logs().splitlines() if x.startswith("error:")]
    return line


def test_merged_inputs_that_are_not_co_partitioned_exit_1_naming_both(worker_factory: Any) -> None:
    worker, prefix = start(worker_factory, "merged", {"left": 2, "right": 3})
    assert worker.wait_exit(60) == 1
    line = error_line(worker)
    assert "not co-partitioned" in line
    assert f"{prefix}left=2" in line and f"{prefix}right=3" in line


def test_a_repartition_topic_with_another_partition_count_exits_1_naming_it(
    worker_factory: Any,
) -> None:
    topic = f"{worker_factory.application_id}-by-merchant-repartition"
    worker, _ = start(
        worker_factory, "per_merchant", {"payments": 3, "merchant-counts": 3, topic: 2}
    )
    assert worker.wait_exit(60) == 1
    line = error_line(worker)
    assert topic in line and "2 partitions" in line
