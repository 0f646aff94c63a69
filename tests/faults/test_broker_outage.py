"""The broker unreachable for 30 s, and a slow broker, through a TCP proxy the test controls.

The broker advertises the proxy's address, so every client the worker has (group member,
consumers, producer, admin) reaches it only through the proxy; cutting the proxy resets
every connection and refuses new ones, while the broker keeps its data. The topology is
``worker.examples.counting`` (one output per input), so completeness, and exactly-once under
``exactly_once_v2``, are checkable record by record.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.ports import PortRegistry
from tests.support.proxy import TcpProxy
from tests.support.transaction_log import read_committed_topic
from tests.support.waiting import wait_until
from worker.config import load
from worker.dev.broker import EmbeddedBroker
from worker.examples import counting
from worker.kafka.loader import produce_records
from worker.serde import JSON, STR

pytestmark = pytest.mark.faults

PARTITIONS = 4
KEYS = [f"k{i:02d}" for i in range(20)]
OUTAGE_S = 30.0
APP = "worker.examples.counting:build"


class Proxied:
    """A broker of this test's own whose only way in is ``proxy``."""

    def __init__(self, broker: EmbeddedBroker, proxy: TcpProxy) -> None:
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
def proxied(tmp_path: Path, ports: PortRegistry) -> Iterator[Proxied]:
    broker_port = ports.take()
    # The proxy listens on the same port again after each cut: a registry port, so no
    # other test of the run can take it in between.
    with TcpProxy("127.0.0.1", broker_port, port=ports.take()) as proxy:
        broker = EmbeddedBroker(
            port=broker_port, log_path=tmp_path / "broker.log", advertised_port=proxy.port
        )
        with broker:
            yield Proxied(broker, proxy)


def start_worker(worker_factory, proxied: Proxied, guarantee: str):  # type: ignore[no-untyped-def]
    settings = {
        "bootstrap.servers": proxied.bootstrap,
        "processing.guarantee": guarantee,
        "commit.interval.ms": 500,
        "num.standby.replicas": 0,
    }
    worker = worker_factory("w", settings=settings, args=["--app", APP])
    worker.wait_ready(90)
    return worker


def ride_out_outage(worker, proxied: Proxied, how: str) -> None:  # type: ignore[no-untyped-def]
    """Cut the proxy (``reset`` or ``blackhole``) for OUTAGE_S; the worker must stay up
    and report not ready."""
    if how == "reset":
        proxied.proxy.cut()
    else:
        proxied.proxy.blackhole()
    cut_at = time.monotonic()
    wait_until(lambda: not worker.ready(), 30, message="/readyz 503 while the broker is away")
    while time.monotonic() - cut_at < OUTAGE_S:
        assert worker.alive, f"the worker died during the outage\n{worker.log_tail()}"
        assert worker.healthy(), "the processing loop must stay alive"
        assert not worker.ready(), "ready while the broker is unreachable"
        time.sleep(0.5)  # a sampling period over a fixed-length outage, not a wait
    proxied.proxy.restore()
    worker.wait_ready(120)


# How the network fails: ``reset`` (every connection reset, new ones refused) or
# ``blackhole`` (packets dropped: connections hang until the network is back).
@pytest.mark.parametrize("how", ["reset", "blackhole"])
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
@pytest.mark.duration(43)
def test_a_30s_broker_outage_is_ridden_out_and_the_output_is_complete(
    proxied, worker_factory, guarantee, how
):
    worker = start_worker(worker_factory, proxied, guarantee)
    proxied.produce(1000)
    wait_until(lambda: len(proxied.output_ids()) == 1000, 60, message="first outputs")
    proxied.produce(5000)  # cut while these are processed and not all committed

    ride_out_outage(worker, proxied, how)

    proxied.produce(1000)
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
            f" {worker.metric('worker_processed_records_total')}, commits"
            f" {worker.metric('worker_commits_total')}"
        ),
    )
    ids = proxied.output_ids()
    if guarantee == "exactly_once_v2":
        assert max(ids.values()) == 1, "exactly one output per input"
    events = {e.get("event") for e in worker.log_events()}
    assert {"broker.unreachable", "broker.reachable"} <= events
    assert worker.terminate() == 0


def _time_to_process(worker, proxied: Proxied, count: int) -> float:  # type: ignore[no-untyped-def]
    """Produce ``count`` inputs; seconds until the worker has processed all of them."""
    target = worker.metric("worker_processed_records_total") + count
    proxied.produce(count)
    started = time.monotonic()
    worker.wait_for_metric("worker_processed_records_total", lambda v: v >= target, 120)
    return time.monotonic() - started


@pytest.mark.duration(15)
def test_a_slow_broker_lowers_throughput_and_breaks_nothing(proxied, worker_factory):
    worker = start_worker(worker_factory, proxied, "at_least_once")
    fast = _time_to_process(worker, proxied, 5000)

    proxied.proxy.latency = 0.2  # each chunk, each way: 0.4 s per request round trip
    slow = _time_to_process(worker, proxied, 5000)
    proxied.proxy.latency = 0.0

    assert slow > fast, f"the slow broker did not slow processing ({slow:.2f}s vs {fast:.2f}s)"
    expected = set(range(proxied.sent))
    wait_until(lambda: set(proxied.output_ids()) == expected, 60, message="every output")
    assert max(proxied.output_ids().values()) == 1, "no failure, so no reprocessing"
    assert worker.metric("worker_task_revivals_total") == 0, "no commit failed"
    assert worker.metric("worker_rebalances_total") == 1, "the membership held"
    assert worker.ready()
    print(f"5000 records: {fast:.2f}s direct, {slow:.2f}s with 0.2 s latency each way")
    assert worker.terminate() == 0
