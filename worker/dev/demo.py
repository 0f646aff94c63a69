"""``make demo``: a local broker, sample data, two workers over a minute of payments.

Everything runs on loopback. The broker listens on a port picked here; each worker
binds an HTTP port the OS picks (``http.port=0``) and reports it in its log, so the demo
needs no particular port to be free. Every process the demo starts is stopped by its
PID: on success, on failure, on Ctrl-C, SIGTERM or SIGHUP, and (on Linux) even if the
demo itself is killed, through the parent-death signal set before each child starts.

When the traffic has been processed the workers are stopped cleanly (a final commit),
and the output topics are checked against a plain-Python reference computation of the
same input: every alert, and every account's running totals (the ``account-totals``
changelog). The exit code is 0 only when both match and both workers exited 0.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from worker.config import Settings, load
from worker.dev import history, sample_data
from worker.dev.broker import EmbeddedBroker
from worker.errors import WorkerError
from worker.examples import payments as app
from worker.kafka.clients import Admin, TopicSpec
from worker.kafka.loader import produce_records, read_topic
from worker.serde import JSON, STR

ACCOUNTS = 200
PARTITIONS = 4
WORKERS = 2
# The demo's worker settings: commit every second, notice a dead member within seconds.
WORKER_SETTINGS = {
    "commit.interval.ms": "1000",
    "session.timeout.ms": "6000",
    "max.poll.interval.ms": "10000",
}
READY_TIMEOUT = 60.0  # workers joined, tasks restored, processing
DRAIN_TIMEOUT = 120.0  # after the last payment: everything processed
STOP_GRACE = 30.0  # SIGTERM -> exit, before SIGKILL
IDLE_SECONDS = 2.0  # the processed count must stand still this long to call it drained
_MARKER = ".worker-demo"  # a --workdir is emptied only if it has this (or is empty)


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


# -- child processes ---------------------------------------------------------------------

# Runs in each child before it execs the real program: on Linux, ask for SIGKILL when the
# demo dies (prctl PR_SET_PDEATHSIG = 1), so even a SIGKILLed demo leaves nothing behind.
# If the demo is already gone by then, do not start at all.
_GUARD = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "except (AttributeError, OSError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def _guarded(cmd: list[str]) -> list[str]:
    """``cmd`` started through the parent-death guard; the PID stays the same across exec."""
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *cmd]


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text[-lines:])


class DemoFailed(WorkerError):
    """The demo cannot go on (a process died, nothing became ready...)."""


class _Broker(EmbeddedBroker):
    def command(self) -> list[str]:
        return _guarded(super().command())

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


def _start_broker(workdir: Path, brokers: list[_Broker], attempts: int = 3) -> _Broker:
    """A broker on a port picked here; another port if that one was taken meanwhile.

    Each broker is appended to ``brokers`` before it starts, so clean-up always sees it.
    """
    problem = ""
    for _ in range(attempts):
        broker = _Broker(log_path=workdir / "broker.log")
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


def scrape(port: int, timeout: float = 5.0) -> Scrape:
    """Every sample of a worker's ``/metrics``. Raises OSError when nothing answers."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    result = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            result.samples.append((sample.name, dict(sample.labels), float(sample.value)))
    return result


class DemoWorker:
    """One ``worker start`` child with its own state dir and log; signalled only by its PID."""

    def __init__(self, name: str, bootstrap: str, workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.cmd = [
            sys.executable, "-m", "worker", "start",
            "--state-dir", str(workdir / name),
            "--set", f"bootstrap.servers={bootstrap}",
            "--set", "http.port=0",
        ]  # fmt: skip
        for key, value in WORKER_SETTINGS.items():
            self.cmd += ["--set", f"{key}={value}"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.last = Scrape()

    def start(self) -> None:
        # The demo's settings only: no WORKER_* variable of the caller's shell leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_path.open("ab") as log:
            # Its own session: a Ctrl-C in the terminal reaches the demo, which stops the
            # workers in order, instead of reaching every process at once.
            self.proc = subprocess.Popen(
                _guarded(self.cmd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def check_alive(self) -> None:
        if self.proc is not None and not self.running:
            raise DemoFailed(
                f"{self.name} (pid {self.proc.pid}) exited with code {self.proc.returncode}; "
                f"the end of {self.log_path}:\n{_log_tail(self.log_path)}"
            )

    def find_port(self) -> int | None:
        """The HTTP port from the ``worker.starting`` log line, once it is there."""
        if self.port is None:
            with suppress(OSError), self.log_path.open("rb") as log:
                for line in log:
                    if b'"worker.starting"' in line:
                        with suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                            self.port = int(orjson.loads(line)["http_port"])
                            break
        return self.port

    def ready(self) -> bool:
        port = self.find_port()
        if port is None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:  # refused, or 503 (HTTPError) while not ready
            return False

    def metrics(self) -> Scrape:
        """The latest scrape; the previous one if the worker does not answer now."""
        if self.port is not None:
            with suppress(OSError, ValueError):
                self.last = scrape(self.port)
        return self.last

    def terminate(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _stop_workers(workers: list[DemoWorker], grace: float, hurry: Callable[[], bool]) -> None:
    """SIGTERM every worker, wait for their clean stop, SIGKILL whatever is left."""
    for w in workers:
        w.terminate()
    deadline = time.monotonic() + grace
    while any(w.running for w in workers) and time.monotonic() < deadline and not hurry():
        time.sleep(0.05)
    for w in workers:
        if w.running:
            print(f"{w.name} (pid {w.pid}) did not stop in time: SIGKILL", flush=True)
            w.kill()


# -- signals -----------------------------------------------------------------------------


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Signals:
    """One handler for Ctrl-C, SIGTERM (e.g. from make) and SIGHUP, for the whole run.

    Until clean-up starts, a signal raises Interrupted. From then on nothing can interrupt
    the clean-up: a further signal only makes it skip the waiting and SIGKILL.
    """

    def __init__(self) -> None:
        self.cleaning = False
        self.hurry = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
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


# -- the demo ----------------------------------------------------------------------------


def run_demo(duration: float, rate: int, workdir: Path) -> int:
    """Run the whole demo; 0 when the output matches the reference and the workers stopped cleanly."""
    workdir = workdir.resolve()
    ours = any((workdir / name).exists() for name in (_MARKER, "broker.log"))
    if workdir.exists() and any(workdir.iterdir()) and not ours:
        print(f"demo: {workdir} is not empty and not a demo directory; not touching it")
        return 2
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / _MARKER).write_text("created by `worker dev demo`; emptied by the next run\n")
    brokers: list[_Broker] = []
    workers: list[DemoWorker] = []
    code = 1
    with _Signals() as signals:
        try:
            broker = _start_broker(workdir, brokers)
            code = _run(broker, workers, duration, rate, workdir, signals)
        except Interrupted as exc:
            signals.cleaning = True
            print(f"\ninterrupted ({exc}): stopping the workers and the broker", flush=True)
            code = 128 + exc.signum
        except WorkerError as exc:  # DemoFailed, or the broker/loader failing
            signals.cleaning = True
            print(f"\ndemo failed: {exc}", flush=True)
            code = 1
        finally:
            signals.cleaning = True
            _stop_workers(workers, STOP_GRACE, signals.hurried)
            for broker in brokers:
                broker.stop(timeout=0.5 if signals.hurry else 10.0)
            if code != 0 and workers:
                print(
                    "stopped "
                    + ", ".join(f"{w.name} (exit {w.returncode})" for w in workers if w.proc)
                    + " and the broker",
                    flush=True,
                )
    print(f"logs and state: {workdir}", flush=True)
    return code


def _run(
    broker: _Broker,
    workers: list[DemoWorker],
    duration: float,
    rate: int,
    workdir: Path,
    signals: _Signals,
) -> int:
    bootstrap = broker.bootstrap
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    print(
        f"broker on {bootstrap} (pid {broker.pid}); loading {ACCOUNTS} account profiles", flush=True
    )
    accts = sample_data.accounts(ACCOUNTS)
    load_sample_data(settings, ACCOUNTS, 0, PARTITIONS)
    # The historical payments a Spark job turns into these profiles (docs/spark.md):
    # `worker spark load account-profiles --input <workdir>/history` recomputes them.
    written = history.write_history(workdir / "history", ACCOUNTS, 50)
    print(f"wrote {written.rows} historical payments to {written.out} for the Spark loader")

    for i in range(1, WORKERS + 1):
        worker = DemoWorker(f"worker-{i}", bootstrap, workdir)
        workers.append(worker)  # tracked before it exists: clean-up covers a failed start
        worker.start()
    print("started " + ", ".join(f"{w.name} (pid {w.pid})" for w in workers), flush=True)
    started = time.monotonic()
    _wait_ready(workers, READY_TIMEOUT)
    print(f"workers ready in {time.monotonic() - started:.1f}s; "
          f"producing {rate} payments/s for {duration:.0f}s", flush=True)  # fmt: skip

    producing = time.monotonic()
    stream = _produce_for(settings, accts, duration, rate, workers)
    produced_in = time.monotonic() - producing
    drained_in = _wait_drained(workers, len(stream), DRAIN_TIMEOUT)
    for w in workers:
        w.metrics()  # the final numbers, before the workers go away
    where = where_to_look(workers[0].port, accts[0].id)  # a live query, before the stop
    signals.cleaning = True  # from here on a Ctrl-C only hurries the stop
    _stop_workers(workers, STOP_GRACE, signals.hurried)  # each commits its last records
    code = _summarise(settings, accts, stream, produced_in, drained_in, workers)
    print("\n".join(where), flush=True)
    return code


def _wait_ready(workers: list[DemoWorker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in workers:
            w.check_alive()
        if all(w.ready() for w in workers):
            return
        time.sleep(0.2)
    raise DemoFailed(
        f"the workers were not ready within {timeout:.0f}s (not ready: "
        + ", ".join(w.name for w in workers if not w.ready())
        + ")"
    )


def _produce_for(
    settings: Settings,
    accts: list[sample_data.Account],
    duration: float,
    rate: int,
    workers: list[DemoWorker],
) -> list[tuple[str, dict[str, Any]]]:
    """``rate`` payments a second for ``duration`` seconds; a progress line every 10 s."""
    stream: list[tuple[str, dict[str, Any]]] = []
    started = time.monotonic()
    second = 0
    while time.monotonic() - started < duration:
        for w in workers:
            w.check_alive()
        chunk = list(sample_data.payments(accts, rate, start=len(stream)))
        produce_records(settings, app.PAYMENTS, chunk, STR, JSON)
        stream.extend(chunk)
        second += 1
        if second % 10 == 0:
            processed = sum(w.metrics().total("worker_processed_records_total") for w in workers)
            print(f"  {second:3d}s: {len(stream)} payments produced, {processed} records processed",
                  flush=True)  # fmt: skip
        pause = started + second - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the demo's traffic generator, not waiting on a condition
    return stream


def _wait_drained(workers: list[DemoWorker], expected: int, timeout: float) -> float | None:
    """Seconds until the workers processed ``expected`` records and went idle (all ready);
    None if that did not happen within ``timeout``.

    Approximate on purpose: the exact check is the output, read after the workers stop.
    """
    started = time.monotonic()
    last, since = -1, started
    while time.monotonic() - started < timeout:
        for w in workers:
            w.check_alive()
        total = sum(w.metrics().total("worker_processed_records_total") for w in workers)
        now = time.monotonic()
        if total != last:
            last, since = total, now
        elif total >= expected and now - since >= IDLE_SECONDS and all(w.ready() for w in workers):
            return since - started
        time.sleep(0.25)
    return None


# -- the summary -------------------------------------------------------------------------


def _fold_changelog(settings: Settings, topic: str) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for key, value in read_topic(settings, topic):
        if key is None:
            continue
        if value is None:
            table.pop(STR.deserialize(key), None)
        else:
            table[STR.deserialize(key)] = JSON.deserialize(value)
    return table


def _log_findings(path: Path) -> tuple[Counter[str], int]:
    """(level:event counts of warnings and errors, lines that are not JSON log records)."""
    findings: Counter[str] = Counter()
    other = 0
    with suppress(OSError), path.open("rb") as log:
        for line in log:
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                other += 1
                if b"Traceback" in line:
                    findings["error:traceback"] += 1
                continue
            level = record.get("level", "")
            if level in ("warning", "error", "critical"):
                findings[f"{level}:{record.get('event')}"] += 1
    return findings, other


_ROW = "{:<10} {:>9} {:>7} {:>8} {:>7} {:>8} {:>10}  {}"


def _summarise(
    settings: Settings,
    accts: list[sample_data.Account],
    stream: list[tuple[str, dict[str, Any]]],
    produced_in: float,
    drained_in: float | None,
    workers: list[DemoWorker],
) -> int:
    profiles = dict(sample_data.profiles(accts))
    expected_totals, expected_alerts = sample_data.reference(profiles, stream)
    alert_records = [orjson.loads(v) for _, v in read_topic(settings, app.ALERTS) if v]
    got_alerts = {str(a.get("payment_id")): a for a in alert_records}
    totals_topic = app.build().build().store(app.TOTALS)[1].changelog(settings.application_id)
    got_totals = _fold_changelog(settings, totals_topic)

    print("\n=== demo summary ===")
    print(f"payments produced:  {len(stream)} in {produced_in:.0f}s")
    if drained_in is None:
        print(f"processing:         NOT caught up {DRAIN_TIMEOUT:.0f}s after the last payment")
    else:
        print(f"processing:         caught up {drained_in:.1f}s after the last payment")
    print(_ROW.format("", "processed", "active", "standby", "commits", "restored", "rebalances",
                      "log warnings/errors"))  # fmt: skip
    for w in workers:
        m = w.last
        findings, other = _log_findings(w.log_path)
        notes = ", ".join(f"{k} x{n}" for k, n in sorted(findings.items())) or "none"
        if other:
            notes += f" (+{other} non-JSON lines)"
        print(
            _ROW.format(
                w.name,
                m.total("worker_processed_records_total"),
                m.total("worker_tasks", kind="active"),
                m.total("worker_tasks", kind="standby"),
                m.total("worker_commits_total"),
                m.total("worker_restored_records_total"),
                m.total("worker_rebalances_total"),
                notes,
            )
        )
    processed = sum(w.last.total("worker_processed_records_total") for w in workers)
    print(f"{'all':<10} {processed:>9}  (input records: payments and account-profile records)")

    missing = sorted(set(expected_alerts) - set(got_alerts))
    extra = sorted(set(got_alerts) - set(expected_alerts))
    differing = sorted(
        k for k in set(expected_alerts) & set(got_alerts) if expected_alerts[k] != got_alerts[k]
    )
    alerts_ok = not (missing or extra or differing)
    duplicates = len(alert_records) - len(got_alerts)
    print(f"alerts expected:    {len(expected_alerts)} (plain-Python reference, same input)")
    print(
        f"alerts produced:    {len(got_alerts)} distinct, {duplicates} duplicate records -> "
        + _verdict(alerts_ok, missing=missing, extra=extra, different=differing)
    )

    keys = set(expected_totals) | set(got_totals)
    wrong = sorted(k for k in keys if expected_totals.get(k) != got_totals.get(k))
    totals_ok = not wrong
    counted = sum(int(t.get("count", 0)) for t in got_totals.values())
    print(
        f"account totals:     {counted} payments over {len(got_totals)} accounts "
        f"(reference: {len(stream)} over {len(expected_totals)}) -> "
        + _verdict(totals_ok, wrong=wrong)
    )

    codes = [w.returncode for w in workers]
    stopped_ok = all(c == 0 for c in codes)
    print(f"worker exit codes:  {', '.join(str(c) for c in codes)}")
    matches = alerts_ok and totals_ok
    print(f"match with reference: {'yes' if matches else 'NO'}")
    return 0 if matches and stopped_ok else 1


def _get(url: str) -> tuple[int, str, str]:
    """(status, Location header, body) of one GET, redirects not followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=5)
    try:
        connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        response = connection.getresponse()
        return response.status, response.getheader("Location") or "", response.read().decode()
    finally:
        connection.close()


def where_to_look(port: int | None, key: str) -> list[str]:
    """Where an operator looks: the metrics URL and an interactive query with its answer.

    The query runs while the workers are still up; a 307 (the key's task is active on the
    other worker) is shown and followed once.
    """
    if port is None:
        return []
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/stores/{app.TOTALS}/keys/{key}"
    lines = [
        "",
        "where to look while workers run (this run's ports; every run picks new ones):",
        f"  metrics:  {base}/metrics   (also /healthz, /readyz, /tasks)",
        f"  query:    curl -sL {url}",
    ]
    try:
        status, location, body = _get(url)
        if status == 307:
            lines.append(f"            -> 307, the key's task is active at {location}")
            status, _, body = _get(location)
        lines.append(f"            -> {status} {body}  (asked before the workers stopped)")
    except OSError as exc:
        lines.append(f"            -> no answer ({exc})")
    lines.append("  more:     docs/operations.md (endpoints, state tools, deployment)")
    return lines


def _verdict(ok: bool, **problems: list[str]) -> str:
    if ok:
        return "match"
    parts = [
        f"{len(keys)} {what} (e.g. {', '.join(keys[:3])})"
        for what, keys in problems.items()
        if keys
    ]
    return "MISMATCH: " + "; ".join(parts)
