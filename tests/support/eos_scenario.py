"""Exactly-once fault scenarios on the counting app, judged as a Kafka user would judge them.

The inputs are produced by the test (keys spread over many accounts, each value an id),
the ground truth is a plain-Python recount of them, and the judge is a plain
``read_committed`` consumer (tests/support/committed_reader.py) plus the query API: one
output per input id, each key's counts 1..n in input order, and every store equal to the
recount, both in its changelog and as the running workers answer for it.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import confluent_kafka as ck
import orjson
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.committed_reader import committed_table, read_committed
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess
from worker.examples import counting

APP = "worker.examples.counting:build"


Value = Callable[[random.Random, int], dict[str, Any]]


def _id_only(rng: random.Random, n: int) -> dict[str, Any]:
    return {"id": n}


class Inputs:
    """The test's input records and their recount; ``produce`` may run on a feeder thread.

    ``topics`` are created with ``partitions`` each, the first being the input; each
    input's key is one of ``keys`` and its value ``value(rng, id)`` (the counting app's
    by default)."""

    def __init__(
        self,
        bootstrap: str,
        partitions: int,
        keys: int,
        seed: int,
        replicas: int = 1,
        *,
        topics: Sequence[str] = (counting.INPUTS, counting.OUTPUTS),
        value: Value = _id_only,
    ) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.topic = topics[0]
        self._value = value
        self.keys = [f"acct-{i:04d}" for i in range(keys)]
        # One producer for the test's life: one per call capped the feeder at ~50 records/s.
        self._producer = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.sent: list[tuple[str, dict[str, Any]]] = []
        admin = AdminClient({"bootstrap.servers": bootstrap})
        created = admin.create_topics([NewTopic(t, partitions, replicas) for t in topics])
        for future in created.values():
            future.result(30)

    def produce(self, count: int) -> None:
        """``count`` more inputs, acknowledged (idempotent, murmur2 like the worker)."""
        with self._lock:
            start = len(self.sent)
            chunk = [
                (self._rng.choice(self.keys), self._value(self._rng, start + i))
                for i in range(count)
            ]
            for key, value in chunk:
                self._producer.produce(self.topic, orjson.dumps(value), key.encode())
            assert self._producer.flush(30) == 0, "inputs not acknowledged"
            self.sent.extend(chunk)

    def expected_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(key for key, _ in self.sent))


def eos_settings(bootstrap: str, **more: object) -> dict[str, object]:
    """The workers' settings: exactly-once, short commits, a standby per task."""
    return {
        "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 300,
        "num.standby.replicas": 1,
        **more,
    }


def start_workers(
    worker_factory: Any,
    settings: dict[str, object],
    names: str = "abc",
    app: str = APP,
    env: dict[str, str] | None = None,
) -> list[WorkerProcess]:
    """One worker per letter of ``names`` running ``app``, each ready (its tasks restored)."""
    workers = [worker_factory(n, settings=settings, args=["--app", app], env=env) for n in names]
    for w in workers:
        w.wait_ready(120)
    return workers


def kill_loop(workers: list[WorkerProcess], rng: random.Random, kills: int = 6) -> list[str]:
    """A random one of ``workers`` SIGKILLed about every 10 s (+-2 s), ``kills`` times,
    each started again at once over its state dir; the victims' names in order."""
    victims: list[str] = []
    begin = time.monotonic()
    for k in range(1, kills + 1):
        at = begin + 10 * k + rng.uniform(-2, 2)
        wait_until(lambda at=at: time.monotonic() >= at, 20)  # the kill's moment
        victim = rng.choice(workers)
        assert victim.kill() == -9
        victims.append(victim.name)
        victim.start()
    return victims


def id_problems(what: str, ids: Counter[int], inputs: int) -> list[str]:
    """The input ids (``0..inputs-1``) that ``what`` holds more than once or not at all,
    in words."""
    problems: list[str] = []
    repeated = sorted(i for i, n in ids.items() if n > 1)
    missing = sorted(set(range(inputs)) - set(ids))
    if repeated:
        problems.append(f"{len(repeated)} inputs with more than one {what}: {repeated[:10]}")
    if missing:
        problems.append(f"{len(missing)} inputs without {what}: {missing[:10]}")
    return problems


def outputs(inputs: Inputs) -> list[dict[str, int]]:
    """The outputs a read_committed consumer is served."""
    records = read_committed(inputs.bootstrap, counting.OUTPUTS, inputs.partitions)
    return [orjson.loads(r.value) for r in records if r.value]


def changelog_counts(inputs: Inputs, application_id: str) -> dict[str, int]:
    """The counts store as its changelog holds it for read_committed readers."""
    topic = f"{application_id}-{counting.COUNTS}-changelog"
    table = committed_table(inputs.bootstrap, topic, inputs.partitions)
    return {k.decode(): orjson.loads(v) for k, v in table.items()}


def all_processed(inputs: Inputs) -> bool:
    """Every input id has an output (repeats are for the judge to find)."""
    ids = {o["id"] for o in outputs(inputs)}
    return len(ids) >= len(inputs.sent)


def exactly_once_problems(inputs: Inputs, application_id: str) -> list[str]:
    """What a read_committed reader sees wrong, in words (empty when exact)."""
    seen = outputs(inputs)
    problems = id_problems("output", Counter(o["id"] for o in seen), len(inputs.sent))
    by_id = {o["id"]: o["count"] for o in seen}
    per_key: dict[str, list[int]] = {}
    for key, value in inputs.sent:
        per_key.setdefault(key, []).append(by_id.get(value["id"], -1))
    wrong = [k for k, counts in per_key.items() if counts != list(range(1, len(counts) + 1))]
    if wrong:
        problems.append(f"{len(wrong)} keys whose outputs do not count 1..n: {wrong[:10]}")
    expected = inputs.expected_counts()
    stored = changelog_counts(inputs, application_id)
    off = sorted(k for k in expected if stored.get(k) != expected[k])
    if off:
        sample = {k: (stored.get(k), expected[k]) for k in off[:5]}
        problems.append(f"{len(off)} keys whose changelog count is wrong (got, want): {sample}")
    return problems


def queried(worker: WorkerProcess, store: str, keys: Iterable[str]) -> dict[str, Any]:
    """Each key's value in ``store`` as the query API answers through ``worker``
    (redirects followed; None for a key it does not hold)."""
    found: dict[str, Any] = {}
    for key in keys:
        status, body = worker.get(f"/stores/{store}/keys/{urllib.parse.quote(key)}")
        found[key] = orjson.loads(body)["value"] if status == 200 else None
    return found


def queried_counts(worker: WorkerProcess, keys: list[str]) -> dict[str, int | None]:
    """Each key's count as the query API answers through ``worker``."""
    return queried(worker, counting.COUNTS, keys)


def active_partitions(worker: WorkerProcess) -> list[int]:
    """The partitions of the tasks ``worker`` runs as active, from its ``/tasks``."""
    status, body = worker.get("/tasks")
    assert status == 200, body
    tasks = orjson.loads(body)["tasks"]
    return [int(t["task_id"].split("_")[1]) for t in tasks if t["kind"] == "active"]


def logged_at(event: dict[str, Any]) -> float:
    """A worker log event's time (epoch seconds)."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def logged_since(
    workers: Iterable[WorkerProcess], name: str, since: float, **fields: object
) -> float:
    """When any of ``workers`` first logged event ``name`` with ``fields`` after ``since``
    (0.0: none did)."""
    return min(
        (
            logged_at(e)
            for w in workers
            for e in w.log_events()
            if e.get("event") == name
            and all(e.get(k) == v for k, v in fields.items())
            and logged_at(e) > since
        ),
        default=0.0,
    )


def assert_exactly_once(
    inputs: Inputs, workers: Iterable[WorkerProcess], application_id: str, seed: int
) -> None:
    """Once every input has its output: each exactly once, counted in order, in the
    changelog and as a running worker's query API answers (redirects followed)."""
    wait_until(lambda: all_processed(inputs), 180, message="every input has its output")
    problems = exactly_once_problems(inputs, application_id)
    assert not problems, f"(seed {seed}) " + "; ".join(problems)
    expected = inputs.expected_counts()
    alive = next(w for w in workers if w.alive)
    wait_until(
        lambda: queried_counts(alive, sorted(expected)) == expected,
        60,
        message="the query API answers every key's recount",
    )
