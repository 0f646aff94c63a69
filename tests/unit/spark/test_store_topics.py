"""Which topic the Spark data source reads for a store of an app (``option("store")``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.config import load
from worker.examples import payments as app

pytest.importorskip("pyspark", reason="the spark extra is not installed (make install has it)")

from worker.spark.datasource import _store_spec, record_time  # noqa: E402

SETTINGS = load(None, {"application.id": "payments-app"}, environ={}).settings


def test_a_store_is_read_from_its_changelog() -> None:
    topic, _, _, versioned = _store_spec({"store": app.TOTALS}, SETTINGS)

    assert topic == "payments-app-account-totals-changelog" and not versioned


def test_the_example_apps_versioned_profiles_are_read_from_their_topic() -> None:
    """Their changelog holds versions in the store's own layout, which no serde reads."""
    topic, _, value_serde, versioned = _store_spec({"store": app.PROFILES}, SETTINGS)

    assert topic == app.PROFILES and versioned  # its latest version: the latest by time
    assert value_serde.deserialize(b'{"mean": 1.0}') == {"mean": 1.0}


def test_a_record_time_becomes_the_utc_instant_spark_stores_and_none_without_one() -> None:
    assert record_time(1_714_564_800_250) == datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    assert record_time(-1) is None
