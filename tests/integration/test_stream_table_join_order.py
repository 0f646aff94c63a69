"""A stream-table join reads its two input partitions in timestamp order, on both brokers.

The table (versioned) and the stream are produced in the wrong order for a reader that
goes by fetch order: first every stream record, then the table versions older than them.
Each key has ``VERSIONS`` table versions a second apart and two stream records between
each version and the next, so a stream record joins the version valid at its time only
if the task processed every older version before it and no newer one: any order but the
timestamp order gives some stream records an older, a newer or no version.

* Started after both topics are loaded, under the default ``max.task.idle.ms`` (0): the
  task waits for the table partition while the broker reports data in it not yet fetched.
* Already running when the records arrive, under ``max.task.idle.ms`` > 0: the stream
  records wait (buffered, none processed) for the table partition, at its end and
  empty, until the table's late producer delivers; once the table is processed the
  newer stream records wait out the idle time again and are processed anyway, counted
  in ``worker_enforced_processing_total``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.kafka_io import create_topics, produce
from tests.integration.versioned_app import TOPICS_ENV
from tests.support.kafka_io import read_partition
from tests.support.waiting import wait_until
from worker.partitioner import partition_for

pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu", "kafka")]

REPO = str(Path(__file__).resolve().parents[2])  # so --app can import tests.*
PARTITIONS = 2
KEYS = [f"k{i}" for i in range(6)]
VERSIONS = 15
STEP_MS = 1_000  # between a key's versions; its stream records fall at +250 and +750
IDLE_MS = 8_000  # the late table arrives well within it, even on a loaded machine
FILLER = 12_000  # table rows of other keys, ~2.4 MB: over a fetch's 1 MiB per partition
FILLER_VALUE = b"x" * 200


def load(bootstrap: str, suffix: str) -> tuple[str, str, str]:
    table, stream, out = f"ot-{suffix}", f"os-{suffix}", f"oo-{suffix}"
    create_topics(bootstrap, {table: PARTITIONS, stream: PARTITIONS, out: PARTITIONS})
    return table, stream, out


def stream_records(base: int) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    records, times = [], []
    for v in range(VERSIONS):
        for offset in (250, 750):
            for key in KEYS:
                records.append((key.encode(), f"{key}@{v}.{offset}".encode()))
                times.append(base + v * STEP_MS + offset)
    return records, times


def table_records(base: int) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    records, times = [], []
    for v in range(VERSIONS):
        for key in KEYS:
            records.append((key.encode(), f"{key}-v{v}".encode()))
            times.append(base + v * STEP_MS)
    return records, times


def expected() -> dict[str, str]:
    """Each stream value -> what it joins as of its time: the version valid then."""
    return {
        f"{key}@{v}.{offset}": f"{key}@{v}.{offset}|{key}-v{v}"
        for v in range(VERSIONS)
        for offset in (250, 750)
        for key in KEYS
    }


def joined(bootstrap: str, out: str) -> dict[str, str]:
    results: dict[str, str] = {}
    for partition in range(PARTITIONS):
        for _offset, _key, value in read_partition(bootstrap, out, partition):
            assert value is not None
            text = value.decode()
            results[text.split("|")[0]] = text
    return results


def produce_stream_then_table(
    bootstrap: str, stream: str, table: str, between: Callable[[], None] = lambda: None
) -> None:
    """The stream records, then (after ``between``) the table rows older than them."""
    base = int(time.time() * 1000) - 3_600_000
    records, times = stream_records(base)
    produce(bootstrap, stream, records, timestamps=times)
    between()
    # Rows of other keys, older than every stream record, ahead of the versions: more
    # than one fetch of the table, so that a reader in fetch order meets the stream first.
    filler = [(f"other-{i}".encode(), FILLER_VALUE) for i in range(FILLER)]
    produce(bootstrap, table, filler, timestamps=[base - 1] * FILLER)
    records, times = table_records(base)
    produce(bootstrap, table, records, timestamps=times)


def wait_joined(bootstrap: str, out: str) -> dict[str, str]:
    want = expected()
    wait_until(lambda: len(joined(bootstrap, out)) >= len(want), 90, message="every stream record")
    return joined(bootstrap, out)


@pytest.mark.duration(40)
def test_a_worker_started_over_loaded_topics_joins_each_stream_record_as_of_its_time(
    bootstrap, worker_factory
):
    table, stream, out = load(bootstrap, uuid.uuid4().hex[:8])
    produce_stream_then_table(bootstrap, stream, table)
    worker = worker_factory(
        "ordered",
        settings={"commit.interval.ms": 200},
        args=["--app", "tests.integration.versioned_app:build"],
        env={TOPICS_ENV: f"{table},{stream},{out}", "PYTHONPATH": REPO},
    )
    worker.wait_ready(60)
    results = wait_joined(bootstrap, out)
    wrong = {k: v for k, v in results.items() if expected().get(k) != v}
    assert not wrong, f"{len(wrong)} of {len(results)} joined another version, e.g. " + str(
        sorted(wrong.items())[:3]
    )
    assert results == expected()


@pytest.mark.duration(40)
def test_a_running_worker_waits_up_to_max_task_idle_for_a_late_table(bootstrap, worker_factory):
    table, stream, out = load(bootstrap, uuid.uuid4().hex[:8])
    worker = worker_factory(
        "idling",
        settings={"commit.interval.ms": 200, "max.task.idle.ms": IDLE_MS},
        args=["--app", "tests.integration.versioned_app:build"],
        env={TOPICS_ENV: f"{table},{stream},{out}", "PYTHONPATH": REPO},
    )
    worker.wait_ready(60)
    tasks = {f"0_{partition_for(k.encode(), PARTITIONS)}" for k in KEYS}

    def stream_waiting() -> None:
        """Every task holds stream records it fetched and waits (its table at its end)."""
        buffered = lambda t: worker.metric("worker_buffered_records", task=t)  # noqa: E731
        wait_until(lambda: all(buffered(t) > 0 for t in tasks), 20, message="stream buffered")
        # The wait is charged to its own cause, not to an unexplained "other".
        idle = "worker_task_unavailable_seconds_total"
        wait_until(
            lambda: all(worker.metric(idle, task=t, cause="task_idle") > 0 for t in tasks),
            20,
            message="the wait charged to task_idle",
        )
        assert worker.metric("worker_processed_records_total") == 0
        assert not joined(bootstrap, out)

    produce_stream_then_table(bootstrap, stream, table, between=stream_waiting)
    results = wait_joined(bootstrap, out)
    assert results == expected()
    enforced = {t: worker.metric("worker_enforced_processing_total", task=t) for t in tasks}
    # The newest stream records of each task, past its table's last version, waited out
    # the idle time and were processed anyway.
    assert all(count > 0 for count in enforced.values()), enforced
