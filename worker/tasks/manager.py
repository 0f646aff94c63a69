"""Applies assignments: creates, recycles, hands over and closes tasks.

Initial standbys (state found on disk, opened before the group join) are created here
too, and so is what this instance reports of its tasks when it joins. Routing records is
:mod:`worker.tasks.router`'s job, committing :mod:`worker.tasks.committer`'s; all three
share :class:`worker.tasks.registry.Tasks`. Single-threaded: the processing thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from worker.assignment.model import Assignment
from worker.assignment.task_id import TP, TaskId
from worker.errors import TaskCorrupted, TaskMigrated
from worker.events import (
    ASSIGNMENT_APPLIED,
    HANDOVER_RELEASED,
    HANDOVER_TAKEN_OVER,
    INITIAL_STANDBY_RECYCLED,
    INITIAL_STANDBYS_OPENED,
)
from worker.observability import get_logger
from worker.processing.built_topology import BuiltTopology, Subtopology
from worker.state.checkpoint import CheckpointError, read_checkpoint
from worker.tasks.commit_protocols import Releases
from worker.tasks.committer import TaskCommitter
from worker.tasks.handover import ReleaseWatch, TakeOverWatch, logged_changelogs, release_of
from worker.tasks.registry import Tasks
from worker.tasks.state import TaskRole, TaskState
from worker.tasks.task import Task


class TaskManager:
    """Applies assignments to the tasks of :class:`Tasks`."""

    def __init__(
        self,
        topology: BuiltTopology,
        tasks: Tasks,
        committer: TaskCommitter,
        high_watermarks: Callable[[Iterable[TP]], dict[TP, int]] | None = None,
    ) -> None:
        self._subtopologies: dict[int, Subtopology] = {st.id: st for st in topology.subtopologies}
        self._tasks = tasks
        self._ctx = tasks.ctx
        self._committer = committer
        self._high_watermarks = high_watermarks
        self._watch = ReleaseWatch()
        self._scanned_generation = -1  # the generation check_releases last scanned in
        self._released: tuple[TP, ...] = ()  # the changelogs of the last hand-over's releases
        self._log = get_logger(component="task_manager")

    @property
    def tasks(self) -> dict[TaskId, Task]:
        """Every task by id (the registry's dict: read, never change, outside tasks/)."""
        return self._tasks.by_id

    # -- assignment ------------------------------------------------------------------

    def on_assigned(
        self, assignment: Assignment, incoming: frozenset[TaskId] = frozenset()
    ) -> bool:
        """Apply an assignment (cooperative): a task it leaves in its role is not touched.

        ``incoming``: the standbys the assignment moves to this instance, held until
        their old owners release them (worker/tasks/handover.py). Returns True when every
        task this instance gave up was released in its changelog, so that no follow-up
        round is needed; False when one was not (stateless, only tables, or the
        hand-over commit failed).

        1. Hand over the actives this instance lost, and the incoming tasks it held
           that now go elsewhere: one commit of every running active (under
           exactly-once they share the open transaction) with a release marker for
           each of them, then stop them. Their new owners start from what was
           committed here.
        2. Close (clean, checkpoint written) the tasks no longer assigned in any role,
           initial standbys included: the cleaner removes their directories later.
        3. Recycle the tasks whose role changed, keeping their open stores: an active
           turned standby tails from its committed offsets; a standby, warmup or initial
           standby turned active restores only what it is behind.
        4. Open the new ones, check their stored offsets against the changelogs, start.
        """
        if self._tasks.first_assignment_at is None:
            self._tasks.first_assignment_at = self._ctx.clock.monotonic()
        roles = _roles(assignment)
        for task_id in incoming:
            task = self.tasks.get(task_id)
            if task is not None and task.is_active:
                roles[task_id] = TaskRole.ACTIVE  # taken over before this assignment came
        revoked = [
            t for t in self.tasks.values() if t.is_active and roles.get(t.id) is not TaskRole.ACTIVE
        ]
        passed_on = [
            self.tasks[t]
            for t in self._watch.awaiting
            if t not in incoming and roles.get(t) is not TaskRole.ACTIVE and t in self.tasks
        ]
        for task_id in self._watch.awaiting - incoming:
            self._watch.forget(task_id)  # active outright now, or no longer ours to wait for
        released = True
        self._released = ()
        if revoked or passed_on:
            released = self._hand_over(
                revoked, passed_on, assignment.generation, assignment.pending_moves
            )
        for task_id in sorted(set(self.tasks) - set(roles)):
            self._tasks.close(task_id, clean=True)
        created: list[Task] = []
        for task_id, role in sorted(roles.items()):
            task = self.tasks.get(task_id)
            if task is None:
                task = self._open(task_id, role)
                if task is not None:
                    created.append(task)
            elif task.role is TaskRole.INITIAL_STANDBY:
                self._recycle_initial_standby(task, role)
            elif task.role is not role or task.state is TaskState.SUSPENDED:
                self._change_role(task, role)
        self._check_offsets(created)
        for task in created:
            self._tasks.start(task)
        for task_id in sorted(incoming):
            task = self.tasks.get(task_id)
            if task is not None and not task.is_active and logged_changelogs(task):
                self._watch.expect(task, assignment.generation)
        self._tasks.publish_kinds()
        self._log.info(
            ASSIGNMENT_APPLIED,
            generation=assignment.generation,
            active=sorted(map(str, assignment.active)),
            standby=sorted(map(str, assignment.standby)),
            warmup=sorted(map(str, assignment.warmup)),
            revoked=sorted(str(t.id) for t in revoked),
            awaiting_release=sorted(map(str, self._watch.awaiting)),
        )
        self._tasks.on_change()
        return released

    def _hand_over(
        self,
        revoked: list[Task],
        passed_on: list[Task],
        generation: int,
        moves: Mapping[TaskId, str],
    ) -> bool:
        """Step 1: commit with the releases, then stop the revoked actives (they stay open
        for step 3). True when every one of them was released in its changelog."""
        releases: Releases = [
            release_of(t, generation, moves.get(t.id, ""))
            for t in [*revoked, *passed_on]
            if logged_changelogs(t)
        ]
        try:
            committed = self._committer.commit(releases)
        except TaskMigrated as exc:
            # The group went on without us meanwhile: no active of ours is ours any more.
            self._log.warning("revoke.migrated", error=str(exc))
            self.on_lost()
            return False
        all_logged = len(releases) == len(revoked) + len(passed_on)
        self._released = tuple(tp for changelogs, _ in releases for tp in changelogs)
        self._log.info(
            HANDOVER_RELEASED,
            generation=generation,
            tasks=sorted(str(t.id) for t in [*revoked, *passed_on] if logged_changelogs(t)),
            committed=committed,
        )
        for task in revoked:
            self._tasks.stop_inputs(task)
            task.discard_uncommitted()  # empty after a commit; void after a failed one
            if task.state is not TaskState.SUSPENDED:
                task.transition(TaskState.SUSPENDED, "revoked")
        return committed and all_logged

    def _change_role(self, task: Task, role: TaskRole) -> None:
        """Step 3: stop what the task reads in its old role, recycle, start again."""
        if task.state is not TaskState.SUSPENDED:
            self._tasks.stop_inputs(task)
            task.transition(TaskState.SUSPENDED, f"becomes {role.value}")
        task.recycle(role)
        self._tasks.start(task)

    def check_releases(self, generation: int = -1) -> None:
        """Take over at once every awaited task whose release was read, and every standby
        or warmup whose release gives it to this instance in ``generation``, the one its
        group member is in now (handover.py, step 3)."""
        markers = self._tasks.take_markers()
        released = self._watch.offer(markers)
        if generation >= 0 and (markers or generation != self._scanned_generation):
            # Only when something new was read or the member joined another round: the
            # scan looks at every standby.
            self._scanned_generation = generation
            me = self._ctx.state_dir.process_id
            for held in self.tasks.values():
                if held.role in (TaskRole.STANDBY, TaskRole.WARMUP) and held.id not in released:
                    offsets = self._watch.released_to(held, generation, me)
                    if offsets is not None:
                        released[held.id] = offsets
        for task_id, offsets in released.items():
            task = self.tasks.get(task_id)
            if task is None or task.is_active:
                continue
            self._tasks.released[task_id] = offsets
            task.log.info(
                HANDOVER_TAKEN_OVER, offsets={f"{t}-{p}": o for (t, p), o in offsets.items()}
            )
            self._tasks.stop_inputs(task)
            task.transition(TaskState.SUSPENDED, "released")
            task.recycle(TaskRole.ACTIVE)
            self._tasks.start_released(task)
        if released:
            self._tasks.publish_kinds()
            self._tasks.on_change()

    def take_over_watch(self) -> TakeOverWatch | None:
        """Whether the new owners of what the last hand-over released have taken it over
        (for a worker about to leave); None when nothing was released or ends are unknown."""
        if not self._released or self._high_watermarks is None:
            return None
        return TakeOverWatch(self._high_watermarks, self._released)

    def awaiting_release(self) -> frozenset[TaskId]:
        """The standbys this instance takes over once released (reported as its own)."""
        return self._watch.awaiting

    def on_lost(self) -> None:
        """The group went on without this instance: every active may run elsewhere now.

        Their uncommitted work is void (under exactly-once the open transaction is
        aborted first), so they close dirty; standbys stay, their copies are still good.
        The member joins again by itself and the next assignment starts over.
        """
        self._watch.clear()  # the next assignment says again what to wait for
        actives = sorted(t for t, task in self.tasks.items() if task.is_active)
        if not actives:
            return
        self._committer.abort()
        for task_id in actives:
            self.tasks[task_id].discard_uncommitted()
            self._tasks.close(task_id, clean=False)
        self._tasks.publish_kinds()
        self._log.warning("tasks.lost", tasks=[str(t) for t in actives])
        self._tasks.on_change()

    # -- initial standbys: state found on disk, opened before the group join ----------

    def open_initial_standbys(
        self, task_ids: Iterable[TaskId], partitions: Mapping[int, int]
    ) -> None:
        """Open every non-empty task directory of a stateful sub-topology as an initial standby.

        Runs before the group join, so corrupt state is found (and wiped) now, while
        another instance may still hold a good copy, and the first subscription reports
        what is really on disk. Directories of sub-topologies or partitions the topology
        no longer has are left alone for the cleaner.
        """
        opened: list[Task] = []
        for task_id in task_ids:
            subtopology = self._subtopologies.get(task_id.subtopology)
            if subtopology is None or not subtopology.stores:
                self._log.info("initial_standby.skipped", task_id=str(task_id), reason="stateless")
                continue
            if task_id.partition >= partitions.get(task_id.subtopology, 0):
                self._log.info(
                    "initial_standby.skipped", task_id=str(task_id), reason="no partition"
                )
                continue
            task = self._open(task_id, TaskRole.INITIAL_STANDBY)
            if task is not None:
                opened.append(task)
                self._ctx.metrics.initial_standbys_created.inc()
        self._check_offsets(opened)
        self._tasks.publish_kinds()
        self._log.info(INITIAL_STANDBYS_OPENED, tasks=sorted(str(t.id) for t in opened))

    def _recycle_initial_standby(self, task: Task, role: TaskRole) -> None:
        task.recycle(role)
        into = "active" if role is TaskRole.ACTIVE else "standby"
        self._ctx.metrics.initial_standbys_recycled.labels(into=into).inc()
        task.log.info(INITIAL_STANDBY_RECYCLED, into=role.value)
        self._tasks.start(task)

    def _open(self, task_id: TaskId, role: TaskRole) -> Task | None:
        """Create and open a task; a store that cannot be read is wiped and reopened empty."""
        subtopology = self._subtopologies.get(task_id.subtopology)
        if subtopology is None:
            self._log.error("assignment.unknown_subtopology", task_id=str(task_id))
            return None
        task = Task(task_id, role, subtopology, self._ctx)
        try:
            task.open()
        except TaskCorrupted as exc:
            task.transition(TaskState.CORRUPTED, exc.reason)
            task.wipe("corrupt_store")
        self.tasks[task_id] = task
        return task

    def _check_offsets(self, tasks: list[Task]) -> None:
        """Wipe tasks whose stored offsets lie beyond their changelog's end.

        Such state belongs to another incarnation of the changelog (the topic was
        deleted and recreated, or the cluster replaced): restoring on top of it would
        mix two histories, and on some brokers the restore would never see an end.
        Ends come from the fetch path's high watermark, in one batch for all tasks.
        """
        wanted = {tp: (task, off) for task in tasks for tp, off in task.stored_offsets().items()}
        if not wanted or self._high_watermarks is None:
            return
        ends = self._high_watermarks(list(wanted))
        beyond: dict[TaskId, Task] = {}
        for tp, end in ends.items():
            task, offset = wanted[tp]
            if offset >= end:
                task.log.warning(
                    "state.offset_beyond_changelog_end",
                    changelog=f"{tp[0]}-{tp[1]}",
                    offset=offset,
                    end=end,
                )
                beyond[task.id] = task
        for task in beyond.values():
            task.transition(TaskState.CORRUPTED, "offset beyond changelog end")
            task.wipe("offset_beyond_changelog_end")

    def clean_state_dir(self) -> None:
        """Delete task directories nobody owns that are older than state.cleanup.delay.ms."""
        if self._tasks.first_assignment_at is None:
            return  # until the first assignment every directory may still be claimed
        removed = self._ctx.state_dir.clean_unowned(self._ctx.settings.state_cleanup_delay_ms)
        for task_id in removed:
            self._log.info("state.cleaned", task_id=str(task_id))

    def close_all(self, clean: bool) -> None:
        """Close every task (clean: after a final commit; checkpoints written)."""
        self._tasks.close_all(clean)

    # -- what this instance reports when it joins ------------------------------------

    def offset_sums(self) -> dict[TaskId, int]:
        """Per task with local state, the sum of its changelog positions (stored offset + 1).

        Open tasks report from their stores, whatever their role (the leader knows the
        running actives from ``prev_active``); task directories nobody has open report
        from their ``.checkpoint``, which needs no store to be opened.
        """
        sums: dict[TaskId, int] = {}
        for task_id, task in self.tasks.items():
            if task.stores:
                sums[task_id] = sum(
                    off + 1
                    for store in task.stores.values()
                    for off in store.committed_offsets().values()
                )
        state_dir = self._ctx.state_dir
        for task_id in state_dir.list_non_empty_task_ids():
            if task_id not in sums:
                try:
                    offsets = read_checkpoint(state_dir.checkpoint_path(task_id))
                except CheckpointError:
                    continue
                if offsets:
                    sums[task_id] = sum(off + 1 for off in offsets.values())
        return sums

    def tasks_by_role(self, *roles: TaskRole) -> frozenset[TaskId]:
        return self._tasks.ids_by_role(*roles)


def _roles(assignment: Assignment) -> dict[TaskId, TaskRole]:
    """One role per task; should a task appear twice, active beats warmup beats standby."""
    roles = dict.fromkeys(assignment.standby, TaskRole.STANDBY)
    roles.update(dict.fromkeys(assignment.warmup, TaskRole.WARMUP))
    roles.update(dict.fromkeys(assignment.active, TaskRole.ACTIVE))
    return roles
