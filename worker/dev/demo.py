"""``make demo``: a local broker, sample data, workers that crash and join under a minute of
payments.

Everything runs on loopback. The broker listens on a port picked here; each worker
binds an HTTP port the OS picks (``http.port=0``) and reports it in its log, so the demo
needs no particular port to be free. Every process the demo starts is stopped by its
PID: on success, on failure, on Ctrl-C, SIGTERM or SIGHUP, and (on Linux) even if the
demo itself is killed, through the parent-death signal set before each child starts.

Two workers start; while payments flow, one is killed with SIGKILL and started again at
once over its state dir, and later a third worker joins. Afterwards the summary shows
what that cost each task: its longest stall (the longest silence, to a reader following
it, of its partition of the
``account-totals`` changelog, which every commit writes for every account the task
updated) and the changelog records restored (a restart over local state restores only
the tail written since its last commit, not the whole changelog).

When the traffic has been processed the workers are stopped cleanly (a final commit),
and the output topics are checked against a plain-Python reference computation of the
same input: every alert, every account's running totals (the ``account-totals``
changelog), the quiet accounts, the last hour's payments and the busy accounts (more
than ``windowed.BUSY_PAYMENTS`` payments in a 10-minute window, emitted when it closes),
and the DSL app's counts per merchant and 10-minute window (``worker.examples.merchants``,
one more worker under its own application id, beside the others from start to end;
``demo_merchants.py``). The workers run ``exactly_once_v2``, so the kill leaves no double counts.
The exit code is 0 only when both match and every worker's last run exited 0.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from worker.config import Settings, load
from worker.dev import enrichment, history, sample_data
from worker.dev.changelog_watch import ChangelogWatch
from worker.dev.demo_merchants import wait_counted
from worker.dev.demo_processes import (
    DemoBroker,
    DemoFailed,
    DemoKafka,
    DemoWorker,
    Interrupted,
    StopSignals,
    start_broker,
    stop_workers,
)
from worker.dev.demo_summary import get, summarise, where_to_look
from worker.dev.demo_traffic import produce_for, wait_drained
from worker.dev.enrichment import ProfileChange, ProfileHistory
from worker.errors import WorkerError
from worker.examples import merchants
from worker.examples import payments as app
from worker.kafka.loader import produce_records
from worker.partitioner import partition_for
from worker.serde import JSON, STR

ACCOUNTS = 200
PARTITIONS = 4
WORKERS = 2  # at the start; a third joins later
KILL_AT = 0.25  # share of the traffic's duration: SIGKILL worker-1, start it again
JOIN_AT = 0.55  # share of the traffic's duration: start worker-3
EVENT_SPEEDUP = 240  # event time runs this much faster than the wall clock: 4 min a second
QUIET_ACCOUNTS = 10  # accounts that stop paying, one every 2 s of traffic from 2 s on
BURSTING_ACCOUNTS = 3  # accounts paying in a 2 s burst, one every 15 s of traffic from 5 s on
CHANGING_ACCOUNTS = 5  # accounts whose profile changes during the traffic (a second version)
READY_TIMEOUT = 60.0  # workers joined, tasks restored, processing
DRAIN_TIMEOUT = 120.0  # after the last payment: everything processed
STOP_GRACE = 30.0  # SIGTERM -> exit, before SIGKILL
MERCHANTS_APP = "worker.examples.merchants:build"  # the DSL app, beside the payments app
_MARKER = ".worker-demo"  # a --workdir is emptied only if it has this (or is empty)


def load_sample_data(
    settings: Settings,
    accounts: int,
    payments: int,
    partitions: int,
    *,
    profiles: ProfileHistory | None = None,
) -> dict[str, int]:
    """Create the example topics, load the profiles, the merchant reference data and
    ``payments`` payments.

    ``profiles``: the profiles and the times they are valid from (each record's
    timestamp); absent, one per account stamped by the producer's clock. A payment joins
    the profile valid at its time, so profiles must be valid from before the payments
    (payments with older event times need older profiles).
    """
    sample_data.create_example_topics(settings, partitions)
    accts = sample_data.accounts(accounts)
    if profiles is None:
        records, stamps = list(sample_data.profiles(accts)), None
    else:
        records, stamps = profiles.records()
    loaded_profiles = produce_records(settings, app.PROFILES, records, STR, JSON, timestamps=stamps)
    reference = enrichment.merchant_reference()
    loaded_merchants = produce_records(settings, app.MERCHANTS, reference.items(), STR, JSON)
    loaded_payments = 0
    if payments:
        loaded_payments = produce_records(
            settings, app.PAYMENTS, sample_data.payments(accts, payments), STR, JSON
        )
    return {"profiles": loaded_profiles, "merchants": loaded_merchants, "payments": loaded_payments}


def changing_accounts(accts: list[sample_data.Account], payments: int) -> dict[str, ProfileChange]:
    """``CHANGING_ACCOUNTS`` accounts whose spending changes, spread over the middle of the
    traffic: each has a second profile, valid from then, loaded with the first before the
    traffic starts, so every payment before the change must still join the first."""
    every = payments // (CHANGING_ACCOUNTS + 1)
    return enrichment.changing(accts, CHANGING_ACCOUNTS, every, every)


def event_clock(duration: float, rate: int) -> sample_data.EventClock:
    """The payments' event times: ``EVENT_SPEEDUP`` times the wall clock's pace, ending
    about when the traffic starts, so none is in the future (a broker may refuse those)."""
    step = EVENT_SPEEDUP * 1000 // rate
    span = int(duration * rate) * step
    return sample_data.EventClock(int(time.time() * 1000) - span, step)


def run_demo(duration: float, rate: int, workdir: Path, kafka: bool = False) -> int:
    """Run the whole demo; 0 when the output matches the reference and the workers stopped cleanly.
    ``kafka``: on Apache Kafka instead of the embedded broker."""
    workdir = workdir.resolve()
    ours = any((workdir / name).exists() for name in (_MARKER, "broker.log"))
    if workdir.exists() and any(workdir.iterdir()) and not ours:
        print(f"demo: {workdir} is not empty and not a demo directory; not touching it")
        return 2
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / _MARKER).write_text("created by `worker dev demo`; emptied by the next run\n")
    brokers: list[DemoBroker | DemoKafka] = []
    workers: list[DemoWorker] = []
    others: list[DemoWorker] = []  # the DSL app's worker
    code = 1
    with StopSignals() as signals:
        try:
            broker = start_broker(workdir, brokers, kafka=kafka)
            code = _run(broker, workers, others, duration, rate, workdir, signals)
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
            stop_workers([*workers, *others], STOP_GRACE, signals.hurried)
            for broker in brokers:
                broker.stop(timeout=0.5 if signals.hurry else 10.0)
            if code != 0 and workers:
                print(
                    "stopped "
                    + ", ".join(f"{w.name} (exit {w.returncode})" for w in workers if w.pid)
                    + " and the broker",
                    flush=True,
                )
    print(f"logs and state: {workdir}", flush=True)
    return code


def _run(
    broker: DemoBroker | DemoKafka,
    workers: list[DemoWorker],
    others: list[DemoWorker],
    duration: float,
    rate: int,
    workdir: Path,
    signals: StopSignals,
) -> int:
    bootstrap = broker.bootstrap
    settings = load(None, {"bootstrap.servers": bootstrap}, environ={}).settings
    print(
        f"broker on {bootstrap} (pid {broker.pid}); loading {ACCOUNTS} account profiles", flush=True
    )
    accts = sample_data.accounts(ACCOUNTS)
    clock = event_clock(duration, rate)
    changes = changing_accounts(accts, int(duration * rate))
    profiles = ProfileHistory.of(accts, clock.base_ms - 1, changes, clock.at)
    load_sample_data(settings, ACCOUNTS, 0, PARTITIONS, profiles=profiles)
    # The historical payments a Spark job turns into these profiles (docs/spark.md):
    # `worker spark load account-profiles --input <workdir>/history` recomputes them.
    written = history.write_history(workdir / "history", ACCOUNTS, 50)
    print(f"wrote {written.rows} historical payments to {written.out} for the Spark loader")

    for i in range(1, WORKERS + 1):
        worker = DemoWorker(f"worker-{i}", bootstrap, workdir)
        workers.append(worker)  # tracked before it exists: clean-up covers a failed start
        worker.start()
    dsl = DemoWorker(
        "merchants",
        bootstrap,
        workdir,
        app=MERCHANTS_APP,
        application_id=merchants.APPLICATION_ID,
    )
    others.append(dsl)
    dsl.start()
    print(
        "started "
        + ", ".join(f"{w.name} (pid {w.pid})" for w in workers)
        + f"; and {dsl.name} (pid {dsl.pid}), the DSL app (worker.examples.merchants)",
        flush=True,
    )
    started = time.monotonic()
    _wait_ready([*workers, dsl], READY_TIMEOUT)
    _wait_profiles_stored(workers[0], profiles, READY_TIMEOUT)
    print(f"workers ready in {time.monotonic() - started:.1f}s; "
          f"producing {rate} payments/s for {duration:.0f}s", flush=True)  # fmt: skip

    def crash(_at: float) -> DemoWorker:
        victim = workers[0]
        victim.scrape()  # its count so far, carried into the next run's
        old = victim.pid
        victim.kill()
        victim.start()
        print(
            f"         killed pid {old}; started again over its state dir as pid {victim.pid}",
            flush=True,
        )
        return victim

    def join(_at: float) -> DemoWorker:
        newcomer = DemoWorker(f"worker-{len(workers) + 1}", bootstrap, workdir)
        workers.append(newcomer)
        newcomer.start()
        print(f"         started pid {newcomer.pid}", flush=True)
        return newcomer

    schedule: list[tuple[float, str, Callable[[float], DemoWorker]]] = [
        (duration * KILL_AT, f"kill -9 {workers[0].name}", crash),
        (duration * JOIN_AT, f"worker-{WORKERS + 1} joins", join),
    ]
    totals_topic = app.changelog(settings.application_id, app.TOTALS)
    watch = ChangelogWatch(settings, totals_topic, PARTITIONS).start()
    producing = time.monotonic()
    quiet = sample_data.going_quiet(accts, QUIET_ACCOUNTS, 2 * rate, 2 * rate)
    bursts = sample_data.bursting(accts, BURSTING_ACCOUNTS, 5 * rate, 15 * rate, 2 * rate)
    traffic = produce_for(
        settings, accts, duration, rate, workers, schedule, clock, quiet, bursts, changes
    )
    produced_in = time.monotonic() - producing
    drained_in = wait_drained(workers, traffic, DRAIN_TIMEOUT)
    counted = wait_counted(settings, traffic, DRAIN_TIMEOUT)
    watch.stop()
    for w in workers:
        w.scrape()  # the final numbers, before the workers go away
    active = next(a.id for a in accts if a.id not in quiet)  # one still paying
    where = where_to_look(workers[0].port, active, PARTITIONS)  # a live query, before the stop
    signals.cleaning = True  # from here on a Ctrl-C only hurries the stop
    stop_workers([*workers, dsl], STOP_GRACE, signals.hurried)  # each commits its last records
    code = summarise(
        settings,
        accts,
        traffic,
        produced_in,
        drained_in,
        workers,
        watch.arrivals,
        drain_timeout=DRAIN_TIMEOUT,
        partitions=PARTITIONS,
        profiles=profiles,
        dsl=(dsl, counted),
    )
    print("\n".join(where), flush=True)
    return code


def _wait_profiles_stored(worker: DemoWorker, profiles: ProfileHistory, timeout: float) -> None:
    """Wait until the joins' versioned table holds every profile, committed: the last
    profile record of each partition is what its key reads (over HTTP, from the task's
    owner). Kept from when the worker read a task's partitions in fetch order: a payment
    that reached the join before the profile records older than it, as when its task
    moved on Kafka while the first payments flowed, found no profile. The joins' task
    now reads them in timestamp order, waiting for a profiles partition with records
    not fetched yet (docs/joins.md, "Partitions in timestamp order")."""
    last: dict[int, tuple[str, dict[str, Any]]] = {}
    for key, value in profiles.records()[0]:
        last[partition_for(key.encode(), PARTITIONS)] = (key, value)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(_stored(worker, key) == value for key, value in last.values()):
            return
        time.sleep(0.2)
    raise DemoFailed(f"the workers did not hold the profiles within {timeout:.0f}s")


def _stored(worker: DemoWorker, key: str) -> Any:
    """``account-profiles``'s committed value of ``key``, from the task's owner."""
    url = f"http://127.0.0.1:{worker.port}/stores/{app.PROFILES}/keys/{key}"
    try:
        status, location, body = get(url)
        if status == 307:
            status, _, body = get(location)
    except OSError:
        return None
    return orjson.loads(body).get("value") if status == 200 else None


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
