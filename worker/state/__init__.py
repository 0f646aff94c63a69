"""Local state: the state directory and its locks, RocksDB stores, and `.checkpoint` files."""
