"""The broker unreachable for 60 s (while processing, with a failover in it, and at
start-up), and a slow broker, through a TCP proxy the test controls.

The broker advertises the proxy's address, so every client the worker has (group member,
consumers, producer, admin) reaches it only through the proxy; cutting the proxy resets
every connection and refuses new ones, while the broker keeps its data. A proxy cut
before the worker starts is a broker that is down at start-up and comes back on the same
address (the test broker keeps its topics only in memory, so it is never restarted
itself). The topology is ``worker.examples.counting`` (one output per input), so
completeness, and exactly-once under ``exactly_once_v2``, are checkable record by record.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import KAFKA, Broker
from tests.support.ports import PortRegistry
from tests.support.proxy import TcpProxy
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.broker import EmbeddedBroker
from worker.dev.kafka_broker import KafkaBroker
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

PARTITIONS = 4
KEYS = [f"k{i:02d}" for i in range(20)]
OUTAGE_S = 60.0
APP = "worker.examples.counting:build"


class Proxied:
    """A broker of this test's own whose only way in is ``proxy``."""

    def __init__(self, broker: Broker, proxy: TcpProxy) -> None:
        self.broker = broker
        self.proxy = proxy
        self.bootstrap = proxy.address
        self.sent = 0
        settings = load(None, {"bootstrap.servers": self.bootstrap}, environ={}).settings
        self._settings = settings
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(t, PARTITIONS, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def produce(self, count: int) -> None:
        """Inputs with ids ``sent..sent+count-1`` (only while the proxy is up)."""
        records = [(KEYS[i % len(KEYS)], {"id": i}) for i in range(self.sent, self.sent + count)]
        produce_records(self._settings, counting.INPUTS, records, STR, JSON)
        self.sent += count

    def output_ids(self) -> Counter[int]:
        """Output ids as a read_committed reader on Kafka sees them (aborted ones hidden)."""
        records = read_committed_topic(self.bootstrap, counting.OUTPUTS, PARTITIONS)
        return Counter(orjson.loads(r.value)["id"] for _, r in records if r.value)


@pytest.fixture
def proxied(tmp_path: Path, ports: PortRegistry, broker_kind: str) -> Iterator[Proxied]:
    broker_port = ports.take()
    # The proxy listens on the same port again after each cut: a registry port, so no
    # other test of the run can take it in between.
    with TcpProxy("127.0.0.1", broker_port, port=ports.take()) as proxy:
        broker: Broker
        if broker_kind == KAFKA:
            # Its own connections (transaction markers) go around the proxy, as a broker's
            # inter-broker listener would around a client-side network fault.
            broker = KafkaBroker(
                port=broker_port,
                take_port=ports.take,
                data_dir=tmp_path / "kafka",
                log_path=tmp_path / "broker.log",
                advertised_port=proxy.port,
            )
        else:
            broker = EmbeddedBroker(
                port=broker_port, log_path=tmp_path / "broker.log", advertised_port=proxy.port
            )
        with broker:
            yield Proxied(broker, proxy)


def start_worker(worker_factory, proxied: Proxied, guarantee: str, name: str = "w", **extra):  # type: ignore[no-untyped-def]
    settings = {
        "bootstrap.servers": proxied.bootstrap,
        "processing.guarantee": guarantee,
        "commit.interval.ms": 500,
        "num.standby.replicas": 0,
        **extra,
    }
    worker = worker_factory(name, settings=settings, args=["--app", APP])
    worker.wait_ready(90)
    return worker


def ride_out_outage(  # type: ignore[no-untyped-def]
    workers, proxied: Proxied, how: str, during: Callable[[], None] | None = None
) -> None:
    """Cut the proxy (``reset`` or ``blackhole``) for OUTAGE_S; the workers must stay up
    and report not ready. ``during`` runs a third of the way into the outage; a worker
    it stopped is no longer watched."""
    if how == "reset":
        proxied.proxy.cut()
    else:
        proxied.proxy.blackhole()
    cut_at = time.monotonic()
    for worker in workers:
        wait_until(
            lambda w=worker: not w.ready(), 30, message="/readyz 503 while the broker is away"
        )
    while time.monotonic() - cut_at < OUTAGE_S:
        if during is not None and time.monotonic() - cut_at >= OUTAGE_S / 3:
            during, act = None, during
            act()
        for worker in [w for w in workers if w.returncode != -9]:
            assert worker.alive, f"the worker died during the outage\n{worker.log_tail()}"
            assert worker.healthy(), "the processing loop must stay alive"
            assert not worker.ready(), "ready while the broker is unreachable"
        time.sleep(0.5)  # a sampling period over a fixed-length outage, not a wait
    proxied.proxy.restore()
    for worker in [w for w in workers if w.alive]:
        worker.wait_ready(120)


def wait_for_every_output(proxied: Proxied, workers) -> Counter[int]:  # type: ignore[no-untyped-def]
    """Every input's output (read_committed); returns how often each id was output."""
    expected = set(range(proxied.sent))
    seen: list[Counter[int]] = [Counter()]

    def complete() -> bool:
        seen[0] = proxied.output_ids()
        return set(seen[0]) == expected

    wait_until(
        complete,
        120,
        message=lambda: (
            f"every input's output: {len(expected - set(seen[0]))} missing, e.g."
            f" {sorted(expected - set(seen[0]))[:5]}; processed"
            f" {[w.metric('worker_processed_records_total') for w in workers if w.alive]}"
        ),
    )
    return seen[0]


# How the network fails: ``reset`` (every connection reset, new ones refused) or
# ``blackhole`` (packets dropped: connections hang until the network is back). Two of
# the four pairings of failure and guarantee, to keep the run short; the failover test
# below covers a third.
@pytest.mark.parametrize(
    ("how", "guarantee"), [("reset", "at_least_once"), ("blackhole", "exactly_once_v2")]
)
@pytest.mark.duration(75)
def test_a_60s_broker_outage_is_ridden_out_and_the_output_is_complete(
    proxied, worker_factory, guarantee, how
):
    worker = start_worker(worker_factory, proxied, guarantee)
    proxied.produce(1000)
    wait_until(lambda: len(proxied.output_ids()) == 1000, 60, message="first outputs")
    proxied.produce(5000)  # cut while these are processed and not all committed

    ride_out_outage([worker], proxied, how)

    proxied.produce(1000)
    ids = wait_for_every_output(proxied, [worker])
    if guarantee == "exactly_once_v2":
        assert max(ids.values()) == 1, "exactly one output per input"
    events = {e.get("event") for e in worker.log_events()}
    assert {"broker.unreachable", "broker.reachable"} <= events
    assert worker.terminate() == 0


@pytest.mark.duration(85)
def test_a_worker_killed_during_a_60s_outage_fails_over_to_the_other_with_nothing_lost(
    proxied, worker_factory
):
    a, b = (
        start_worker(
            worker_factory, proxied, "exactly_once_v2", name, **{"num.standby.replicas": 1}
        )
        for name in ("a", "b")
    )
    wait_until(
        lambda: (
            a.metric("worker_tasks", kind="active") + b.metric("worker_tasks", kind="active")
            == PARTITIONS
        ),
        60,
        message="the tasks shared",
    )
    proxied.produce(1000)
    wait_until(lambda: len(proxied.output_ids()) == 1000, 60, message="first outputs")
    proxied.produce(5000)

    ride_out_outage([a, b], proxied, "reset", during=lambda: b.kill())

    assert b.returncode == -9
    wait_until(
        lambda: a.metric("worker_tasks", kind="active") == PARTITIONS,
        60,
        message="the survivor took every task",
    )
    proxied.produce(1000)
    ids = wait_for_every_output(proxied, [a])
    assert max(ids.values()) == 1, "exactly one output per input"
    assert a.terminate() == 0


@pytest.mark.duration(72)
def test_a_worker_started_while_the_broker_is_down_waits_for_it_then_processes(
    proxied, worker_factory
):
    proxied.proxy.cut()  # the broker is down before the worker starts
    settings = {"bootstrap.servers": proxied.bootstrap, "commit.interval.ms": 500}
    worker = worker_factory("w", settings=settings, args=["--app", APP])
    worker.wait_healthy(30)
    down_at = time.monotonic()
    while time.monotonic() - down_at < OUTAGE_S:
        assert worker.alive, f"the worker gave up on the broker\n{worker.log_tail()}"
        assert worker.healthy(), "alive while it waits"
        assert not worker.ready(), "ready without a broker"
        time.sleep(0.5)  # a sampling period over a fixed-length outage, not a wait
    proxied.proxy.restore()  # the broker is back, on the same address

    worker.wait_ready(90)
    proxied.produce(1000)
    wait_for_every_output(proxied, [worker])
    waits = [e for e in worker.log_events() if e.get("event") == "broker.waiting"]
    assert waits and waits[0]["step"] == "internal topic names"  # start-up's first broker step
    assert len(waits) <= 2 + OUTAGE_S / 15, f"logged sparingly: {len(waits)} lines"
    assert any(e.get("event") == "broker.waited" for e in worker.log_events())
    assert worker.terminate() == 0


@pytest.mark.duration(10)
def test_a_worker_waiting_for_the_broker_stops_at_once_on_sigterm(proxied, worker_factory):
    proxied.proxy.cut()
    worker = worker_factory(
        "w", settings={"bootstrap.servers": proxied.bootstrap}, args=["--app", APP]
    )
    wait_until(
        lambda: any(e.get("event") == "broker.waiting" for e in worker.log_events()),
        30,
        message="the worker waiting for the broker",
    )
    stopped_at = time.monotonic()
    assert worker.terminate(timeout=10) == 0
    assert time.monotonic() - stopped_at < 5, "SIGTERM ends the wait promptly"


def _time_to_process(worker, proxied: Proxied, count: int, batches: int = 1) -> float:  # type: ignore[no-untyped-def]
    """Produce ``count`` inputs in ``batches``, each once the one before is processed;
    seconds until the worker has processed all of them."""
    started = time.monotonic()
    for _ in range(batches):
        target = worker.metric("worker_processed_records_total") + count // batches
        proxied.produce(count // batches)
        worker.wait_for_metric(
            "worker_processed_records_total", lambda v, target=target: v >= target, 120
        )
    return time.monotonic() - started


BATCHES = 5
LATENCY_S = 0.2


@pytest.mark.duration(15)
def test_a_slow_broker_lowers_throughput_and_breaks_nothing(proxied, worker_factory):
    worker = start_worker(worker_factory, proxied, "at_least_once")
    fast = _time_to_process(worker, proxied, 5000, BATCHES)

    proxied.proxy.latency = LATENCY_S  # each chunk, each way
    slow = _time_to_process(worker, proxied, 5000, BATCHES)
    proxied.proxy.latency = 0.0

    # Each batch is produced after the one before was processed, so it reaches the worker
    # in a fetch answer the proxy holds back: a floor that a loaded machine cannot lower
    # (whereas 'slower than the direct run' failed when load slowed the direct run).
    floor = BATCHES * LATENCY_S
    assert slow >= floor, f"the slow broker did not slow processing ({slow:.2f}s < {floor}s)"
    expected = set(range(proxied.sent))
    wait_until(lambda: set(proxied.output_ids()) == expected, 60, message="every output")
    assert max(proxied.output_ids().values()) == 1, "no failure, so no reprocessing"
    assert worker.metric("worker_task_revivals_total") == 0, "no commit failed"
    assert worker.metric("worker_rebalances_total") == 1, "the membership held"
    assert worker.ready()
    print(f"5000 records: {fast:.2f}s direct, {slow:.2f}s with {LATENCY_S} s latency each way")
    assert worker.terminate() == 0
