"""Apache Kafka itself (KRaft mode) on loopback ports: one broker, or a cluster of several.

The real broker beside :class:`~worker.dev.broker.EmbeddedBroker`, for what only Kafka
shows (read_committed that hides aborted records, transactions timed out by the broker,
generation-checked TxnOffsetCommit, offset metadata, exact ListOffsets). Runs the pinned
version from the jar cache of :mod:`worker.dev.kafka_install` with a bounded heap. Each
node is both broker and controller; a cluster's nodes form one static controller quorum.

``start()`` formats the storage and returns once the cluster is ready for a worker
(:func:`worker.kafka.broker_probe.broker_unready`: metadata, a transactional producer id,
the group coordinator), not merely listening. ``stop()`` stops every node by the PID it
started (SIGTERM, then SIGKILL) and deletes the data directory it created.
"""

from __future__ import annotations

import base64
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from worker.dev.broker import BrokerProcess, free_port, port_open, stop_process
from worker.dev.kafka_install import ensure_kafka
from worker.dev.processes import guarded
from worker.errors import FatalError
from worker.kafka.broker_probe import broker_unready

# A quick start and a small footprint; measured in docs/platform-notes.md ("Apache Kafka
# for tests"): C1 only and the serial collector start the broker faster than the
# defaults on this 2-core machine, and a test broker's load never needs C2.
JVM_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

# Settings that make tests quick without changing what a worker relies on. Internal
# topics get few partitions (each is created and loaded at start-up); timed-out
# transactions are aborted within a second of their timeout instead of up to 10 s
# later; the first group join is not delayed by 3 s.
QUICK_SETTINGS: Mapping[str, str] = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.flush.interval.messages": "9223372036854775807",
}

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
"""


def cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``StorageTool random-uuid`` makes one (base64url of
    16 random bytes, never starting with '-'), without starting a JVM for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def java_binary() -> str:
    """The absolute path of ``java`` (the parent-death guard execs a path, not a name)."""
    found = shutil.which("java")
    if found is None:
        raise FatalError("Apache Kafka needs a JDK (17 or newer): java is not on PATH")
    return found


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class KafkaNode:
    """One broker-and-controller JVM of a :class:`KafkaBroker`; restartable over its data."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        controller_port: int,
        data_dir: Path,
        proxied: tuple[int, int] | None = None,
    ) -> None:
        """``proxied``: (advertised port, internal port) when a proxy sits in front of
        ``port``; the broker's own connections (replication, transaction markers) then
        use a listener of their own on the internal port, around the proxy."""
        self.node_id = node_id
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.data_dir = data_dir
        self.proxied = proxied
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_fh: object | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    def write_properties(self, voters: str, replicas: int, extra: Mapping[str, str]) -> None:
        """``server.properties`` for this node; ``replicas`` is the cluster's size."""
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            **self._listeners(),
            "log.dirs": str(self.data_dir / "logs"),
            "default.replication.factor": str(min(replicas, 3)),
            "offsets.topic.replication.factor": str(min(replicas, 3)),
            "transaction.state.log.replication.factor": str(min(replicas, 3)),
            "transaction.state.log.min.isr": str(min(replicas, 2)),
            "share.coordinator.state.topic.replication.factor": str(min(replicas, 3)),
            "share.coordinator.state.topic.min.isr": str(min(replicas, 2)),
            "min.insync.replicas": str(min(replicas, 2)),
            **QUICK_SETTINGS,
            **extra,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{key}={value}\n" for key, value in props.items())
        self.properties_path.write_text(text)
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)

    def _listeners(self) -> dict[str, str]:
        plain = f"PLAINTEXT://{self.host}:{self.port}"
        controller = f"CONTROLLER://{self.host}:{self.controller_port}"
        if self.proxied is None:
            return {
                "listeners": f"{plain},{controller}",
                "advertised.listeners": plain,
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            }
        advertised, internal_port = self.proxied
        internal = f"INTERNAL://{self.host}:{internal_port}"
        return {
            "listeners": f"{plain},{internal},{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{advertised},{internal}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
        }

    def java(self, main: str, *args: str, heap_mb: int) -> list[str]:
        return [
            java_binary(),
            f"-Xmx{heap_mb}m",
            *JVM_FLAGS,
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp",
            f"{ensure_kafka()}/*",
            main,
            *args,
        ]

    def format_command(self, cluster: str) -> list[str]:
        return self.java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster,
            "-c",
            str(self.properties_path),
            "--ignore-formatted",
            heap_mb=256,
        )

    def start(self, log_path: Path, heap_mb: int, die_with_parent: bool) -> None:
        """Launch the JVM (storage formatted already); returns at once. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            return
        command = self.java("kafka.Kafka", str(self.properties_path), heap_mb=heap_mb)
        out = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_fh = out
        self._proc = subprocess.Popen(
            guarded(command) if die_with_parent else command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def exit_code(self) -> int | None:
        """The JVM's exit code once it has exited; None while it runs (or never started)."""
        return self._proc.poll() if self._proc else None

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """Controlled shutdown by SIGTERM to our PID, SIGKILL after ``timeout``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout)
        fh, self._log_fh = self._log_fh, None
        if fh is not None:
            fh.close()  # type: ignore[attr-defined]

    def terminate(self) -> None:
        """Send SIGTERM to our PID without waiting (the cluster stops its nodes together)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, for fault tests: no controlled shutdown. ``start`` brings it back."""
        self.stop(timeout=0.0)


class KafkaBroker(BrokerProcess):
    """Apache Kafka on loopback: ``nodes`` KRaft nodes (1 by default), a context manager.

    ``port`` is the first node's client port (default: a free one); the other nodes and
    every controller listener take ports from ``take_port``. With 3 nodes internal topics
    and new topics are replicated 3 times with ``min.insync.replicas`` 2. ``die_with_parent``
    as for EmbeddedBroker (on Linux the JVMs are SIGKILLed when the starting thread dies).
    ``settings`` add to or override the broker properties of every node.
    ``advertised_port`` (one node only): clients are told to use this port, where a
    test's TCP proxy forwards to ``port``, as with EmbeddedBroker.
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        nodes: int = 1,
        heap_mb: int = 512,
        data_dir: Path | None = None,
        take_port: Callable[[], int] | None = None,
        die_with_parent: bool = False,
        settings: Mapping[str, str] | None = None,
        advertised_port: int | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a Kafka cluster needs at least one node")
        if advertised_port is not None and nodes != 1:
            raise ValueError("a proxy in front (advertised_port) is for a single node")
        take = take_port or (lambda: free_port(host))
        self.host = host
        self.heap_mb = heap_mb
        self.die_with_parent = die_with_parent
        self.settings = dict(settings or {})
        self._own_data = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="kafka-"))
        self.log_path = log_path or self.data_dir / "broker.log"
        self.nodes = [
            KafkaNode(
                i + 1,
                host,
                (port if i == 0 and port else take()),
                take(),
                self.data_dir / f"node-{i + 1}",
                None if advertised_port is None else (advertised_port, take()),
            )
            for i in range(nodes)
        ]
        self._formatted = False

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def bootstrap(self) -> str:
        """The addresses clients use: the advertised ones (a proxy's, if one is in front)."""
        return ",".join(
            f"{self.host}:{node.proxied[0] if node.proxied else node.port}" for node in self.nodes
        )

    @property
    def pid(self) -> int | None:
        return self.nodes[0].pid

    def node_log(self, node: KafkaNode) -> Path:
        if len(self.nodes) == 1:
            return self.log_path
        return self.log_path.with_name(f"{self.log_path.stem}-{node.node_id}{self.log_path.suffix}")

    def start(self, timeout: float = 90.0) -> str:
        """Format (first time), launch every node, wait until ready; the bootstrap string.

        Raises:
            FatalError: Java/Maven missing, the fetch or format failed, a node exited, or
                the cluster was not ready within ``timeout`` (every node is stopped then).
        """
        ensure_kafka()
        if not self._formatted:
            self._format()
        for node in self.nodes:
            node.start(self.node_log(node), self.heap_mb, self.die_with_parent)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _format(self) -> None:
        voters = ",".join(f"{n.node_id}@{self.host}:{n.controller_port}" for n in self.nodes)
        cluster = cluster_id()
        formats = []
        for node in self.nodes:
            node.write_properties(voters, len(self.nodes), self.settings)
            formats.append(
                subprocess.Popen(
                    node.format_command(cluster),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
        for node, proc in zip(self.nodes, formats, strict=True):
            output, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise FatalError(
                    f"formatting Kafka node {node.node_id} failed: {output.decode()[-2000:]}"
                )
        self._formatted = True

    def wait_ready(self, timeout: float) -> None:
        """Until every node listens and the cluster answers a worker's first requests."""
        deadline = time.monotonic() + timeout
        reason = "not listening"
        while time.monotonic() < deadline:
            for node in self.nodes:
                code = node.exit_code()
                if code is not None:
                    raise FatalError(
                        f"Kafka node {node.node_id} exited with code {code} at start-up; "
                        f"the end of its log:\n{log_tail(self.node_log(node))}"
                    )
            if all(port_open(self.host, node.port) for node in self.nodes):
                reason = (
                    broker_unready(self.bootstrap, min(10.0, deadline - time.monotonic())) or ""
                )
                if not reason:
                    return
            time.sleep(0.1)
        raise FatalError(f"Kafka at {self.bootstrap} not ready within {timeout}s: {reason}")

    def wait(self) -> int:
        """Until the first node exits; its exit code."""
        return self.nodes[0].wait()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every node by its PID (SIGKILL after ``timeout``); delete a data dir we
        created. Idempotent."""
        for node in self.nodes:
            node.terminate()
        for node in self.nodes:
            node.stop(timeout)
        if self._own_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self._formatted = False
