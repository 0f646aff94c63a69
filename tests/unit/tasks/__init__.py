"""Component tests of tasks, the task manager and the changelog reader: real RocksDB, fake Kafka."""
