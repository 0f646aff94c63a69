"""A task's punctuators: the processors' ``init`` and the schedules it registers.

Each active task owns one :class:`TaskPunctuators`. :meth:`TaskPunctuators.start` runs
every processor's ``init(ctx)`` with that processor as the current node, each time the
task starts running (after its restore, a recycle from standby, a revival): whatever
``init`` passes to ``ctx.schedule`` lands on a fresh
:class:`~worker.processing.punctuation.Punctuations`, starting from the task's stream
time. :meth:`TaskPunctuators.stop` drops them all (no final punctuation). The task calls
:meth:`TaskPunctuators.punctuate` once per loop batch, after processing and before the
commit check, as Kafka Streams does.

A punctuation runs as its processor (``ctx.store`` and ``ctx.forward`` are that
processor's) with a :class:`Punctuation` as the current record: the punctuation time as
``ctx.timestamp`` (so its outputs and changelog records carry it), no headers, no topic,
partition and offset -1. What it writes and forwards joins the task's next commit, like a
record's work.

Processing thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.clock import Clock
from worker.errors import FatalError, WorkerError
from worker.observability import Metrics
from worker.processing.built_topology import ProcessorNode
from worker.processing.context import NoRecord, ProcessorContext, PunctuatorFn
from worker.processing.punctuation import (
    UNKNOWN_TIME,
    PunctuationKind,
    Punctuations,
    PunctuatorFailed,
    Schedule,
)


@dataclass(frozen=True, slots=True)
class Punctuation(NoRecord):
    """One run of a punctuator: the record context its callback sees (no topic, no
    headers, offset -1, the punctuation time as timestamp), and how errors, failure
    counts and skip marks name it (``identity``: the same across runs)."""

    processor: str
    punctuator: str
    kind: PunctuationKind
    time_ms: int

    @property
    def identity(self) -> tuple[str, str]:
        return (self.processor, self.punctuator)

    def __str__(self) -> str:
        return f"punctuator {self.punctuator!r} of processor {self.processor!r}"

    def timestamp(self) -> tuple[int, int]:
        return (0, self.time_ms)  # ctx.timestamp is set too: the context keeps its own


class PunctuationFailed(WorkerError):
    """A punctuator raised ``error`` (also the cause) in ``punctuation``. The task hands
    it to the processing failure path, as a record whose processing raised."""

    def __init__(self, punctuation: Punctuation, error: Exception) -> None:
        super().__init__(f"{punctuation} ({punctuation.kind.value}) raised {error!r}")
        self.punctuation = punctuation
        self.error = error


class ProcessorInitFailed(FatalError):
    """A processor's ``init`` raised: the application cannot run this processor."""


class PunctuationFailures(Protocol):
    """The task's failure bookkeeping as its punctuators see it
    (``worker.tasks.failures.ProcessingFailures``)."""

    def skip_punctuation(self, punctuation: Punctuation) -> bool:
        """True when this run is to be skipped (its punctuator failed on every attempt
        and the policy skips)."""
        ...

    def punctuation_succeeded(self, punctuation: Punctuation) -> None:
        """A run completed: its punctuator's failed attempts are forgotten."""
        ...


class TaskPunctuators:
    """One active task's processors' ``init`` and punctuation schedules."""

    def __init__(
        self,
        context: ProcessorContext,
        processors: Sequence[ProcessorNode],
        clock: Clock,
        metrics: Metrics,
        failures: PunctuationFailures,
    ) -> None:
        self._context = context
        self._inits = [(p.name, p.init) for p in processors if p.init is not None]
        self._clock = clock
        self._failures = failures
        self._runs = {
            kind: metrics.punctuations.labels(task=context.task_id, kind=kind.value)
            for kind in PunctuationKind
        }
        self._seconds = metrics.punctuation_seconds
        self._queue = Punctuations(clock)
        self._failed: tuple[Punctuation, Exception] | None = None
        # A punctuation ran since the task's last commit (which clears it): the task
        # must commit even without records, or under exactly-once the transaction
        # holding its outputs would stay open. Schedules dropped: their work is void.
        self.ran = False

    def __len__(self) -> int:
        """Live schedules."""
        return len(self._queue)

    def start(self, stream_time_ms: int = UNKNOWN_TIME) -> None:
        """Drop every schedule, then run each processor's ``init`` (in topology order),
        registering what it schedules, stream schedules from ``stream_time_ms`` on.

        Raises:
            ProcessorInitFailed: an ``init`` raised (the error names the processor).
        """
        self._queue.clear()
        self._queue = Punctuations(self._clock, stream_time_ms)
        ctx = self._context
        previous = ctx.current_node
        try:
            for name, init in self._inits:
                ctx.current_node = ctx.node(name)
                ctx.scheduler = self._scheduler(name)
                try:
                    init(ctx)  # type: ignore[misc]
                except Exception as exc:
                    raise ProcessorInitFailed(
                        f"task {ctx.task_id}: init of processor {name!r} raised {exc!r}"
                    ) from exc
        finally:
            ctx.scheduler = None
            ctx.current_node = previous

    def stop(self) -> None:
        """Drop every schedule (the task stops running). Idempotent."""
        self._queue.clear()
        self.ran = False

    def punctuate(self, stream_time_ms: int) -> int:
        """Fire what is due: stream schedules up to ``stream_time_ms``, then wall ones.
        Returns the number of runs.

        Raises:
            PunctuationFailed: a punctuator raised (the first; every due one ran).
        """
        try:
            fired = self._queue.punctuate(stream_time_ms)
        except PunctuatorFailed as exc:
            failed, self._failed = self._failed, None
            if failed is None:  # every callback is a runner of ours, which records it
                raise
            raise PunctuationFailed(*failed) from exc.__cause__
        if fired:
            self.ran = True
        return fired

    def _scheduler(self, processor: str) -> Callable[[int, Any, PunctuatorFn, int], Schedule]:
        """``ctx.schedule`` for ``processor``'s init. A punctuator is named after its
        function, ``#2``, ``#3``... added for a name the processor scheduled already:
        ``init`` registers in the same order each time, so names hold across runs."""
        taken: dict[str, int] = {}

        def schedule(
            interval_ms: int, kind: PunctuationKind | str, fn: PunctuatorFn, phase_ms: int
        ) -> Schedule:
            kind = PunctuationKind(kind)
            if not callable(fn):
                raise ValueError(f"processor {processor!r}: the punctuator is not callable")
            name = getattr(fn, "__name__", None) or type(fn).__name__
            taken[name] = seen = taken.get(name, 0) + 1
            if seen > 1:
                name = f"{name}#{seen}"
            run = self._runner(processor, name, kind, fn)
            return self._queue.schedule(
                interval_ms, kind, run, phase_ms=phase_ms, name=f"{processor}.{name}"
            )

        return schedule

    def _runner(
        self, processor: str, name: str, kind: PunctuationKind, fn: PunctuatorFn
    ) -> Callable[[int], None]:
        """The callback the queue fires: ``fn`` run as ``processor`` in a punctuation's
        record context, the context restored after it, the outcome reported."""
        ctx = self._context
        node = ctx.node(processor)
        failures, runs, seconds = self._failures, self._runs[kind], self._seconds

        def run(now_ms: int) -> None:
            punctuation = Punctuation(processor, name, kind, now_ms)
            try:
                if failures.skip_punctuation(punctuation):
                    return
                # Headers are the current record's (a punctuation has none): between
                # batches no forward(headers=) is under way to override them.
                saved = ctx.current_node, ctx.current_record, ctx.timestamp
                ctx.current_node, ctx.current_record, ctx.timestamp = node, punctuation, now_ms
                runs.inc()
                started = time.perf_counter()
                try:
                    fn(ctx, now_ms)
                finally:
                    ctx.current_node, ctx.current_record, ctx.timestamp = saved
                    seconds.observe(time.perf_counter() - started)
                failures.punctuation_succeeded(punctuation)
            except Exception as exc:
                if self._failed is None:
                    self._failed = (punctuation, exc)
                raise

        return run
