"""Spec'd in-memory fakes of our own adapters, for fast component tests.

They mirror the public interface of the adapter they replace (checked by
``tests/unit/tasks/test_fakes.py``) and never touch a broker; RocksDB is used for real.
"""

from tests.fakes.kafka import (
    FakeCollector,
    FakeDataConsumer,
    FakeGroupOffsets,
    FakeMessage,
    FakeRestoreConsumer,
    SentRecord,
)
from tests.fakes.stores import DictStore

__all__ = [
    "DictStore",
    "FakeCollector",
    "FakeGroupOffsets",
    "FakeDataConsumer",
    "FakeMessage",
    "FakeRestoreConsumer",
    "SentRecord",
]
