"""Timestamp extraction: the default, a user extractor, the checks, the setting."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from worker.config import load
from worker.errors import ConfigError
from worker.processing.timestamps import (
    InvalidTimestamp,
    check,
    extract,
    record_time,
    resolve,
)


class FakeRecord:
    def __init__(self, timestamp: int, value: bytes | None = None) -> None:
        self._timestamp = timestamp
        self._value = value

    def topic(self) -> str | None:
        return "in"

    def partition(self) -> int | None:
        return 0

    def offset(self) -> int | None:
        return 7

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("event-time", b"5000")]

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return self._value


@pytest.fixture
def extractors() -> Iterator[types.ModuleType]:
    module = types.ModuleType("ts_extractors_for_tests")

    def from_header(record: FakeRecord, stream_time_ms: int) -> int:
        return int(dict(record.headers() or [])["event-time"])

    def stream_time_if_missing(record: FakeRecord, stream_time_ms: int) -> int:
        ts = record.timestamp()[1]
        return ts if ts >= 0 else stream_time_ms

    module.from_header = from_header  # type: ignore[attr-defined]
    module.stream_time_if_missing = stream_time_if_missing  # type: ignore[attr-defined]
    module.not_callable = 42  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_the_default_is_the_kafka_record_timestamp() -> None:
    assert resolve("record") is record_time
    assert extract(record_time, FakeRecord(1_700_000_000_000), -1) == 1_700_000_000_000


def test_a_user_extractor_gets_the_record_and_the_stream_time(
    extractors: types.ModuleType,
) -> None:
    from_header = resolve("ts_extractors_for_tests:from_header")
    fallback = resolve("ts_extractors_for_tests:stream_time_if_missing")

    assert extract(from_header, FakeRecord(1), 0) == 5000
    assert extract(fallback, FakeRecord(-1), 4_200) == 4_200


@pytest.mark.parametrize(
    "spec",
    [
        "ts_extractors_for_tests",
        "ts_extractors_for_tests:missing",
        "no_such_module_for_ts:extract",
        "ts_extractors_for_tests:not_callable",
    ],
)
def test_an_extractor_that_does_not_load_is_a_config_error_naming_the_key(
    extractors: types.ModuleType, spec: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(spec)

    assert caught.value.key == "timestamp.extractor"


@pytest.mark.parametrize("bad", [-1, -5_000, 1.5e12, "1700000000000", None, True])
def test_a_timestamp_that_is_not_a_non_negative_int_is_invalid(bad: object) -> None:
    with pytest.raises(InvalidTimestamp) as caught:
        check(bad)

    assert caught.value.timestamp == bad


def test_a_record_without_a_timestamp_is_invalid_under_the_default() -> None:
    with pytest.raises(InvalidTimestamp, match="-1"):
        extract(record_time, FakeRecord(-1), 100)


def test_an_extractor_that_raises_makes_the_timestamp_invalid_with_the_cause() -> None:
    def broken(record: FakeRecord, stream_time_ms: int) -> int:
        raise KeyError("event-time")

    with pytest.raises(InvalidTimestamp, match="KeyError") as caught:
        extract(broken, FakeRecord(1), 0)  # type: ignore[arg-type]

    assert isinstance(caught.value.__cause__, KeyError)


def test_the_setting_defaults_to_record_time_and_refuses_a_malformed_name() -> None:
    assert load(environ={}).settings.timestamp_extractor == "record"
    assert (
        load(
            overrides={"timestamp.extractor": "pkg.mod:fn"}, environ={}
        ).settings.timestamp_extractor
        == "pkg.mod:fn"
    )
    for bad in ("wallclock", "pkg.mod", ":fn", "pkg mod:fn"):
        with pytest.raises(ConfigError) as caught:
            load(overrides={"timestamp.extractor": bad}, environ={})
        assert caught.value.key == "timestamp.extractor"
