"""The fakes in tests/fakes keep the interfaces of the adapters they stand in for.

A fake that drifts from its adapter would let component tests pass against an API the
worker no longer has; these checks fail first.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.fakes import (
    DictStore,
    FakeCollector,
    FakeDataConsumer,
    FakeGroupOffsets,
    FakeMessage,
    FakeRestoreConsumer,
)
from worker.kafka.collector import RecordCollector
from worker.kafka.consumers import DataConsumer, FetchedBatch, RestoreConsumer
from worker.processing.context import RecordSink
from worker.state.contracts import RawKeyValueStore
from worker.tasks.commit_protocols import GroupOffsets

PAIRS = [
    (RecordCollector, FakeCollector),
    (DataConsumer, FakeDataConsumer),
    (RestoreConsumer, FakeRestoreConsumer),
    (GroupOffsets, FakeGroupOffsets),
    (RawKeyValueStore, DictStore),
    (RecordSink, FakeCollector),
]


def public_members(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def shape(member: Any) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults (annotations differ only in spelling)."""
    if isinstance(member, property):
        return [("<property>", None, None)]
    return [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=lambda c: c.__name__)
def test_a_fake_has_every_public_method_of_its_adapter_with_the_same_parameters(
    real: type, fake: type
) -> None:
    fake_members = public_members(fake)
    for name, member in public_members(real).items():
        assert name in fake_members, f"{fake.__name__} lacks {name}"
        assert shape(fake_members[name]) == shape(member), f"{fake.__name__}.{name}"


def test_the_fake_collector_exposes_acked_offsets_like_the_real_one() -> None:
    collector = FakeCollector()

    collector.send_changelog("log", 0, [(b"k", b"v")])
    assert collector.acked == {}
    collector.flush(timeout=1.0)

    assert collector.acked == {("log", 0): 0}


def test_the_fake_restore_consumer_returns_fetched_batches() -> None:
    consumer = FakeRestoreConsumer()
    consumer.append("log", 0, b"k", b"v")
    consumer.add({("log", 0): None})

    batch = consumer.fetch(10, 0.0)

    assert isinstance(batch, FetchedBatch)
    assert batch == FetchedBatch([FakeMessage("log", 0, 0, b"k", b"v")], {("log", 0): 1})
    assert consumer.fetch(10, 0.0) == FetchedBatch([], {})
