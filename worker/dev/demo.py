"""``make demo``: a local broker, sample data, two workers over a minute of payments.

Everything runs on loopback; every process the demo starts is stopped by its PID.
The summary compares the workers' alerts with a plain-Python reference computation.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from worker.config import Settings, load
from worker.dev import sample_data
from worker.dev.broker import EmbeddedBroker, free_port
from worker.examples import payments as app
from worker.kafka.clients import Admin, TopicSpec
from worker.kafka.loader import produce_records, read_topic
from worker.serde import JSON, STR


def create_example_topics(settings: Settings, partitions: int) -> None:
    Admin(settings).create_topics(
        [
            TopicSpec(app.PAYMENTS, partitions),
            TopicSpec(app.PROFILES, partitions, {"cleanup.policy": "compact"}),
            TopicSpec(app.ALERTS, partitions),
        ]
    )


def load_sample_data(
    settings: Settings, accounts: int, payments: int, partitions: int
) -> dict[str, int]:
    create_example_topics(settings, partitions)
    accts = sample_data.accounts(accounts)
    loaded_profiles = produce_records(
        settings, app.PROFILES, sample_data.profiles(accts), STR, JSON
    )
    loaded_payments = 0
    if payments:
        loaded_payments = produce_records(
            settings, app.PAYMENTS, sample_data.payments(accts, payments), STR, JSON
        )
    return {"profiles": loaded_profiles, "payments": loaded_payments}


def scrape(port: int) -> dict[str, float]:
    """Sum of every sample per metric name from a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def _scrape_or_empty(port: int) -> dict[str, float]:
    try:
        return scrape(port)
    except OSError:
        return {}


class _DemoWorker:
    def __init__(self, index: int, bootstrap: str, workdir: Path) -> None:
        self.name = f"worker-{index}"
        self.port = free_port()
        self.log_path = workdir / f"{self.name}.log"
        cmd = [
            sys.executable, "-m", "worker", "start",
            "--state-dir", str(workdir / self.name),
            "--set", f"bootstrap.servers={bootstrap}",
            "--set", f"http.port={self.port}",
            "--set", "commit.interval.ms=1000",
            "--set", "session.timeout.ms=6000",
            "--set", "max.poll.interval.ms=10000",
        ]  # fmt: skip
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        return _scrape_or_empty(self.port)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)


def run_demo(duration: float, rate: int, workdir: Path) -> int:
    """Run the whole demo; return 0 when the workers' alerts match the reference."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    broker = EmbeddedBroker(log_path=workdir / "broker.log")
    workers: list[_DemoWorker] = []
    try:
        bootstrap = broker.start()
        settings = load(None, {"bootstrap.servers": bootstrap}).settings
        print(f"broker on {bootstrap}; loading sample data", flush=True)
        accts = sample_data.accounts(200)
        load_sample_data(settings, 200, 0, 4)
        workers = [_DemoWorker(i, bootstrap, workdir) for i in (1, 2)]
        print(f"started {', '.join(w.name for w in workers)}; producing payments", flush=True)
        stream = _produce_for(settings, accts, duration, rate)
        processed = _wait_processed(workers, len(stream), timeout=120.0)
        return _summarise(settings, accts, stream, workers, processed)
    finally:
        codes = [w.stop() for w in workers]
        if codes:
            print(f"workers stopped with exit codes {codes}", flush=True)
        broker.stop()


def _produce_for(
    settings: Settings, accts: list[sample_data.Account], duration: float, rate: int
) -> list[tuple[str, dict[str, Any]]]:
    stream: list[tuple[str, dict[str, Any]]] = []
    started = time.monotonic()
    second = 0
    while time.monotonic() - started < duration:
        chunk = list(sample_data.payments(accts, rate, start=len(stream)))
        produce_records(settings, app.PAYMENTS, chunk, STR, JSON)
        stream.extend(chunk)
        second += 1
        pause = started + second - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the demo's traffic generator, not waiting on a condition
    return stream


def _wait_processed(workers: list[_DemoWorker], expected: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    total = 0.0
    while time.monotonic() < deadline:
        total = sum(w.metrics().get("worker_processed_records_total", 0.0) for w in workers)
        if total >= expected:
            break
        time.sleep(0.5)
    return total


def _summarise(
    settings: Settings,
    accts: list[sample_data.Account],
    stream: list[tuple[str, dict[str, Any]]],
    workers: list[_DemoWorker],
    processed: float,
) -> int:
    profiles = dict(sample_data.profiles(accts))
    _, expected = sample_data.reference(profiles, stream)
    got = {orjson.loads(v)["payment_id"] for _, v in read_topic(settings, app.ALERTS) if v}
    print("\n=== demo summary ===")
    print(f"payments produced:      {len(stream)}")
    for w in workers:
        m = w.metrics()
        print(
            f"{w.name}: processed {int(m.get('worker_processed_records_total', 0))}, "
            f"active tasks {int(m.get('worker_tasks', 0))}, "
            f"commits {int(m.get('worker_commits_total', 0))}, "
            f"restored {int(m.get('worker_restored_records_total', 0))}"
        )
    print(f"records processed:      {int(processed)}")
    print(f"alerts expected:        {len(expected)}")
    print(f"alerts produced:        {len(got)} distinct")
    missing, extra = set(expected) - got, got - set(expected)
    ok = processed >= len(stream) and not missing and not extra
    print(
        f"match with reference:   {'yes' if ok else f'NO (missing {len(missing)}, extra {len(extra)})'}"
    )
    return 0 if ok else 1
