"""The processes of ``make demo`` and how they stop: the broker, the workers (which
remember what their earlier runs processed), and one handler for Ctrl-C, SIGTERM and SIGHUP
that turns the first into :class:`Interrupted` and any later one into "stop at once".
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from worker.dev.broker import EmbeddedBroker
from worker.dev.kafka_broker import KafkaBroker
from worker.dev.processes import WorkerProcess, WorkerProcessFailed, guarded
from worker.errors import WorkerError

# The demo's worker settings: commit four times a second (each commit writes the
# changelogs, whose arrival at a reader shows the stalls: demo_traffic.ChangelogWatch),
# notice a dead member within seconds, exactly-once so that a SIGKILL leaves no double
# counts in the totals. Record time (the default extractor): the app's hour window and
# quiet alerts run on the payments' event times.
WORKER_SETTINGS = {
    "processing.guarantee": "exactly_once_v2",
    "commit.interval.ms": "250",
    "session.timeout.ms": "6000",
    "max.poll.interval.ms": "10000",
}


class DemoFailed(WorkerError):
    """The demo cannot go on (a process died, nothing became ready...)."""


class DemoBroker(EmbeddedBroker):
    def command(self) -> list[str]:
        return guarded(super().command())

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


class DemoKafka(KafkaBroker):
    """Apache Kafka for ``make demo DEMO_BROKER=kafka``: its data in the demo's directory,
    SIGKILLed with the demo (``die_with_parent``)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(
            log_path=workdir / "broker.log", data_dir=workdir / "kafka", die_with_parent=True
        )

    def alive(self) -> bool:
        return all(node.exit_code() is None and node.pid is not None for node in self.nodes)


def start_broker(
    workdir: Path, brokers: list[DemoBroker | DemoKafka], attempts: int = 3, kafka: bool = False
) -> DemoBroker | DemoKafka:
    """A broker on a port picked here; another port if that one was taken meanwhile.

    Each broker is appended to ``brokers`` before it starts, so clean-up always sees it.
    ``kafka``: Apache Kafka instead of the embedded broker.
    """
    problem = ""
    for _ in range(attempts):
        broker = DemoKafka(workdir) if kafka else DemoBroker(log_path=workdir / "broker.log")
        brokers.append(broker)
        try:
            broker.start()
            time.sleep(0.2)  # a broker that lost the race for its port exits right away
            if broker.alive():
                return broker
            problem = "it exited right after start-up"
        except WorkerError as exc:
            problem = str(exc)
        broker.stop()
    raise DemoFailed(f"no broker could start ({problem}); see {workdir / 'broker.log'}")


@dataclass
class Scrape:
    """One ``/metrics`` scrape: every sample, summed per (name) or per (name, label value)."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def total(self, name: str, **labels: str) -> int:
        return int(
            sum(
                value
                for sample, sample_labels, value in self.samples
                if sample == name and all(sample_labels.get(k) == v for k, v in labels.items())
            )
        )


class DemoWorker(WorkerProcess):
    """A worker of the demo: an OS-picked HTTP port, dies with the demo, and remembers its
    last scrape and what its earlier runs processed (a restart's counters start at 0)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        workdir: Path,
        *,
        app: str | None = None,
        application_id: str | None = None,
    ) -> None:
        """``app``: ``--app`` (the default: the payments app) with its ``application_id``."""
        settings = {"bootstrap.servers": bootstrap, **WORKER_SETTINGS}
        if application_id is not None:
            settings["application.id"] = application_id
        super().__init__(
            state_dir=workdir / name,
            http_port=0,
            settings=settings,
            args=["--app", app] if app else [],
            name=name,
            die_with_parent=True,
        )
        self.last = Scrape()
        self.earlier_processed = 0  # records processed by its runs before this one

    def start(self) -> DemoWorker:
        """Start the process (again, after it exited: same state dir, a new HTTP port)."""
        if self.alive:
            raise DemoFailed(f"{self.name} is running already (pid {self.pid})")
        if self.pid is not None:
            self.earlier_processed += self.last.total("worker_processed_records_total")
        self.last = Scrape()
        super().start()
        return self

    def check_alive(self) -> None:
        if self.pid is not None and not self.alive:
            raise DemoFailed(
                f"{self.name} (pid {self.pid}) exited with code {self.returncode}; "
                + self.log_tail(15)
            )

    def scrape(self) -> Scrape:
        """The latest scrape of this run; the previous one if the worker does not answer now."""
        with suppress(OSError, ValueError, WorkerProcessFailed):
            self.last = Scrape(self.metric_samples())
        return self.last

    def processed(self) -> int:
        """Records processed over all its runs (as last scraped): a restart starts at 0."""
        return self.earlier_processed + self.scrape().total("worker_processed_records_total")


def stop_workers(workers: list[DemoWorker], grace: float, hurry: Callable[[], bool]) -> None:
    """SIGTERM every worker, wait for their clean stop, SIGKILL whatever is left."""
    for w in workers:
        w.request_stop()
    deadline = time.monotonic() + grace
    while any(w.alive for w in workers) and time.monotonic() < deadline and not hurry():
        time.sleep(0.05)
    for w in workers:
        if w.alive:
            print(f"{w.name} (pid {w.pid}) did not stop in time: SIGKILL", flush=True)
        w.close()


# -- signals -----------------------------------------------------------------------------


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """One handler for Ctrl-C, SIGTERM (e.g. from make) and SIGHUP, for the whole run.

    Until clean-up starts, a signal raises Interrupted. From then on nothing can interrupt
    the clean-up: a further signal only makes it skip the waiting and SIGKILL.
    """

    def __init__(self) -> None:
        self.cleaning = False
        self.hurry = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self._previous = {s: signal.signal(s, self._handle) for s in _STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.cleaning:
            self.cleaning = True
            raise Interrupted(signum)
        if not self.hurry:
            print("\nstopping at once (SIGKILL)", file=sys.stderr, flush=True)
        self.hurry = True

    def hurried(self) -> bool:
        return self.hurry
