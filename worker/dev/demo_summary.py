"""What ``make demo`` prints at the end: per worker and per task what the run cost, and
the verdict of the output topics against a plain-Python reference computation of the same
input; and, while the workers still run, where an operator would look.
"""

from __future__ import annotations

import http.client
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson

from worker.config import Settings
from worker.dev import demo_enrichment, demo_merchants, enrichment, sample_data
from worker.dev.demo_processes import WORKER_SETTINGS, DemoWorker
from worker.dev.demo_traffic import Traffic
from worker.dev.enrichment import ProfileHistory
from worker.dev.processes import START_LINE
from worker.dev.stalls import max_gap
from worker.examples import payments as app
from worker.examples import windowed
from worker.kafka.loader import read_topic
from worker.partitioner import partition_for
from worker.serde import JSON, STR

# A TTL store's changelog values start with the key's expiry, 8 bytes (the stored shape of
# worker/state/ttl.py; the dev commands read topics, never the state package).
_EXPIRY_BYTES = 8


def _fold_changelog(settings: Settings, topic: str, *, ttl: bool = False) -> dict[str, Any]:
    """The latest value per key of a changelog (a TTL store's: its values, without the
    expiry in front)."""
    table: dict[str, Any] = {}
    for key, value in read_topic(settings, topic):
        if key is None:
            continue
        if value is None:
            table.pop(STR.deserialize(key), None)
        else:
            table[STR.deserialize(key)] = JSON.deserialize(value[_EXPIRY_BYTES:] if ttl else value)
    return table


def _log_findings(path: Path) -> tuple[Counter[str], int]:
    """(level:event counts of warnings and errors, lines that are not JSON log records)."""
    findings: Counter[str] = Counter()
    other = 0
    with suppress(OSError), path.open("rb") as log:
        for line in log:
            if line.startswith(START_LINE.encode()):
                continue  # the command of a run, written by WorkerProcess
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


def summarise(
    settings: Settings,
    accts: list[sample_data.Account],
    traffic: Traffic,
    produced_in: float,
    drained_in: float | None,
    workers: list[DemoWorker],
    arrivals: dict[int, list[int]],
    *,
    drain_timeout: float,
    partitions: int,
    profiles: ProfileHistory,
    dsl: tuple[DemoWorker, float | None] | None = None,
) -> int:
    """Print the summary; 0 when every output matches the reference and every worker
    (``dsl``: the DSL app's, with the seconds its counts took to complete) stopped cleanly.
    ``profiles``: the ``account-profiles`` records loaded, with the times they are valid from."""
    stream = traffic.stream
    merchant_table = enrichment.merchant_reference()
    expected = sample_data.reference(profiles, stream, traffic.clock, partitions, merchant_table)
    expected_totals, expected_alerts = expected.totals, expected.alerts
    alert_records = [orjson.loads(v) for _, v in read_topic(settings, app.ALERTS) if v]
    got_alerts = {str(a.get("payment_id")): a for a in alert_records}
    totals_topic = app.changelog(settings.application_id, app.TOTALS)
    got_totals = _fold_changelog(settings, totals_topic)

    print("\n=== demo summary ===")
    print(f"payments produced:  {len(stream)} in {produced_in:.0f}s")
    if drained_in is None:
        print(f"processing:         NOT caught up {drain_timeout:.0f}s after the last payment")
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
                w.earlier_processed + m.total("worker_processed_records_total"),
                m.total("worker_tasks", kind="active"),
                m.total("worker_tasks", kind="standby"),
                m.total("worker_commits_total", result="committed"),
                m.total("worker_restored_records_total"),
                m.total("worker_rebalances_total"),
                notes,
            )
        )
    processed = sum(
        w.earlier_processed + w.last.total("worker_processed_records_total") for w in workers
    )
    print(
        f"{'all':<10} {processed:>9}  (input records: payments, twice (their scoring, "
        "then their joins, through a repartition topic) and account-profile records;"
        " a restarted worker's row adds up its runs, the other columns are its last run's)"
    )
    _print_tasks(traffic, arrivals, partitions)

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

    enriched_ok = _check_enrichment(settings, expected, profiles)
    time_ok = _check_time_outputs(settings, expected)
    busy_ok = _check_busy_accounts(settings, expected)
    merchants_ok = True
    if dsl is not None:
        wrong, text = demo_merchants.check(settings, expected)
        merchants_ok = not wrong
        print(f"merchant counts:    {text} (DSL app, re-keyed by merchant, 10-minute windows) -> "
              + _verdict(merchants_ok, wrong=wrong))  # fmt: skip

    codes = [w.returncode for w in workers] + ([dsl[0].returncode] if dsl else [])
    stopped_ok = all(c == 0 for c in codes)
    killed = {h.worker.name for h in traffic.happenings if h.what.startswith("kill")}
    print(
        "worker exit codes:  "
        + ", ".join(
            f"{w.name} {w.returncode}"
            + (" (its run before was the one killed)" if w.name in killed else "")
            for w in workers
        )
        + (f", {dsl[0].name} {dsl[0].returncode}" if dsl else "")
    )
    matches = alerts_ok and totals_ok and enriched_ok and time_ok and busy_ok and merchants_ok
    print(f"match with reference: {'yes' if matches else 'NO'}")
    return 0 if matches and stopped_ok else 1


def _check_enrichment(
    settings: Settings, expected: sample_data.Reference, profiles: ProfileHistory
) -> bool:
    """Print and check ``enriched-payments``: the two joins (``demo_enrichment``)."""
    got, records = demo_enrichment.enriched_payments(settings)
    problems = demo_enrichment.check(expected.enriched, got)
    print(
        f"enriched payments:  {demo_enrichment.describe(expected.enriched, got, profiles)}, "
        f"{records - len(got)} duplicate records; profile as of each payment's time, "
        "merchant reference data -> " + _verdict(not problems, **problems)
    )
    return not problems


def _check_time_outputs(settings: Settings, expected: sample_data.Reference) -> bool:
    """Print and check the outputs that use time: the quiet alerts (a stream-time
    punctuator) and the last hour's payments (a TTL store), against the reference."""
    quiet_ok = _check_alerts(
        "quiet accounts:     ", settings, app.QUIET, sample_data.quiet_id, expected.quiet
    )
    recent_topic = app.changelog(settings.application_id, app.RECENT)
    table = _fold_changelog(settings, recent_topic, ttl=True)
    lost = sorted(k for k, v in expected.recent.items() if table.get(k) != v)
    wrong = sorted(k for k, v in table.items() if expected.written.get(k) != v)
    recent_ok = not (lost or wrong)
    swept = len(expected.written) - len(table)
    print(
        f"last hour:          {len(expected.recent)} payments younger than an hour of their "
        f"task's stream time in {app.RECENT}; {swept} of the "
        f"{len(expected.written) - len(expected.recent)} older ones expired and tombstoned "
        "so far -> " + _verdict(recent_ok, missing_or_different=lost, unexpected=wrong)
    )
    return quiet_ok and recent_ok


def _check_busy_accounts(settings: Settings, expected: sample_data.Reference) -> bool:
    """Print and check the busy-account alerts (an emit-final windowed aggregation)."""
    note = f" (10-minute windows over {windowed.BUSY_PAYMENTS} payments, emitted final)"
    return _check_alerts(
        "busy accounts:      ", settings, app.BUSY, windowed.alert_id, expected.busy, note
    )


def _check_alerts(
    what: str,
    settings: Settings,
    topic: str,
    identity: Callable[[dict[str, Any]], str],
    want: dict[str, dict[str, Any]],
    note: str = "",
) -> bool:
    """Print and check the alerts of ``topic`` by identity: each expected one, no other
    (a record repeated, as an aborted transaction's on the dev broker, counts once)."""
    records = [orjson.loads(v) for _, v in read_topic(settings, topic) if v]
    got = {identity(a): a for a in records}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differing = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    ok = not (missing or extra or differing)
    print(
        f"{what}{len(got)} alerts{note}, {len(records) - len(got)} duplicate records "
        f"(reference: {len(want)}) -> "
        + _verdict(ok, missing=missing, extra=extra, different=differing)
    )
    return ok


def _print_tasks(traffic: Traffic, arrivals: dict[int, list[int]], partitions: int) -> None:
    """Per task: its longest stall after each membership change and over the whole run, and
    what each (re)started worker restored for it against the changelog's length then."""
    print("membership changes (seconds after the first payment):")
    for h in traffic.happenings:
        after = (
            "not ready with active tasks"
            if h.active_after is None
            else (
                f"ready with active tasks after {h.active_after:.1f}s, "
                f"{sum(h.restored.values())} {app.TOTALS} records restored"
            )
        )
        print(f"  {h.at:5.1f}s  {h.what}: {after}")
    stamps = arrivals
    ends = [h.wall_ms for h in traffic.happenings[1:]] + [traffic.end_ms]
    windows = [(h.wall_ms, end) for h, end in zip(traffic.happenings, ends, strict=True)]
    headers = [f"stall after {h.what}" for h in traffic.happenings] + ["whole run"]
    headers += [f"restored by {h.worker.name} (of changelog)" for h in traffic.happenings]
    rows = []
    for p in range(partitions):
        task, times = f"0_{p}", stamps[p]
        cells = [
            f"{max_gap(times, a, b) / 1000:.1f}s {h.fate(task)}"
            for h, (a, b) in zip(traffic.happenings, windows, strict=True)
        ]
        cells.append(f"{max_gap(times, traffic.start_ms, traffic.end_ms) / 1000:.1f}s")
        for h in traffic.happenings:
            written = sum(1 for t in times if t <= h.active_wall_ms)
            got = h.restored.get(task, 0)
            cells.append(f"{got} of {written}" if task in h.active else "-")
        rows.append([task, *cells])
    widths = [max(len(c) for c in col) for col in zip(["task", *headers], *rows, strict=True)]
    print(
        f"per task: its longest stall (silence of its {app.TOTALS} changelog partition, to a reader "
        "following it, which "
        f"every commit writes, every {WORKER_SETTINGS['commit.interval.ms']} ms) after each "
        "change, until the next, and whether it stayed on its worker, moved, or was on the "
        "restarted one; the records a (re)started worker restored for it once active, of "
        "those the changelog held then"
    )
    for row in [["task", *headers], *rows]:
        print("  " + "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def get(url: str) -> tuple[int, str, str]:
    """(status, Location header, body) of one GET, redirects not followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=5)
    try:
        connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
        response = connection.getresponse()
        return response.status, response.getheader("Location") or "", response.read().decode()
    finally:
        connection.close()


def where_to_look(port: int | None, key: str, partitions: int) -> list[str]:
    """Where an operator looks: the metrics URL and three interactive queries with their
    answers: the account's totals, its payments of the last hour (a prefix query on its
    partition) and its payment counts per 10-minute window (a windowed store).

    The queries run while the workers are still up; a 307 (the task is active on another
    worker) is shown and followed once.
    """
    if port is None:
        return []
    base = f"http://127.0.0.1:{port}"
    partition = partition_for(key.encode(), partitions)
    prefix = urllib.parse.quote(f"{key}|")
    lines = [
        "",
        "where to look while workers run (this run's ports; every run picks new ones):",
        f"  metrics:  {base}/metrics   (also /healthz, /readyz, /tasks)",
    ]
    for url, show in (
        (f"{base}/stores/{app.TOTALS}/keys/{key}", lambda body: body),
        (
            f"{base}/stores/{app.RECENT}/prefix?prefix={prefix}&partition={partition}",
            lambda body: f"{len(orjson.loads(body)['items'])} payments in the last hour",
        ),
        (
            f"{base}/stores/{windowed.STORE}/windows?key={key}",
            lambda body: (
                f"{len(orjson.loads(body)['windows'])} 10-minute windows kept (their payment counts)"
            ),
        ),
    ):
        lines.append(f"  query:    curl -sL '{url}'")
        try:
            status, location, body = get(url)
            if status == 307:
                lines.append(f"            -> 307, the task is active at {location}")
                status, _, body = get(location)
            shown = show(body) if status == 200 else body
            lines.append(f"            -> {status} {shown}  (asked before the workers stopped)")
        except (OSError, ValueError) as exc:
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
