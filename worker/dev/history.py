"""Historical payments for the example app: the input of the ``account-profiles`` Spark job.

Deterministic (seeded) payments of the accounts ``worker.dev.sample_data.accounts`` makes,
each drawn around its account's mean and spread, written as CSV or JSON lines shards
with pure Python, or as Parquet through Spark (the ``spark`` extra). The plain-Python
:func:`reference_profiles` is what the job must compute from them.

Columns: ``id`` (``h-<n>``), ``account``, ``amount_cents`` (>= 1), ``ts`` (epoch ms,
increasing).
"""

from __future__ import annotations

import csv
import random
import statistics
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from worker.dev import sample_data

COLUMNS = ("id", "account", "amount_cents", "ts")
FORMATS = ("csv", "json", "parquet")
START_MS = 1_700_000_000_000  # the first payment's timestamp
STEP_MS = 1_000
# What a previous run may have left in the output directory, and nothing else is removed.
_OURS = ("history-*.csv", "history-*.json", "part-*", "_SUCCESS", ".*.crc")

Payment = tuple[str, str, int, int]  # id, account, amount_cents, ts


class HistoryError(ValueError):
    """The output directory holds files this generator did not write."""


@dataclass(frozen=True, slots=True)
class History:
    out: Path
    format: str
    rows: int
    accounts: int
    files: int


def payments(
    accts: list[sample_data.Account], per_account: int, seed: int = 23
) -> Iterator[Payment]:
    """``per_account`` payments of every account, interleaved in time."""
    rng = random.Random(seed)
    n = 0
    for _round in range(per_account):
        for acct in accts:
            amount = max(1, int(rng.gauss(acct.mean, acct.std)))
            yield f"h-{n:09d}", acct.id, amount, START_MS + n * STEP_MS
            n += 1


def reference_profiles(rows: Iterable[Payment]) -> dict[str, dict[str, Any]]:
    """Plain-Python ``{"mean", "std" (population), "n"}`` per account: the job's expected output."""
    amounts: dict[str, list[int]] = {}
    for _id, account, amount, _ts in rows:
        amounts.setdefault(account, []).append(amount)
    return {
        account: {"mean": statistics.fmean(xs), "std": statistics.pstdev(xs), "n": len(xs)}
        for account, xs in amounts.items()
    }


def write_history(
    out: Path,
    accounts: int,
    per_account: int,
    fmt: str = "csv",
    files: int = 4,
    seed: int = 23,
) -> History:
    """Write the history of ``accounts`` accounts into ``out`` (created; earlier output replaced).

    Raises HistoryError if ``out`` holds files this generator did not write, ValueError
    for a bad format or count, and SparkUnavailable (Parquet only) without the extra.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if accounts < 1 or per_account < 1 or files < 1:
        raise ValueError("accounts, per_account and files must be at least 1")
    _clear(out)
    rows = payments(sample_data.accounts(accounts), per_account, seed)
    if fmt == "parquet":
        with tempfile.TemporaryDirectory(prefix="history-csv-") as scratch:
            written = _write_text(Path(scratch), rows, "csv", files)
            from worker.spark.files import csv_to_parquet
            from worker.spark.profiles import HISTORY_SCHEMA
            from worker.spark.session import session

            csv_to_parquet(session(), [scratch], HISTORY_SCHEMA, str(out))
    else:
        written = _write_text(out, rows, fmt, files)
    return History(out, fmt, written, accounts, files)


def _clear(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ours = {p for pattern in _OURS for p in out.glob(pattern)}
    others = [p.name for p in out.iterdir() if p not in ours]
    if others:
        raise HistoryError(
            f"{out} holds other files ({', '.join(sorted(others)[:3])}): use another"
        )
    for path in ours:
        path.unlink()


def _write_text(out: Path, rows: Iterable[Payment], fmt: str, files: int) -> int:
    """Round-robin ``rows`` over ``files`` shards; returns the number of rows written."""
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with ExitStack() as stack:
        handles = [
            stack.enter_context(open(out / f"history-{i:05d}.{fmt}", "w", newline=""))
            for i in range(files)
        ]
        writers = [csv.writer(h) for h in handles]
        if fmt == "csv":
            for writer in writers:
                writer.writerow(COLUMNS)
        for row in rows:
            if fmt == "csv":
                writers[count % files].writerow(row)
            else:
                line = orjson.dumps(dict(zip(COLUMNS, row, strict=True)))
                handles[count % files].write(line.decode() + "\n")
            count += 1
    return count
