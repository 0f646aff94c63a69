"""SIGKILL a process writing a Store at random moments: data and offsets never disagree.

A child process opens one store and runs numbered steps forever. Step ``n`` either
buffers a deterministic set of puts/deletes and commits them with offset ``n``, or applies
them as a restored batch (WAL off) with offset ``n``. Restored steps also set a second
offset, one commits never touch, so a flush that persists one column family without the
other is caught too. After each kill the test reopens the store and replays the plan up
to the stored offset: every key must hold exactly what steps ``<= offset`` wrote, and
nothing from later steps. The next child continues from the stored offset, so the rounds
also cover reopening a store that was killed.

Deterministic: set WORKER_FAULT_SEED to replay a failure; the seed is in every message.
"""

from __future__ import annotations

import inspect
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker.state.rocksdb_env import MiB, RocksDBEnv
from worker.state.store import Store

pytestmark = [pytest.mark.faults, pytest.mark.brokers("kafka")]

SEED = int(os.environ.get("WORKER_FAULT_SEED", "20240611"))
ROUNDS = 8
KEYS = 3000
COMMITTED = ("orders-changelog", 0)  # written by every step
RESTORED = ("restore-only-changelog", 0)  # written by restored steps only
MEMORY = 4 * MiB  # small, so RocksDB flushes on its own often during the run


def plan(seed: int, step: int) -> tuple[str, list[tuple[bytes, bytes | None]]]:
    """Step ``step``'s kind ("commit" or "restore") and its records; values encode the step."""
    rng = random.Random(seed * 1_000_003 + step)
    kind = "restore" if rng.random() < 0.3 else "commit"
    records: list[tuple[bytes, bytes | None]] = []
    for _ in range(rng.randint(20, 400)):
        key = b"key-%05d" % rng.randrange(KEYS)
        if rng.random() < 0.1:
            records.append((key, None))
        else:
            records.append((key, b"%d:" % step + b"x" * rng.randint(0, 300)))
    return kind, records


_CHILD = """
import random
import sys
from pathlib import Path
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store

{plan}

path, seed, memory = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
COMMITTED, RESTORED, KEYS = {committed!r}, {restored!r}, {keys!r}
store = Store.open(path, RocksDBEnv(memory), "crash")
step = store.committed_offsets().get(COMMITTED, -1) + 1
while True:
    kind, records = plan(seed, step)
    if kind == "commit":
        for key, value in records:
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)
        store.commit({{COMMITTED: step}})
    else:
        batch = store.restore_batch()
        for key, value in records:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        store.write_restored(batch, {{COMMITTED: step, RESTORED: step}})
    print("done", kind, step, flush=True)
    step += 1
"""


def child_script() -> str:
    return textwrap.dedent(_CHILD).format(
        plan=inspect.getsource(plan), committed=COMMITTED, restored=RESTORED, keys=KEYS
    )


def expected_state(
    seed: int, last_step: int
) -> tuple[dict[bytes, bytes], dict[tuple[str, int], int]]:
    """What the store must hold after steps 0..last_step, data and offsets."""
    data: dict[bytes, bytes] = {}
    offsets: dict[tuple[str, int], int] = {}
    for step in range(last_step + 1):
        kind, records = plan(seed, step)
        for key, value in records:
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        offsets[COMMITTED] = step
        if kind == "restore":
            offsets[RESTORED] = step
    return data, offsets


def run_until_killed(path: Path, log: Path, steps: int) -> int:
    """Start a child, let it finish ``steps`` more steps, SIGKILL it right away.

    Returns the last step reported as committed (a WAL-on commit that returned must
    survive the kill; restored steps may be lost, they are restored again).
    """
    with log.open("ab") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", child_script(), str(path), str(SEED), str(MEMORY)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    last_commit = -1
    try:
        assert child.stdout is not None
        done = 0
        while done < steps:
            line = child.stdout.readline().decode()
            assert line, f"child died early (seed {SEED}); see {log}"
            if line.startswith("done "):
                _, kind, step = line.split()
                done += 1
                if kind == "commit":
                    last_commit = int(step)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    return last_commit


def test_killed_writer_leaves_data_consistent_with_stored_offsets(tmp_path: Path) -> None:
    path = tmp_path / "0_0" / "rocksdb" / "crash"
    log = tmp_path / "child.log"
    env = RocksDBEnv(MEMORY)
    rng = random.Random(SEED)
    for round_no in range(ROUNDS):
        last_commit = run_until_killed(path, log, steps=rng.randint(1, 120))

        store = Store.open(path, env, "crash")
        try:
            offsets = store.committed_offsets()
            actual = dict(store.iter_committed())
        finally:
            store.close()
        where = f"seed {SEED}, round {round_no}, stored offsets {offsets}"
        assert offsets.get(COMMITTED, -1) >= last_commit, f"committed step lost ({where})"
        data, expected_offsets = expected_state(SEED, offsets.get(COMMITTED, -1))
        assert offsets == expected_offsets, f"offsets torn ({where})"
        missing = sorted(k for k in data if actual.get(k) != data[k])
        extra = sorted(k for k in actual if k not in data)
        assert not missing and not extra, (
            f"data disagrees with offsets ({where}): {len(missing)} keys wrong or missing "
            f"(e.g. {missing[:3]}), {len(extra)} keys that should not exist (e.g. {extra[:3]})"
        )
