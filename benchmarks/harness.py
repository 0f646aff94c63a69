"""What every benchmark shares: a broker, worker processes, bulk I/O and samplers.

Every process a benchmark starts (broker, workers, py-spy) is registered on the run's
:class:`contextlib.ExitStack` the moment it exists, and stopped by its own PID when the
benchmark ends, whether it succeeded or not. Nothing is ever signalled by name.

Workers are the real thing: ``python -m worker start`` children driven through
:class:`worker.dev.processes.WorkerProcess` (the same harness the integration tests
use) and observed only from outside: ``/metrics``, ``/readyz``, logs, output topics.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import confluent_kafka as ck
import orjson
from confluent_kafka.admin import AdminClient, NewTopic

from worker.config import Settings, load
from worker.dev.broker import EmbeddedBroker, free_port
from worker.dev.processes import WorkerProcess, WorkerProcessFailed
from worker.events import MEMBERSHIP_TRANSITION
from worker.kafka.error_classifier import is_partition_eof, topic_exists

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

# Group timing that suits the embedded broker (platform-facts.md: joins hang with
# librdkafka's default max.poll.interval.ms as the rebalance timeout). The same values
# the integration tests use.
GROUP_SETTINGS: dict[str, object] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "max.poll.interval.ms": 10000,
}
# Platform-facts fetch tuning, for every raw client of the harness and the baselines.
FETCH_TUNING: dict[str, object] = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 100000}


# A Kafka record as (key, value) bytes, serialised already.
Record = tuple[bytes | None, bytes | None]


class BenchmarkFailed(Exception):
    """A benchmark could not produce its measurement (a process died, a wait timed out)."""


class BenchmarkStopping(BenchmarkFailed):
    """Something was about to start while the benchmark was being torn down."""


@dataclass
class RunContext:
    """One benchmark's surroundings: its work directory and what to stop at its end.

    Everything a benchmark starts goes through :meth:`own`, which registers the stop
    action and starts the thing under one lock; :meth:`close` takes that lock, refuses
    every later start and runs the stop actions, last started first. So a helper thread
    (scale-out runs its modes side by side in quick mode) can never leave a process
    behind that was started while the benchmark was being torn down.
    """

    workdir: Path
    plots_dir: Path
    quick: bool
    profile: bool = False
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: bool = False

    def own(self, start: Callable[[], T], stop: Callable[[], object]) -> T:
        """Register ``stop`` (idempotent, safe before ``start`` ran), then ``start()``.

        Raises BenchmarkStopping, starting nothing, once :meth:`close` has begun.
        """
        with self._lock:
            if self._closing:
                raise BenchmarkStopping("the benchmark is being stopped")
            self._stack.callback(stop)
            return start()

    def close(self) -> None:
        """Stop everything :meth:`own` started; later starts are refused. Idempotent."""
        with self._lock:
            self._closing = True
            self._stack.close()

    def path(self, *parts: str) -> Path:
        """A file under the work directory (its parent created)."""
        target = self.workdir.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def plot_path(self, name: str) -> Path:
        """Where the report's PNG called ``name`` goes."""
        self.plots_dir.mkdir(parents=True, exist_ok=True)
        return self.plots_dir / f"{name}.png"


# -- processes --------------------------------------------------------------------------


def start_broker(run: RunContext, name: str = "broker") -> EmbeddedBroker:
    """A fresh in-memory broker on a free loopback port, stopped by PID at the end."""
    broker = EmbeddedBroker(log_path=run.path(f"{name}.log"))
    # Tansu waits for open connections on SIGTERM; its data is in memory and thrown away
    # anyway, so SIGKILL comes soon.
    run.own(broker.start, lambda: broker.stop(timeout=3.0))
    return broker


def worker_settings(
    bootstrap: str, application_id: str, overrides: Mapping[str, object] | None = None
) -> dict[str, object]:
    settings: dict[str, object] = {
        "application.id": application_id,
        "bootstrap.servers": bootstrap,
        **GROUP_SETTINGS,
    }
    settings.update(overrides or {})
    return settings


def client_settings(bootstrap: str) -> Settings:
    """Settings for the worker's own clients (admin, loaders) against ``bootstrap``: the
    benchmarks create and load topics the way the worker and the demo do."""
    return load(None, {"bootstrap.servers": bootstrap}, environ={}).settings


def new_application_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start_worker(
    run: RunContext,
    name: str,
    settings: Mapping[str, object],
    app: str | None = None,
    state_dir: Path | None = None,
) -> WorkerProcess:
    """Start ``python -m worker start`` with ``settings``; SIGKILLed by PID at the end if alive.

    ``app`` is a ``module:attr`` (modules of this repository are importable: the child
    gets the repository on ``PYTHONPATH``).
    """
    home = run.workdir / name
    worker = WorkerProcess(
        state_dir=state_dir or home / "state",
        http_port=free_port(),
        settings=settings,
        args=["--app", app] if app else [],
        log_path=home / "worker.log",
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        },
        cwd=home,
        name=name,
    )
    return run.own(worker.start, worker.close)


def readyz_tasks(worker: WorkerProcess) -> list[dict[str, Any]]:
    """The tasks ``/readyz`` lists (task_id, kind, state); empty while the worker does not
    answer."""
    try:
        code, body = worker.get("/readyz")
    except OSError:
        return []
    if code not in (200, 503):
        return []
    return list(orjson.loads(body)["tasks"])


def stop_worker(worker: WorkerProcess, timeout: float = 30.0) -> None:
    """SIGTERM and wait; a worker that does not stop in time is SIGKILLed (by its PID)."""
    if worker.alive:
        try:
            worker.terminate(timeout)
        except WorkerProcessFailed:
            worker.close()


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    alive: Sequence[WorkerProcess] = (),
) -> Any:
    """Poll ``condition`` until truthy; fail if the deadline passes or a watched worker dies."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for worker in alive:
            if not worker.alive:
                raise BenchmarkFailed(
                    f"{worker.name} exited with {worker.returncode} while waiting for {what}\n"
                    + worker.log_tail(30)
                )
        if time.monotonic() >= deadline:
            raise BenchmarkFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)  # polling an external process; there is nothing to wait on


def metric_or_zero(worker: WorkerProcess, name: str, **labels: str) -> float:
    """A metric of a worker that may not answer yet (then 0)."""
    try:
        return worker.metric(name, **labels)
    except OSError:
        return 0.0


# -- topics and bulk I/O -----------------------------------------------------------------


def create_topics(
    bootstrap: str, topics: Mapping[str, int], config: Mapping[str, Mapping[str, str]] | None = None
) -> None:
    """Create ``{name: partitions}``; a topic that exists already is fine."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, n, config=dict((config or {}).get(t, {}))) for t, n in topics.items()]
    for name, future in admin.create_topics(new, request_timeout=30).items():
        try:
            future.result(30)
        except ck.KafkaException as exc:
            if not topic_exists(exc):
                raise BenchmarkFailed(f"cannot create {name}: {exc.args[0]}") from exc


def bulk_producer(bootstrap: str) -> ck.Producer:
    """A producer for loading data fast: murmur2 like the worker, large batches, acks=all."""
    return ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1048576,
        }
    )


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    producer: ck.Producer | None = None,
    flush: bool = True,
    next_offsets: dict[int, int] | None = None,
) -> int:
    """Produce pre-serialised (key, value) pairs, partitioned by murmur2(key); return the count.

    ``next_offsets``, when given, is updated per partition with the offset after the last
    acknowledged record. Raises BenchmarkFailed if the broker did not acknowledge every
    record (when flushing).
    """
    own = producer is None
    prod = producer or bulk_producer(bootstrap)
    failed: list[str] = []
    ends = next_offsets if next_offsets is not None else {}

    def on_delivery(err: ck.KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        elif msg.offset() >= ends.get(msg.partition(), 0):
            ends[msg.partition()] = msg.offset() + 1

    count = 0
    for key, value in records:
        while True:
            try:
                prod.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                prod.poll(0.05)
        count += 1
        if count % 10000 == 0:
            prod.poll(0)
    if flush or own:
        remaining = prod.flush(120)
        if remaining or failed:
            raise BenchmarkFailed(
                f"{topic}: {remaining} records unacknowledged, {len(failed)} failed "
                + (failed[0] if failed else "")
            )
    return count


def raw_consumer(
    bootstrap: str, group: str, extra: Mapping[str, object] | None = None
) -> ck.Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        **FETCH_TUNING,
    }
    config.update(extra or {})
    return ck.Consumer(config)


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    if meta.error is not None:
        raise BenchmarkFailed(f"{topic}: {meta.error}")
    return sorted(meta.partitions)


def read_timestamps(
    bootstrap: str, topic: str, start: Mapping[int, int] | None = None, timeout: float = 120.0
) -> dict[int, list[int]]:
    """Every record's timestamp (ms) per partition of ``topic``, from offset ``start[p]``
    (default: the beginning) to the end."""
    parts = partitions_of(bootstrap, topic)
    consumer = raw_consumer(bootstrap, f"bench-reader-{uuid.uuid4().hex[:6]}")
    found: dict[int, list[int]] = {p: [] for p in parts}
    begin = dict(start or {})
    try:
        consumer.assign(
            [ck.TopicPartition(topic, p, begin.get(p, ck.OFFSET_BEGINNING)) for p in parts]
        )
        pending = set(parts)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BenchmarkFailed(f"reading {topic}: partitions {sorted(pending)} unfinished")
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is None:
                    found[cast(int, msg.partition())].append(msg.timestamp()[1])
                elif is_partition_eof(err):
                    pending.discard(msg.partition())
                else:
                    raise BenchmarkFailed(f"reading {topic}: {err}")
    finally:
        consumer.close()
    return found


class SteadyProducer:
    """Produces ``rate`` records a second to ``topic`` in 100 ms ticks on a thread, until
    closed. ``records(count, start)`` makes the next ``count`` records, numbered from
    ``start`` (the number sent so far)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        records: Callable[[int, int], Iterable[Record]],
        rate: int,
    ) -> None:
        self._producer = bulk_producer(bootstrap)
        self._topic = topic
        self._records = records
        self._per_tick = max(1, rate // 10)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"produce-{topic}", daemon=True)
        self.sent = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            next_tick = time.monotonic()
            while not self._stop.is_set():
                for key, value in self._records(self._per_tick, self.sent):
                    self._producer.produce(self._topic, value, key)
                self.sent += self._per_tick
                self._producer.poll(0)
                next_tick += 0.1
                self._stop.wait(max(0.0, next_tick - time.monotonic()))  # pacing, not a condition
        except BaseException as exc:  # reported by close()
            self.error = exc

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop, flush what was produced; idempotent. Raises what the thread raised."""
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(30)
        if self.error is not None:
            error, self.error = self.error, None
            raise BenchmarkFailed(f"producer to {self._topic} failed: {error!r}")


def side_by_side(calls: Mapping[str, Callable[[], T]]) -> dict[str, T]:
    """Run the calls on daemon threads at once; their results in the calls' order, or
    the first failure raised.

    Joined with a timeout so a signal reaches the main thread at once; if it stops the
    run, the context's clean-up stops every process (the threads then fail fast or die
    with the interpreter: they are daemons).
    """
    results: dict[str, T] = {}
    errors: list[BaseException] = []

    def call(label: str, fn: Callable[[], T]) -> None:
        try:
            results[label] = fn()
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=call, args=item, name=item[0], daemon=True)
        for item in calls.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    if errors:
        raise errors[0]
    return {label: results[label] for label in calls}


# -- samplers ----------------------------------------------------------------------------


class Sampler:
    """Calls ``probe()`` every ``interval`` seconds on a thread; keeps (monotonic time, value).

    Probes that raise OSError (a worker not answering yet) are skipped.
    """

    def __init__(self, probe: Callable[[], float], interval: float = 0.1) -> None:
        self._probe = probe
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[tuple[float, float]] = []

    def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.samples.append((time.monotonic(), self._probe()))
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def rss_bytes(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS so far) of ``pid`` from /proc, in bytes (Linux)."""
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount, _unit = line.split()
                values[key[:-1]] = int(amount) * 1024
    return values["VmRSS"], values["VmHWM"]


def log_time(event: Mapping[str, Any]) -> float:
    """The wall-clock time (epoch seconds) of a structlog JSON event (``timestamp`` in ISO)."""
    stamp = str(event["timestamp"]).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(stamp).timestamp()


def starts_join(event: Mapping[str, Any]) -> bool:
    """Whether a worker log event is its group member starting a join (JoinGroup sent)."""
    return event.get("event") == MEMBERSHIP_TRANSITION and event.get("dst") == "joining"
