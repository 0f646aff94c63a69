"""One task: its stores, its source partitions, its role and its lifecycle.

A task owns its directory lock and its open stores from ``open()`` until ``close()``.
Processing writes go to the stores' write buffers; the commit protocol (run by the task
manager across all tasks) produces the buffered changes to the changelogs, waits for the
acks, then writes each store's buffer with its new changelog offset in one atomic batch.

An active task's stream time is kept by its processor context; what it committed,
and resumes from, by :mod:`worker.tasks.stream_time`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from worker.assignment.task_id import TP, TaskId
from worker.errors import StateLocked, StoreCorrupted, TaskCorrupted
from worker.events import TASK_WIPED
from worker.lifecycle import IllegalTransition
from worker.observability import get_logger
from worker.processing.built_topology import StoreSpec, Subtopology
from worker.processing.graph import TaskGraph
from worker.processing.punctuators import TaskPunctuators
from worker.state.store import Store
from worker.tasks.active_graph import build_active_graph
from worker.tasks.checkpoints import flush_to_checkpoint, migrate_checkpoint
from worker.tasks.failures import ProcessingFailures, RunFailed
from worker.tasks.state import TaskRole, TaskState, task_lifecycle
from worker.tasks.stores import open_store
from worker.tasks.stream_time import CommittedStreamTime
from worker.tasks.task_context import TaskContext
from worker.tasks.ttl_sweeps import sweep_expired


class Task:
    """A task of any role; only actives process records and write changelogs."""

    def __init__(
        self, task_id: TaskId, role: TaskRole, subtopology: Subtopology, ctx: TaskContext
    ) -> None:
        self.id = task_id
        self.role = role
        self.subtopology = subtopology
        self._ctx = ctx
        self.log = get_logger(task_id=str(task_id), role=role.value)
        self._fsm = task_lifecycle(self.log, ctx.metrics)
        self.stores: dict[str, Store] = {}
        self._specs: dict[str, StoreSpec] = {s.name: s for s in subtopology.stores}
        app = ctx.settings.application_id
        self.changelogs: dict[str, TP] = {
            s.name: (s.changelog(app), task_id.partition) for s in subtopology.stores
        }
        self.source_partitions: tuple[TP, ...] = tuple(
            (topic, task_id.partition) for topic in subtopology.source_topics
        )
        self._pure_table_partitions: dict[str, TP] = {
            s.table_store: (s.topic, task_id.partition)
            for s in subtopology.sources
            if s.table_store is not None and s.name not in subtopology.children
        }
        self._consumed: dict[TP, int] = {}
        self._produced: set[TP] = set()  # changelogs written in the commit under way
        self._committed_sources: dict[TP, int] = {}
        logged = [self.changelogs[s.name] for s in subtopology.stores if not s.is_table]
        carrier = logged[0] if logged else None
        self._stream_times = CommittedStreamTime(str(task_id), ctx.metrics, carrier)
        self._graph: TaskGraph | None = None
        self.failures: ProcessingFailures | None = None  # an active's, with its graph
        self.punctuators: TaskPunctuators | None = None  # an active's, with its graph
        self._last_checkpoint = ctx.clock.monotonic()
        # Restoring after a revival (closed dirty and restarted), not after an assignment:
        # the availability tracker charges the wait to "revive" instead of "restore".
        self.revived = False

    @property
    def state(self) -> TaskState:
        return self._fsm.state

    def transition(self, target: TaskState, reason: str = "") -> None:
        """A task that stops running drops its punctuation schedules (no final one)."""
        running = self._fsm.state is TaskState.RUNNING
        self._fsm.transition(target, reason)
        if running and self.punctuators is not None:
            self.punctuators.stop()

    # -- lifecycle -------------------------------------------------------------------

    def open(self) -> None:
        """Lock the task directory and open every store.

        Raises StateLocked if another owner holds the directory and TaskCorrupted if a
        store cannot be read (the caller wipes and reopens).
        """
        state_dir = self._ctx.state_dir
        if not state_dir.lock_task(self.id, self):
            raise StateLocked(f"task directory {self.id} is locked by another owner")
        try:
            self._open_stores()
            self._migrate_checkpoint()
        except StoreCorrupted as exc:
            # Keep the lock: the caller wipes the directory next, as this task's owner.
            self._close_stores()
            raise TaskCorrupted([self.id], exc.reason) from exc
        except BaseException:
            self._close_stores()
            state_dir.unlock_task(self.id, self)
            raise

    def _open_stores(self) -> None:
        for spec in self.subtopology.stores:
            path = self._ctx.state_dir.store_path(self.id, spec.name)
            store = open_store(
                spec, path, self._ctx.env, self.id, self._ctx.metrics, self._ctx.clock
            )
            store.corruption_found = partial(self._ctx.corruption.report, self.id)
            self.stores[spec.name] = store
        if self.role is TaskRole.ACTIVE:
            self._graph = self._new_graph()

    def _new_graph(self) -> TaskGraph:
        """The active's graph, failure policy and punctuators (``active_graph.py``)."""
        built = build_active_graph(
            str(self.id),
            self.subtopology,
            self.stores,
            self._ctx,
            self._stream_times.value,
            self.log,
        )
        self.failures, self.punctuators = built.failures, built.punctuators
        return built.graph

    @property
    def is_active(self) -> bool:
        return self.role is TaskRole.ACTIVE

    def recycle(self, role: TaskRole) -> None:
        """Take on a new role keeping the open stores and the lock.

        Only a SUSPENDED task, or an initial standby (opened at start-up, still CREATED),
        can change role. Nothing is reopened or re-read: an active turned standby keeps
        its committed stores and tails from their offsets; a standby turned active
        restores only what it is behind. The lock stays with this task object
        throughout, so there is no hand-off that could leave it with the wrong owner.
        """
        idle = self.state is TaskState.SUSPENDED or (
            self.state in (TaskState.CREATED, TaskState.WIPED)
            and self.role is TaskRole.INITIAL_STANDBY
        )
        if not idle:
            raise IllegalTransition(f"cannot recycle {self.id} while {self.state.value}")
        if role is self.role:
            return
        self.log.info("task.recycle", into=role.value)
        self.role = role
        self.log = get_logger(task_id=str(self.id), role=role.value)
        self._fsm.log = self.log
        self._consumed.clear()
        self._committed_sources.clear()
        self._stream_times.forget()
        self._produced.clear()
        self.failures = self.punctuators = None
        self._graph = self._new_graph() if role is TaskRole.ACTIVE else None

    def _migrate_checkpoint(self) -> None:
        path = self._ctx.state_dir.checkpoint_path(self.id)
        migrate_checkpoint(path, self.stores, self.changelogs, self.log)

    def wipe(self, reason: str) -> None:
        """Delete this task's local state and reopen empty stores (state must be CORRUPTED).

        The transition is checked before anything is deleted, so a call in the wrong
        state destroys nothing.
        """
        self.transition(TaskState.WIPED, reason)
        self._close_stores()
        self._ctx.state_dir.wipe_task(self.id, self)
        self._ctx.metrics.state_wipes.labels(reason=reason).inc()
        self.log.warning(TASK_WIPED, reason=reason)
        self._open_stores()

    def close(self, clean: bool) -> None:
        """Release stores and the directory lock. Idempotent.

        A clean close writes the ``.checkpoint``; the caller has already committed. A dirty
        close drops uncommitted writes, which the changelog and reprocessing restore.
        """
        if self.state is TaskState.CLOSED:
            return
        try:
            if clean and self.stores:
                self.write_checkpoint()
        finally:
            self._close_stores()
            self._ctx.state_dir.unlock_task(self.id, self)
            self._stream_times.close()
            self.transition(TaskState.CLOSED, "clean" if clean else "dirty")

    def _close_stores(self) -> None:
        stores, self.stores = self.stores, {}
        for store in stores.values():
            store.close()

    # -- restore ---------------------------------------------------------------------

    def restore_positions(self) -> dict[TP, int | None]:
        """Where each changelog's restore starts: the record after the stored offset."""
        positions: dict[TP, int | None] = {}
        for name, tp in self.changelogs.items():
            stored = self.stores[name].committed_offsets().get(tp)
            positions[tp] = None if stored is None else stored + 1
        return positions

    def stored_offsets(self) -> dict[TP, int]:
        """The committed changelog offset of every store that has one."""
        offsets: dict[TP, int] = {}
        for name, tp in self.changelogs.items():
            stored = self.stores[name].committed_offsets().get(tp)
            if stored is not None:
                offsets[tp] = stored
        return offsets

    def store_for_changelog(self) -> dict[TP, Store]:
        return {tp: self.stores[name] for name, tp in self.changelogs.items()}

    # -- processing ------------------------------------------------------------------

    def process_run(self, messages: Sequence[Any], start: int, stop: int | None = None) -> int:
        """Run ``messages[start]`` and the records after it from the same source partition,
        before ``stop`` (default: the end), through the graph (actives only). Returns the
        index after the last one processed.

        One call per run of records rather than per record (issue 14): the graph's source
        function is looked up once and the consumed offset written once. A record that
        raises ends the run with :class:`RunFailed`, naming it and its index (the records
        before it count as consumed); a record :attr:`failures` marked is skipped instead.
        """
        first = messages[start]
        topic, partition = first.topic(), first.partition()
        end = len(messages) if stop is None else stop
        i = start
        try:
            run = self._graph.runner(topic)  # type: ignore[union-attr]
            failures: ProcessingFailures = self.failures  # type: ignore[assignment]
            marked = failures.marked
            while i < end:
                msg = messages[i]
                if msg.partition() != partition or msg.topic() != topic:
                    break
                if not marked or not failures.skip(msg):
                    run(msg)
                i += 1
        except Exception as exc:
            raise RunFailed(i, messages[i], exc) from exc
        finally:
            if i > start:
                self._consumed[(topic, partition)] = messages[i - 1].offset()
        return i

    def start_positions(self, committed: Mapping[TP, int | None]) -> dict[TP, int | None]:
        """Where processing resumes: the group's committed offset of each source partition.

        A table that feeds no processor resumes after what its store already holds, when
        that is further: restore has applied those records (upserts are idempotent), and
        reading them twice would show processors older versions of rows just restored.
        """
        positions = {tp: committed.get(tp) for tp in self.source_partitions}
        # A revived task never resumes before what it committed itself: a broker that
        # answers the fetch before a just-committed transaction's offsets are materialised
        # (one without KIP-447's require_stable) would have it reprocess committed input.
        for tp, own in self._committed_sources.items():
            found = positions.get(tp, own)
            if found is None or own > found:
                positions[tp] = own
        self._committed_sources = {tp: off for tp, off in positions.items() if off is not None}
        for name, tp in self._pure_table_partitions.items():
            stored = self.stores[name].committed_offsets().get(tp)
            if stored is not None and stored + 1 > (positions[tp] or 0):
                positions[tp] = stored + 1
        return positions

    @property
    def stream_time(self) -> int:
        """The largest record timestamp processed (ms; -1 before any): an active's
        context's, otherwise the one of its last commit."""
        graph = self._graph
        return self._stream_times.value if graph is None else graph.context.stream_time

    def resume_stream_time(self, metadata: Mapping[TP, str]) -> None:
        """Resume from the latest stream time committed (``metadata``: the group's, of
        the source offsets; the stores'; this task's own)."""
        stored = [store.committed_stream_time for store in self.stores.values()]
        resumed = self._stream_times.resume(metadata.values(), stored)
        if self._graph is not None:
            self._graph.context.stream_time = resumed

    def offset_metadata(self) -> str:
        """What to commit with the source offsets: the stream time."""
        return self._stream_times.metadata(self.stream_time)

    def progress(self) -> int:
        """A number that changes whenever the task processes a record (for availability:
        the sum of its consumed offsets, so no counter is kept on the per-record path)."""
        return sum(self._consumed.values())

    def next_positions(self) -> dict[TP, int]:
        """The next offset to process of each source partition whose position is known."""
        positions = dict(self._committed_sources)
        for tp, offset in self._consumed.items():
            positions[tp] = offset + 1
        return positions

    @property
    def pending_bytes(self) -> int:
        return sum(store.pending_bytes for store in self.stores.values())

    def needs_commit(self) -> bool:
        punctuated = self.punctuators is not None and self.punctuators.ran
        return (
            punctuated
            or bool(self.source_offsets_to_commit())
            or any(store.pending() for store in self.stores.values())
        )

    # -- commit protocol steps (called by the task manager, in order) ----------------

    def produce_changelogs(self) -> int:
        """Step 1: send every buffered change of every logged store to its changelog,
        after each store with a TTL swept what expired (``ttl_sweeps.py``), then the
        stream-time marker when the stream time advanced (``stream_time.py``)."""
        sweep_expired(str(self.id), self.stores, self.stream_time, self._ctx.metrics)
        sent = 0
        send = self._ctx.collector.send_changelog
        for name, store in self.stores.items():
            if self._specs[name].is_table:
                continue
            topic, partition = self.changelogs[name]
            pending = store.pending()
            if pending:
                send(topic, partition, pending.items(), store.pending_times())
                self._produced.add((topic, partition))
            sent += len(pending)
        marked = self._stream_times.send_marker(self._ctx.collector, self.stream_time)
        if marked is not None:
            self._produced.add(marked)
        return sent

    def commit_stores(self, acked: Mapping[TP, int]) -> None:
        """Step 3: each store's buffer plus its new changelog offset and the task's stream
        time, one atomic batch.

        Only changelogs this task wrote in this commit take an acked offset: an offset
        acknowledged earlier (say, before the task moved away and came back) must never
        overwrite a newer one the store restored since. A store whose write meets
        corruption is reported for healing (``corruption.py``) and the others are
        written: what it missed is in its changelog already, acknowledged, so the
        restore after the wipe brings it back.
        """
        produced, self._produced = self._produced, set()
        if self.punctuators is not None:
            self.punctuators.ran = False  # what they did is in this commit
        stream_time = self.stream_time
        for name, store in self.stores.items():
            tp = self.changelogs[name]
            if self._specs[name].is_table:
                # A table's changelog is its source topic: its offset is what we consumed.
                offset = self._consumed.get(tp)
            else:
                offset = acked.get(tp) if tp in produced else None
            try:
                store.commit({tp: offset} if offset is not None else {}, stream_time)
            except StoreCorrupted as exc:
                self._ctx.corruption.report(self.id, exc.reason)
        self._stream_times.marker_committed()

    def source_offsets_to_commit(self) -> dict[TP, int]:
        """Step 4 input: next offset to consume for every source partition that moved."""
        return {
            tp: off + 1
            for tp, off in self._consumed.items()
            if off + 1 > self._committed_sources.get(tp, -1)
        }

    def mark_sources_committed(self, offsets: Mapping[TP, int]) -> None:
        """The group committed ``offsets`` (every task's): ours, with our stream time."""
        if any(tp in offsets for tp in self.source_partitions):
            self._stream_times.committed(self.stream_time)
        self._committed_sources.update(offsets)
        if self.failures is not None:
            self.failures.forget_committed(offsets)

    def maybe_write_checkpoint(self) -> None:
        """Step 5: rewrite ``.checkpoint`` when ``statestore.checkpoint.interval.ms`` passed."""
        interval = self._ctx.settings.statestore_checkpoint_interval_ms / 1000.0
        if self._ctx.clock.monotonic() - self._last_checkpoint >= interval:
            self.write_checkpoint()

    def write_checkpoint(self) -> None:
        """Flush the stores' memtables, then record their offsets in ``.checkpoint``.

        Flushing here also keeps memory bounded: the shared write-buffer manager only
        flushes the store being written, so a store that went quiet would otherwise hold
        its memtable indefinitely.
        """
        flush_to_checkpoint(self._ctx.state_dir.checkpoint_path(self.id), self.stores.values())
        self._last_checkpoint = self._ctx.clock.monotonic()
        self._ctx.metrics.checkpoint_writes.inc()

    def discard_uncommitted(self, sends_kept: bool = False) -> None:
        """Drop buffered writes, the consumed positions and the stream time since the
        last commit (the records are processed again, from there). ``sends_kept``:
        what was dead-lettered since then was not aborted (at-least-once, the task's own
        record failed), so replayed records are not dead-lettered again."""
        if self.failures is not None and not sends_kept:
            self.failures.errors.letters_lost()
        for store in self.stores.values():
            store.discard_pending()
        if self._graph is not None:
            self._graph.context.stream_time = self._stream_times.value
        self._consumed.clear()
        self._produced.clear()
