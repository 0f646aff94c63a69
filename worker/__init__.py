"""A stateful stream-processing worker: local RocksDB state backed by Kafka changelogs."""

__version__ = "0.1.0"
