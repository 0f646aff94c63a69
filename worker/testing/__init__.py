"""Testing a topology without a broker: :class:`TopologyTestDriver` (docs/dsl.md)."""

from worker.testing.driver import TopologyTestDriver
from worker.testing.topics import TestInputTopic, TestOutputTopic, TestRecord

__all__ = ["TestInputTopic", "TestOutputTopic", "TestRecord", "TopologyTestDriver"]
