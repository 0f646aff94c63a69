"""The composition root releases what it started, whatever step fails."""

from __future__ import annotations

import socket
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from worker.clock import FakeClock
from worker.config import Settings, load
from worker.examples.windowed import build
from worker.kafka.topics import TopicLayout
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.runtime import assembly
from worker.runtime.assembly import Hooks, Outcome, assemble
from worker.runtime.guarantee import Guarantee
from worker.runtime.status import Status
from worker.state.directory import StateDirectory


class Closable:
    """A client stand-in that records its close."""

    made: list[Closable] = []

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self.closed = False
        Closable.made.append(self)

    def close(self, *_args: Any) -> None:
        self.closed = True


class Boom(RuntimeError):
    pass


def settings(tmp_path: Path) -> Settings:
    return load(
        None,
        {
            "application.id": "assembly",
            "bootstrap.servers": "127.0.0.1:9",
            "state.dir": str(tmp_path / "state"),
            "http.port": 0,
            "http.host": "127.0.0.1",
        },
        environ={},
    ).settings


def hooks() -> Hooks:
    return Hooks(Status, lambda: None, lambda: None)  # type: ignore[arg-type,return-value]


@pytest.fixture
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> list[Closable]:
    """Kafka clients that need no broker; the restore consumer fails to start."""
    Closable.made = []
    monkeypatch.setattr(assembly, "Admin", Closable)
    monkeypatch.setattr(
        assembly, "prepare_topics", lambda *_a, **_k: TopicLayout(partitions={0: 1})
    )
    monkeypatch.setattr(assembly, "report_unused_internal_topics", lambda *_a, **_k: [])
    monkeypatch.setattr(
        assembly,
        "choose_guarantee",
        lambda *_a: Guarantee(Closable(), lambda _member: None),  # type: ignore[arg-type,return-value]
    )
    monkeypatch.setattr(assembly, "DataConsumer", Closable)
    monkeypatch.setattr(assembly, "WatermarkReader", Closable)

    def no_restore_consumer(*_args: Any) -> None:
        raise Boom("restore consumer could not start")

    monkeypatch.setattr(assembly, "RestoreConsumer", no_restore_consumer)
    return Closable.made


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_failing_step_releases_every_part_started_before_it(
    tmp_path: Path, fake_kafka: list[Closable], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = settings(tmp_path)
    topology: BuiltTopology = build().build().build()
    http_ports: list[int] = []
    real_http = assembly.HttpServer

    def recorded_http(*args: Any, **kwargs: Any) -> Any:
        server = real_http(*args, **kwargs)
        http_ports.append(server.port)
        return server

    monkeypatch.setattr(assembly, "HttpServer", recorded_http)

    with pytest.raises(Boom), ExitStack() as stack:
        assemble(
            stack,
            config,
            topology,
            config.state_dir,
            Metrics(),
            FakeClock(),
            threading.Event(),
            hooks(),
            Outcome(),
        )

    collector, consumer, watermarks = fake_kafka[1:]
    assert collector.closed and consumer.closed and watermarks.closed
    assert http_ports and not port_open(http_ports[0]), "the HTTP server was stopped"
    again = StateDirectory(config.state_dir, "assembly")
    again.open()  # the process lock was released: a second open would raise StateLocked
    again.close()
