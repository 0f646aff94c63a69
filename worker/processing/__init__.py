"""The user-facing topology API and the machinery that runs it inside a task."""

from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology

__all__ = ["ProcessorContext", "Topology"]
