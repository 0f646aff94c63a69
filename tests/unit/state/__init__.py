"""Unit tests of the state package: real files and real RocksDB on tmp_path."""
