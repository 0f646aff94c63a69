"""Builds the worker's runtime in one place, in start order, and registers every release.

:func:`assemble` creates each collaborator and, the moment it exists, pushes what
releases it onto the caller's :class:`contextlib.ExitStack`. Whatever fails part-way
(a topic check, a client that cannot start, a constructor that raises), the stack
releases exactly what was started, in reverse order: tasks closed, group left, clients
closed, HTTP stopped, the state directory's process lock released last.

Start order: state directory (process lock) -> HTTP -> topics -> Kafka clients -> global
tables (read to their ends) -> task parts -> group member -> loop. The topic check waits for the broker, retrying until it
answers or the worker is stopped (:mod:`worker.runtime.broker_wait`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from worker.assignment.model import Subscription
from worker.clock import Clock
from worker.config import Settings
from worker.http.directory import RoutingDirectory, fetch_routing
from worker.http.limits import HttpLimits
from worker.http.queries import QueryRouter
from worker.http.security import http_security
from worker.http.server import HttpServer
from worker.kafka.admin import Admin
from worker.kafka.changelog_tail import ChangelogTailReader
from worker.kafka.consumers import DataConsumer, FetchedBatch, RestoreConsumer, WatermarkReader
from worker.kafka.membership import GroupMember
from worker.kafka.repartition_purge import repartition_purge
from worker.kafka.repartition_topics import report_unused_internal_topics
from worker.kafka.topics import TopicLayout, TopicWatch, prepare_topics
from worker.observability import Metrics
from worker.processing.built_topology import BuiltTopology
from worker.processing.repartitions import repartition_writers
from worker.runtime.broker_wait import BrokerWait
from worker.runtime.global_tables import GlobalTables, partitions_of
from worker.runtime.guarantee import choose_guarantee
from worker.runtime.input_watch import InputWatch
from worker.runtime.loop import ProcessingLoop
from worker.runtime.status import Status
from worker.state.directory import StateDirectory
from worker.state.disk_space import DiskSpaceWatch
from worker.state.restore import ChangelogReader
from worker.state.rocksdb_env import RocksDBEnv
from worker.state.store import Store
from worker.tasks.parts import TaskParts, build_task_parts
from worker.tasks.task import Task
from worker.tasks.task_context import TaskContext

# How often the running worker checks that its topics still exist as at start-up.
TOPIC_CHECK_SECONDS = 10.0
# How long one start-up look at the topics waits for the broker: a stop request is never
# kept waiting longer than this (runtime/broker_wait.py retries a look that timed out).
METADATA_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Runtime:
    """Everything one run of the worker started; released by the stack it was built on."""

    state_dir: StateDirectory
    http: HttpServer
    layout: TopicLayout
    topic_watch: TopicWatch
    reader: ChangelogReader[Task]
    member: GroupMember
    parts: TaskParts
    loop: ProcessingLoop
    inputs: InputWatch
    broker_wait: BrokerWait


@dataclass
class Outcome:
    """How the run ended, read by the releases: tasks close clean only after a final commit."""

    clean: bool = False


@dataclass(frozen=True)
class Hooks:
    """The worker's side of the wiring: status for HTTP, subscriptions, task changes."""

    status: Callable[[], Status]
    subscription: Callable[[], Subscription]
    on_change: Callable[[], None]


def assemble(
    stack: ExitStack,
    settings: Settings,
    topology: BuiltTopology,
    state_root: Path,
    metrics: Metrics,
    clock: Clock,
    stop: threading.Event,
    hooks: Hooks,
    outcome: Outcome,
) -> Runtime:
    """Start every part in order; each release goes onto ``stack`` as soon as it exists."""
    security = http_security(settings)  # ConfigError before anything starts
    state_dir = StateDirectory(state_root, settings.application_id)
    state_dir.open()
    stack.callback(state_dir.close)
    directory = RoutingDirectory(functools.partial(fetch_routing, peer=security.peer))
    global_stores: dict[str, Store] = {}  # filled once the global tables are open
    http = HttpServer(
        settings.http_host,
        settings.http_port,
        metrics,
        hooks.status,
        QueryRouter(topology, hooks.status, directory, security.scheme, global_stores),
        security,
        HttpLimits.from_settings(settings),
        None if settings.http_management_port < 0 else settings.http_management_port,
    )
    http.start()
    stack.callback(http.stop)
    admin = Admin(settings)
    broker_wait = BrokerWait(stop, clock, hooks.on_change, settings.bootstrap_servers)

    broker_wait.run(
        "internal topic names",
        lambda: report_unused_internal_topics(
            admin, topology, settings.application_id, METADATA_TIMEOUT_S
        ),
    )
    layout = broker_wait.run(
        "topics",
        lambda: prepare_topics(
            admin,
            topology,
            settings.application_id,
            settings.internal_topics_create,
            dead_letter=settings.dead_letter_enabled,
            window_margin_ms=settings.windowstore_changelog_additional_retention_ms,
            metadata_timeout=METADATA_TIMEOUT_S,
        ),
    )
    topic_watch = TopicWatch(
        admin,
        topology,
        settings.application_id,
        layout,
        settings.dead_letter_enabled,
        TOPIC_CHECK_SECONDS,
        checked_at=clock.monotonic(),
    )
    guarantee = choose_guarantee(settings, state_dir.process_id, metrics)
    collector = guarantee.collector
    stack.callback(collector.close)
    consumer = DataConsumer(settings)
    stack.callback(consumer.close)
    watermarks = WatermarkReader(settings)
    stack.callback(watermarks.close)
    restore_consumer = RestoreConsumer(settings)
    stack.callback(restore_consumer.close)
    changelog_tail = ChangelogTailReader(settings)
    stack.callback(changelog_tail.close)
    env = RocksDBEnv(settings.rocksdb_memory_bytes)
    metrics.rocksdb_cache_bytes.set_function(env.cache_usage_bytes)
    metrics.rocksdb_memtable_bytes.set_function(env.write_buffer_usage_bytes)
    metrics.store_open_iterators.set_function(env.open_scan_count)
    global_tables = _global_tables(stack, settings, topology, admin, state_dir, env, stop)
    global_stores.update(global_tables.stores)
    ctx = TaskContext(
        settings, state_dir, env, collector, metrics, clock, global_stores=global_tables.stores
    )
    reader: ChangelogReader[Task] = ChangelogReader(
        restore_consumer, metrics, settings.restore_batch_records, clock, changelog_tail.read
    )
    member = GroupMember(
        settings,
        topology.source_topics_by_subtopology(),
        hooks.subscription,
        metrics,
        changelog_topics=topology.changelog_topics_by_subtopology(settings.application_id),
        end_offsets=admin.end_offsets,
        clock=clock,
    )
    stack.callback(_leave, member, state_dir)
    parts = build_task_parts(
        topology,
        ctx,
        reader,
        consumer,
        member,
        guarantee.commit_protocol(member),
        high_watermarks=watermarks.read,
        request_rebalance=member.request_rebalance,
    )
    parts.tasks.on_change = hooks.on_change
    repartitions = set(repartition_writers(topology, settings.application_id))
    if repartitions:
        parts.committer.on_committed = repartition_purge(settings, repartitions, clock).committed
    stack.callback(lambda: parts.tasks.close_all(clean=outcome.clean))
    loop = ProcessingLoop(
        settings,
        parts,
        member,
        consumer,
        collector,
        clock,
        stop,
        metrics,
        DiskSpaceWatch(state_dir.app_dir, settings.state_disk_min_free_bytes, metrics),
        global_tables,
    )
    inputs = InputWatch(consumer.high_watermark, admin.request_end_offsets, clock)
    return Runtime(
        state_dir, http, layout, topic_watch, reader, member, parts, loop, inputs, broker_wait
    )


def _global_tables(
    stack: ExitStack,
    settings: Settings,
    topology: BuiltTopology,
    admin: Admin,
    state_dir: StateDirectory,
    env: RocksDBEnv,
    stop: threading.Event,
) -> GlobalTables:
    """The global tables, opened and read to their ends before the group is joined
    (none: an empty set that costs nothing). Raises TopologyError for a missing topic."""
    specs = topology.global_tables
    counts = admin.partition_counts([s.changelog("") for s in specs]) if specs else {}
    consumer = RestoreConsumer(settings) if specs else _NoGlobals()
    stack.callback(consumer.close)
    tables = GlobalTables(specs, partitions_of(specs, counts), state_dir.app_dir, env, consumer)
    stack.callback(tables.close)
    tables.open()
    tables.bootstrap(stop)
    return tables


class _NoGlobals:
    """The consumer of a topology without global tables: never connects."""

    def add(self, positions: Mapping[tuple[str, int], int | None]) -> None:
        return None

    def fetch(self, max_records: int, timeout: float) -> FetchedBatch:
        return FetchedBatch([], {})

    def close(self) -> None:
        return None


def _leave(member: GroupMember, state_dir: StateDirectory) -> None:
    """Leave the group, then forget the member id: the next run has nobody to remove."""
    member.close(leave=True)
    state_dir.save_member_id(None)
