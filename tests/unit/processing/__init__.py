"""Unit tests of the processing package: the topology API, the processor context, the task graph."""
