"""The DSL: streams and tables compiled onto the Processor API (docs/dsl.md)."""

from worker.dsl.builder import StreamsBuilder
from worker.dsl.grouped import KGroupedStream, WindowedKStream
from worker.dsl.joins import GlobalKTable
from worker.dsl.plan import DslTopology, RepartitionTopic
from worker.dsl.stream import BranchedKStream, KStream
from worker.dsl.table import KGroupedTable, KTable
from worker.processing.join_windows import JoinWindows
from worker.processing.windows import hopping, session, sliding, tumbling

__all__ = [
    "BranchedKStream",
    "DslTopology",
    "GlobalKTable",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "RepartitionTopic",
    "StreamsBuilder",
    "WindowedKStream",
    "hopping",
    "session",
    "sliding",
    "tumbling",
]
