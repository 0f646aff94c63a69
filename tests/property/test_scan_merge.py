"""Scans against a dict model, over a real RocksDB: the buffer/store merge must never show a
deleted key, hide a live one, or break the order (KAFKA-4283, KAFKA-18326)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import rocksdict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.state.scan import Scan, check_limit, key_range, prefix_range

# Short keys over few byte values (0xFF among them) so ranges, prefixes and collisions
# between the buffer and the store are common.
keys = st.binary(max_size=3).map(lambda b: bytes(x % 4 if x < 128 else 0xFF for x in b))
values = st.binary(min_size=1, max_size=4)
buffered_value = st.one_of(st.none(), values)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="scan-prop-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


_runs = itertools.count()


def model_view(stored: dict[bytes, bytes], buffer: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    view = dict(stored)
    for key, value in buffer.items():
        if value is None:
            view.pop(key, None)
        else:
            view[key] = value
    return view


def run(
    scratch: Path,
    stored: dict[bytes, bytes],
    buffer: dict[bytes, bytes | None],
    scan_args: dict[str, object],
) -> list[tuple[bytes, bytes]]:
    path = scratch / str(next(_runs))
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    try:
        for key, value in stored.items():
            db[key] = value
        with Scan(db.iter(), buffer, **scan_args) as found:  # type: ignore[arg-type]
            return list(found)
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.dictionaries(keys, values, max_size=12),
    buffer=st.dictionaries(keys, buffered_value, max_size=12),
    lo=st.one_of(st.none(), keys),
    hi=st.one_of(st.none(), keys),
    reverse=st.booleans(),
    limit=st.one_of(st.none(), st.integers(min_value=0, max_value=8)),
)
def test_a_range_scan_equals_the_model(
    scratch: Path,
    stored: dict[bytes, bytes],
    buffer: dict[bytes, bytes | None],
    lo: bytes | None,
    hi: bytes | None,
    reverse: bool,
    limit: int | None,
) -> None:
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    rng = key_range(lo, hi)
    expected = sorted(
        ((k, v) for k, v in model_view(stored, buffer).items() if k in rng), reverse=reverse
    )
    if check_limit(limit) is not None:
        expected = expected[:limit]

    found = run(scratch, stored, buffer, {"key_range": rng, "reverse": reverse, "limit": limit})

    assert found == expected


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.dictionaries(keys, values, max_size=12),
    buffer=st.dictionaries(keys, buffered_value, max_size=12),
    prefix=keys,
    reverse=st.booleans(),
)
def test_a_prefix_scan_equals_the_model(
    scratch: Path,
    stored: dict[bytes, bytes],
    buffer: dict[bytes, bytes | None],
    prefix: bytes,
    reverse: bool,
) -> None:
    expected = sorted(
        ((k, v) for k, v in model_view(stored, buffer).items() if k.startswith(prefix)),
        reverse=reverse,
    )

    found = run(scratch, stored, buffer, {"key_range": prefix_range(prefix), "reverse": reverse})

    assert found == expected
