"""``worker state repair`` against a real broker: a value the app cannot decode, written to a
changelog, fails the worker after every restore until the repair's tombstone follows it."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_io import fold, produce_raw, read_partition
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess
from worker.examples import counting

pytestmark = [pytest.mark.integration, pytest.mark.duration(40)]

PARTITIONS = 2
APP = "worker.examples.counting:build"


def cli(worker: WorkerProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    settings = [
        f"--set={key}={worker.settings[key]}" for key in ("application.id", "bootstrap.servers")
    ]
    command, rest = args[0], args[1:]
    state_dir = ["--state-dir", str(worker.state_dir)] if command == "wipe" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", "state", command, *state_dir, *settings, *rest],
        capture_output=True, text=True, timeout=120, input=stdin, env=env,
    )  # fmt: skip


def counts_table(bootstrap: str, changelog: str) -> dict[bytes, bytes]:
    table: dict[bytes, bytes] = {}
    for partition in range(PARTITIONS):
        table.update(fold(read_partition(bootstrap, changelog, partition)))
    return table


def inputs(first: int, keys: list[str]) -> list[tuple[bytes | None, bytes | None]]:
    return [(key.encode(), orjson.dumps({"id": first + i})) for i, key in enumerate(keys)]


def test_a_poisoned_changelog_value_is_repaired_with_a_tombstone(own_broker, worker_factory):
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    ).values():
        future.result(30)
    settings = {"bootstrap.servers": bootstrap, "commit.interval.ms": 200}
    worker = worker_factory("w", settings=settings, args=["--app", APP])
    worker.wait_ready(90)
    changelog = f"{worker.settings['application.id']}-{counting.COUNTS}-changelog"
    produce_raw(bootstrap, counting.INPUTS, inputs(0, ["k0", "k1", "k2", "k3"] * 3))
    wait_until(
        lambda: counts_table(bootstrap, changelog).get(b"k1") == b"3", 60, message="k1 counted"
    )
    assert worker.terminate() == 0

    # 1. poison k1: a value its JSON serde cannot decode, written with the repair tool
    poisoned = cli(worker, "repair", counting.COUNTS, "--key", "k1", "--value", "{not json", "-y")
    assert poisoned.returncode == 0, poisoned.stderr
    assert "key b'k1'" in poisoned.stdout and "1 bytes b'3'" in poisoned.stdout
    assert counts_table(bootstrap, changelog)[b"k1"] == b"{not json"

    # 2. every restore brings it back: the next input for k1 fails the worker
    assert cli(worker, "wipe", "0_0", "0_1", "-y").returncode == 0
    worker.start()
    worker.wait_ready(90)
    produce_raw(bootstrap, counting.INPUTS, inputs(100, ["k1"]))
    assert worker.wait_exit(60) != 0

    # 3. the repair: a tombstone after the bad value, in the partition that holds it
    asked = cli(worker, "repair", counting.COUNTS, "--key", "k1", "--delete", stdin="n\n")
    assert asked.returncode == 1 and "{not json" in asked.stdout
    repaired = cli(worker, "repair", counting.COUNTS, "--key", "k1", "--delete", "--yes")
    assert repaired.returncode == 0, repaired.stderr
    assert "wrote a tombstone" in repaired.stdout
    assert b"k1" not in counts_table(bootstrap, changelog)

    # 4. the restart's restore (from the stored offset: no wipe) applies the tombstone, and
    # k1 counts again from nothing
    worker.start()
    worker.wait_ready(90)
    wait_until(
        lambda: counts_table(bootstrap, changelog).get(b"k1") == b"1", 60, message="k1 recounted"
    )
    assert worker.alive
    assert counts_table(bootstrap, changelog)[b"k0"] == b"3"
    assert worker.terminate() == 0


def test_repair_of_a_key_nowhere_in_the_changelog_writes_nothing(own_broker, worker_factory):
    bootstrap = own_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "lonely-app-counts-changelog"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    base = ["--set", "application.id=lonely-app", "--set", f"bootstrap.servers={bootstrap}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}

    def repair(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "worker", "state", "repair", *base, *args],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    missing = repair("counts", "--key", "nope", "--delete", "-y")
    assert missing.returncode == 1 and "in no partition" in missing.stderr
    no_topic = repair("other", "--key", "nope", "--delete", "-y")
    assert no_topic.returncode == 1 and "does not exist" in no_topic.stderr
    usage = repair("counts", "--key", "k", "--delete", "--value", "x")
    assert usage.returncode == 2
    forced = repair("counts", "--key-hex", "00ff", "--value-hex", "0102", "--partition", "1", "-y")
    assert forced.returncode == 0, forced.stderr
    assert read_partition(bootstrap, topic, 1) == [(0, b"\x00\xff", b"\x01\x02")]
    assert read_partition(bootstrap, topic, 0) == []
