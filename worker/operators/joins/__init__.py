"""Joins as Processor API building blocks: stream-table, table-table (on the key or by
foreign key), stream-stream.

Each module owns one join kind: its processor functions, the stores it needs and a
``add_*`` helper that puts both into a :class:`~worker.processing.topology.Topology`.
The DSL (``KStream.join``...) compiles onto these; tests run them on real stores
against plain-Python reference models (tests/property/test_join_*.py).
"""
