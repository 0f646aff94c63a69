"""Process-wide RocksDB resources: one block cache and one write buffer manager for all stores.

A worker may hold hundreds of stores open (actives, standbys, warmups, initial standbys).
With RocksDB's defaults every store would own an 8 MiB block cache and up to 2 x 64 MiB
of memtables, so memory would grow with the number of stores. Instead every store
opened with :meth:`RocksDBEnv.options` shares:

* one LRU block cache of ``memory_bytes``, which also holds index and filter blocks
  (``cache_index_and_filter_blocks``), so table metadata is bounded too;
* one ``WriteBufferManager`` limited to a quarter of the bound whose memtable memory is
  *charged to that same cache* (``new_write_buffer_manager_with_cache``): the cache evicts
  blocks to make room for memtables, and when all memtables together pass the limit
  RocksDB flushes the largest one early. Memtables + cached blocks stay near
  ``memory_bytes`` however many stores are open;
* an eighth of the bound, taken from the block cache, for the stores' own read caches
  (``Store.get`` keeps recently read committed values as Python bytes: a RocksDB point
  read through rocksdict costs many dict lookups, and processors read the same keys over
  and over). Each open store may hold ``read_cache_share`` bytes of it.

What the write buffer manager does not do with many stores: it flushes only the database
being written, and a flushed memtable stays counted until RocksDB's one flush thread has
written it. With many stores written in turn the immutable memtables queue faster than
they are flushed, and memtables grew to several times their budget; a store that stops
receiving writes also keeps its memtable until something flushes it. Its own remedy,
``allow_stall``, blocks every writer until usage falls, which never happens when idle
stores hold the budget (and rocksdict's ``write`` holds the GIL, so the whole process
would hang). So the env enforces the budget itself:
every store reports each write (:meth:`RocksDBEnv.store_written`). Past half of
``write_buffer_bytes`` the env starts a flush of the largest store, which RocksDB writes
while the writer goes on; past the whole budget it waits for flushes, largest first,
until the memtables are down to half of it. A flush releases the GIL, and the writer
waits only while RocksDB writes what it holds: the backpressure the manager lacks (what
it costs a restore of many stores into a small bound: docs/operations.md, "Memory").
Owners still call ``Store.flush()`` when a store goes quiet (the runtime does it whenever
it writes a task's `.checkpoint`, as Kafka Streams flushes before checkpointing). What
remains per open store is a small fixed overhead outside the cache (memory and file
descriptors; measured in docs/operations.md, "Memory").

Thread-safety: the cache and the manager are thread-safe in RocksDB; ``options()`` builds
a fresh ``Options`` object each call and may be called from any thread, and so may
``store_opened``/``store_closed``. ``store_written`` flushes other stores than the one
written: call it only from the thread that owns every store (the processing thread).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

import rocksdict

MiB = 1024 * 1024
_MIN_MEMORY = 4 * MiB
_OFFSETS_WRITE_BUFFER = 64 * 1024  # the offsets family holds a handful of keys
# RocksDB's default arena block is write_buffer_size / 8 (1 MiB here), and the write
# buffer manager charges a whole block to the cache as soon as a memtable holds one
# byte, so many idle stores reserve more than the whole cache (docs/operations.md,
# "Memory"). 128 KiB blocks keep that reservation close to the data actually buffered.
_ARENA_BLOCK = 128 * 1024
# Share of the bound the memtables of all stores may hold (see store_written).
WRITE_BUFFER_RATIO = 0.25


class MemtableHolder(Protocol):
    """An open store as the env sees it when it keeps the memtables within budget."""

    def memtable_bytes(self) -> int:
        """Bytes of the store's memtables, those waiting to be flushed included."""
        ...

    def flush_memtable(self, wait: bool) -> bool:
        """Flush the memtables, waiting for it when ``wait``; without ``wait`` a store whose
        flush is already under way is left alone. True when a flush was asked for; a
        failure is left to the store's own next write."""
        ...


def flush_order(sizes: Iterable[tuple[int, MemtableHolder]]) -> list[MemtableHolder]:
    """The stores to flush when memtables are over budget: largest first, empty ones never.

    Largest first frees the most per flush and keeps the L0 files few and large.
    """
    ordered = sorted((pair for pair in sizes if pair[0] > 0), key=lambda pair: -pair[0])
    return [holder for _size, holder in ordered]


class RocksDBEnv:
    """The shared block cache and write buffer manager of one worker process.

    Args:
        memory_bytes: bound for block cache plus memtables of all stores together.
        write_buffer_ratio: share of the bound the memtables may use before RocksDB
            flushes early.
        write_buffer_size: memtable size of one store before it is flushed (capped so a
            single store can never take the whole write buffer budget).
        max_open_files: SST files one store keeps open; bounds file descriptors per store.
        read_cache_ratio: share of the bound for the stores' read caches (taken from the
            block cache).

    Raises:
        ValueError: ``memory_bytes`` below 4 MiB, or a ratio out of its range.
    """

    def __init__(
        self,
        memory_bytes: int,
        *,
        write_buffer_ratio: float = WRITE_BUFFER_RATIO,
        write_buffer_size: int = 8 * MiB,
        max_open_files: int = 64,
        read_cache_ratio: float = 0.125,
    ) -> None:
        if memory_bytes < _MIN_MEMORY:
            raise ValueError(f"RocksDB memory bound must be at least {_MIN_MEMORY} bytes")
        if not 0 < write_buffer_ratio < 1:
            raise ValueError("write_buffer_ratio must be between 0 and 1")
        if not 0 <= read_cache_ratio < 1:
            raise ValueError("read_cache_ratio must be at least 0 and below 1")
        self.memory_bytes = memory_bytes
        self.read_cache_bytes = int(memory_bytes * read_cache_ratio)
        # What one open store's read cache may hold: the budget split over the open stores.
        self.read_cache_share = self.read_cache_bytes
        self._stores: dict[int, MemtableHolder] = {}  # by id(): open stores, opening order
        self._stores_lock = threading.Lock()
        self.forced_flushes = 0  # flushes store_written waited for (for metrics, tests)
        self.open_scans = 0  # scans open over every store (owner thread; for metrics)
        self.write_buffer_bytes = int(memory_bytes * write_buffer_ratio)
        # Half the manager's budget at most, so at least two stores can fill memtables
        # before the manager has to force flushes.
        self.store_write_buffer_size = max(
            256 * 1024, min(write_buffer_size, self.write_buffer_bytes // 2)
        )
        self.max_open_files = max_open_files
        self._cache = rocksdict.Cache(memory_bytes - self.read_cache_bytes)
        # allow_stall=False: a stall would wait for memory that idle stores may never give
        # back, with the GIL held (see the module doc); store_written bounds it instead.
        self._write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            self.write_buffer_bytes, False, self._cache
        )

    def options(self) -> rocksdict.Options:
        """Options for a new store's database and its data column family (raw bytes mode).

        ``atomic_flush`` is required because a store keeps data and committed offsets in
        two column families that must always reach disk together (see ``Store``).
        """
        options = self._base_options()
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        options.set_atomic_flush(True)
        options.set_write_buffer_manager(self._write_buffers)
        options.set_write_buffer_size(self.store_write_buffer_size)
        options.set_max_write_buffer_number(2)
        options.set_arena_block_size(_ARENA_BLOCK)
        options.set_max_open_files(self.max_open_files)
        options.set_keep_log_file_num(2)
        options.set_max_log_file_size(1 * MiB)
        options.set_compression_type(rocksdict.DBCompressionType.lz4())
        return options

    def offsets_options(self) -> rocksdict.Options:
        """Options for the small "offsets" column family: a tiny memtable, same shared cache."""
        options = self._base_options()
        options.set_write_buffer_size(_OFFSETS_WRITE_BUFFER)
        return options

    def store_opened(self, store: MemtableHolder) -> None:
        """A store opened: the read cache budget is split over one more store, and its
        memtables count in :meth:`store_written`."""
        with self._stores_lock:
            self._stores[id(store)] = store
            self._share_read_cache()

    def store_closed(self, store: MemtableHolder) -> None:
        """A store closed (idempotent): no longer flushed, no longer given a read cache share."""
        with self._stores_lock:
            self._stores.pop(id(store), None)
            self._share_read_cache()

    def _share_read_cache(self) -> None:
        self.read_cache_share = self.read_cache_bytes // max(1, len(self._stores))

    def store_written(self) -> int:
        """Keep all memtables within ``write_buffer_bytes``; a store calls it after each write.

        Steps: 1. memtables within half the budget -> return 0 (the common case: one call
        into RocksDB); 2. order the open stores by memtable size (:func:`flush_order`);
        3. start a flush of the largest store not flushing already, so RocksDB writes it
        while the caller goes on; 4. past the budget only: start the flushes of every store
        with memtables and wait for them, largest first, until the memtables are back
        within half the budget. Returns the number of flushes waited for.

        Owner thread only (see the module doc). Raises nothing of its own: a store whose
        flush fails reports it at its own next write.
        """
        usage = self._write_buffers.get_usage()
        if usage <= self.write_buffer_bytes // 2:
            return 0
        with self._stores_lock:
            stores = list(self._stores.values())
        order = flush_order((store.memtable_bytes(), store) for store in stores)
        if usage <= self.write_buffer_bytes:
            for store in order:
                if store.flush_memtable(wait=False):
                    break
            return 0
        for store in order:
            store.flush_memtable(wait=False)
        waited = 0
        for store in order:
            waited += store.flush_memtable(wait=True)
            if self._write_buffers.get_usage() <= self.write_buffer_bytes // 2:
                break
        self.forced_flushes += waited
        return waited

    def cache_usage_bytes(self) -> int:
        """Bytes held by the shared cache, memtable reservations included (for metrics)."""
        return self._cache.get_usage()

    def open_scan_count(self) -> int:
        """Scans open over every store (``worker_store_open_iterators``)."""
        return self.open_scans

    def write_buffer_usage_bytes(self) -> int:
        """Bytes of memtables across all stores, as counted by the write buffer manager."""
        return self._write_buffers.get_usage()

    def _base_options(self) -> rocksdict.Options:
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(self._cache)
        # Index and filter blocks live in the cache (bounded) instead of beside every open
        # SST file (unbounded); pinning L0's keeps the hottest ones from being evicted.
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_bloom_filter(10, False)
        options = rocksdict.Options(raw_mode=True)
        options.set_block_based_table_factory(table)
        return options
