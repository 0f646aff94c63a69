"""The versioned store on real RocksDB against a dict model of every version.

Random writes, deletes (tombstone versions), out-of-order timestamps, commits (each
after a history sweep of a slice of the keys, as the task runs it) and history
retention: at every step ``get_latest``, ``get_as_of`` and its fast path ``value_as_of``
(at times around each version, below and above the cutoff) equal the model's, and each
key's history read without scanning the write buffer (``versioned_history.py``) equals
a merged scan of it; each write is accepted, rejected or classified newest/older as the
model says; right after an accepted write its key holds at most one version at or below
the cutoff. After the script, stream time moves on and the sweep runs a whole pass:
then the store holds exactly the versions newer than the cutoff and, per key, the value
valid at the cutoff (no older version, no tombstone at or below it), its reads still
equal the model's, and a store restored from the changelog its commits wrote (in batches
of any size) holds the same entries, reads the same, its committed reads (interactive
queries, by key and by range) giving the latest values.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.restoring import restore_pairs
from worker.state import versioned_format as fmt
from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.scan import KeyRange
from worker.state.versioned_store import Put, Version, VersionedStore

TP = ("v-changelog", 0)
ENV = RocksDBEnv(16 * MiB)
KEYS = [b"a", b"a\x00", b"b", b"\x00", b"\xff"]
LATER = b"later"  # written once at the end, later than every other write

# ("put", key, value or None, time step, lateness) | ("commit",)
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(KEYS),
            st.one_of(st.none(), st.binary(max_size=3)),
            st.integers(0, 30),
            st.integers(0, 40),
        ),
        st.tuples(st.just("commit")),
    ),
    max_size=60,
)


class Model:
    """Every accepted version of every key, the observed time, the history."""

    def __init__(self, history: int) -> None:
        self.history = history
        self.observed = -1
        self.versions: dict[bytes, dict[int, bytes | None]] = {}

    def put(self, key: bytes, value: bytes | None, ts: int) -> Put:
        if ts < self.observed - self.history:
            return Put.REJECTED
        self.observed = max(self.observed, ts)
        versions = self.versions.setdefault(key, {})
        newest = max(versions, default=-1)
        versions[ts] = value
        return Put.LATEST if ts >= newest else Put.HISTORY

    def latest(self, key: bytes) -> Version | None:
        versions = self.versions.get(key)
        if not versions:
            return None
        ts = max(versions)
        value = versions[ts]
        return None if value is None else Version(value, ts)

    def as_of(self, key: bytes, at: int) -> Version | None:
        if at < self.observed - self.history or at < 0:
            return None
        older = [ts for ts in self.versions.get(key, {}) if ts <= at]
        if not older:
            return None
        value = self.versions[key][max(older)]
        return None if value is None else Version(value, max(older))

    def needed(self) -> dict[bytes, dict[int, bytes | None]]:
        """Per key, the versions as-of reads at or after the cutoff can tell apart: every
        one newer than the cutoff, and the one valid at the cutoff unless a tombstone."""
        cutoff, kept = self.observed - self.history, {}
        for key, versions in self.versions.items():
            at_cutoff = max((ts for ts in versions if ts <= cutoff), default=None)
            keep = {ts: v for ts, v in versions.items() if ts > cutoff}
            if at_cutoff is not None and versions[at_cutoff] is not None:
                keep[at_cutoff] = versions[at_cutoff]
            if keep:
                kept[key] = keep
        return kept

    def probe_times(self) -> list[int]:
        times = {t for versions in self.versions.values() for t in versions}
        times |= {self.observed - self.history, self.observed + 5}
        return sorted({max(t + d, 0) for t in times for d in (-1, 0, 1)})


def stored_versions(store: VersionedStore, key: bytes) -> int:
    with store.scan(*fmt.history_range(key)) as older:
        count = sum(1 for _ in older)
    return count + (store.get(fmt.latest_key(key)) is not None)


def assert_reads_match(store: VersionedStore, model: Model) -> None:
    for key in KEYS:
        assert store.get_latest(key) == model.latest(key), key
        for at in model.probe_times():
            wanted = model.as_of(key, at)
            assert store.get_as_of(key, at) == wanted, (key, at)
            assert store.value_as_of(key, at) == (None if wanted is None else wanted.value)
        with store.scan(*fmt.history_range(key)) as merged:
            scanned = [(fmt.history_time(k), v) for k, v in merged]
        assert store._history_of(key) == scanned, key


def held_versions(store: VersionedStore) -> dict[bytes, dict[int, bytes | None]]:
    """Every version the store holds, by key (its own layout read back)."""
    held: dict[bytes, dict[int, bytes | None]] = {}
    with store.scan(fmt.LATEST_PREFIX, fmt.OBSERVED_MS) as newest:
        for lkey, stored in newest:
            latest = fmt.decode_latest(stored)
            held.setdefault(lkey[1:], {})[latest.ts_ms] = latest.value
    for key in [*KEYS, LATER]:
        with store.scan(*fmt.history_range(key)) as older:
            for hkey, stored in older:
                held.setdefault(key, {})[fmt.history_time(hkey)] = fmt.decode_version(stored)
    return held


def sweep_and_commit(store: VersionedStore, changelog: list[tuple[bytes, bytes | None]]) -> None:
    """One commit as the task makes it: a history sweep, then the changelog and the batch."""
    store.sweep_history()
    changelog.extend(store.pending().items())
    store.commit({TP: max(len(changelog) - 1, 0)})


def committed_entries(store: VersionedStore) -> list[tuple[bytes, bytes]]:
    with store.scan() as entries:
        return list(entries)


@settings(max_examples=120, deadline=None)
@given(
    history=st.integers(0, 50),
    script=ops,
    batch=st.integers(1, 9),
    slice_keys=st.integers(1, len(KEYS) + 1),
)
def test_versioned_store_matches_the_model(
    history: int, script: list[Any], batch: int, slice_keys: int
) -> None:
    model = Model(history)
    changelog: list[tuple[bytes, bytes | None]] = []
    now = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = VersionedStore.open_versioned(Path(tmp) / "v", ENV, "v", history)
        store.sweep_min_keys = slice_keys
        copy = VersionedStore.open_versioned(Path(tmp) / "copy", ENV, "copy", history)
        try:
            for op in script:
                if op[0] == "put":
                    _, key, value, step, lateness = op
                    now += step
                    ts = max(0, now - lateness)
                    outcome = model.put(key, value, ts)
                    assert store.put_version(key, value, ts) is outcome
                    live = sum(
                        1 for t in model.versions.get(key, {}) if t > model.observed - history
                    )
                    if outcome is not Put.REJECTED:  # a rejected write prunes nothing
                        assert stored_versions(store, key) <= live + 1
                else:
                    sweep_and_commit(store, changelog)
                assert store.observed_ms == model.observed
                assert_reads_match(store, model)
            # Stream time moves on (a write of a key of its own), then a whole pass.
            later = now + 1 + history
            assert store.put_version(LATER, b"", later) is model.put(LATER, b"", later)
            for _ in range(2 * (len(KEYS) + 2)):  # a pass over every key begun after it
                sweep_and_commit(store, changelog)
            assert held_versions(store) == model.needed()
            assert_reads_match(store, model)
            for offset in range(0, len(changelog), batch):
                chunk = changelog[offset : offset + batch]
                restore_pairs(copy, chunk, {TP: offset + len(chunk) - 1})
            assert copy.observed_ms == model.observed
            assert committed_entries(copy) == committed_entries(store)
            assert_reads_match(copy, model)
            rows = {}
            for key in [*KEYS, LATER]:
                latest = model.latest(key)
                assert copy.get_committed(key) == (None if latest is None else latest.value)
                if latest is not None:
                    rows[key] = latest.value
            for limit in (None, 1, 2):
                every = sorted(rows.items())
                assert copy.read_committed_range(KeyRange(), limit=limit) == every[:limit]
                found = copy.read_committed_range(KeyRange(b"a", b"b"), reverse=True, limit=limit)
                assert (
                    found
                    == sorted(((k, v) for k, v in every if b"a" <= k < b"b"), reverse=True)[:limit]
                )
        finally:
            store.close()
            copy.close()


def test_a_write_older_than_the_history_is_rejected_and_counted(tmp_path: Path) -> None:
    store = VersionedStore.open_versioned(tmp_path / "v", ENV, "v", 100)
    try:
        assert store.put_version(b"k", b"new", 1_000) is Put.LATEST
        assert store.put_version(b"k", b"old", 899) is Put.REJECTED
        assert store.put_version(b"k", b"in", 900) is Put.HISTORY
        assert store.dropped_writes == 1
        assert store.get_as_of(b"k", 950) == Version(b"in", 900)
        assert store.get_as_of(b"k", 899) is None
    finally:
        store.close()


def test_pruning_a_key_never_touches_a_longer_key_that_starts_with_it(tmp_path: Path) -> None:
    """b"a" and b"a\x00" share the escaped prefix of b"a"'s history: found by hypothesis
    (a prefix scan pruned b"a" by b"a\x00"'s versions and deleted one it still needed)."""
    store = VersionedStore.open_versioned(tmp_path / "v", ENV, "v", 1)
    try:
        store.put_version(b"a", b"0", 0)
        store.put_version(b"a", b"1", 1)
        store.put_version(b"a\x00", None, 3)
        store.put_version(b"a\x00", b"x", 2)
        store.put_version(b"a", None, 3)
        assert store.get_as_of(b"a", 2) == Version(b"1", 1)
        assert store.get_as_of(b"a\x00", 2) == Version(b"x", 2)
    finally:
        store.close()
