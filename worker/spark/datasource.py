"""The worker's topics as a Spark data source (PySpark's Python Data Source API, no jar).

    register(spark)
    spark.read.format("worker").option("topic", "account-profiles")
        .options(**source_options(settings)).load()              # key, mean, std, n
    spark.read.format("worker").option("store", "account-totals")
        .option("app", "worker.examples.payments:build").options(...).load()

Reading gives a table as the workers hold it: one row per key with its latest committed
value (tombstones applied, aborted and open transactions skipped: ``read_committed``).
Each Kafka partition is one Spark input partition, read by an executor with
``worker.kafka.table_reader`` and decoded with the table's serdes
(``worker.spark.decoding``: an object value becomes one column per field). Options:

- ``topic``, or ``store`` (+ ``app`` = ``module:attr`` of the topology, and
  ``application.id``) to read a store's changelog with the store's serdes;
- ``keySerde`` / ``valueSerde`` (``str``, ``bytes``, ``json``; defaults: the store's, or
  ``str`` / ``json``), ``keyColumn`` (``key``), ``raw`` (``true``: undecoded
  ``partition, key, value`` binary columns), ``latest`` (``false``: every committed
  record in order instead of the latest per key, for stream topics), ``sampleSize``
  (records sampled to infer a schema when none is given), ``timestampColumn`` (a last
  column of that name holding each row's record timestamp: for a versioned table the
  time its latest version is valid from);
- ``bootstrap.servers`` and ``kafka.<librdkafka setting>`` for the clients.

Writing takes encoded ``partition, key, value`` rows, optionally with a ``timestamp``
(epoch ms each record carries; null: the time of the write), which ``worker.spark.load``
encodes with the serdes and the worker's partitioner, and writes each Kafka partition's rows in
one transaction (``worker.kafka.table_writer.write_transactions``); a task that fails has
committed nothing, and its retry fences it by the partition's transactional id.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from worker.config import Settings, load
from worker.dsl import StreamsBuilder
from worker.kafka.table_reader import (
    committed_messages,
    partition_count,
    read_table_partition,
    reader_config,
)
from worker.kafka.table_writer import WriteSummary, write_transactions, writer_config
from worker.operators.joins.tables import source_node
from worker.serde import Serde, by_name
from worker.spark.decoding import RAW_FIELDS, STAMPED_FIELDS, RowDecoder, ddl, infer_fields
from worker.spark.errors import LoadRejected, SchemaMismatch, TableNotFound

FORMAT = "worker"
DEFAULT_APP = "worker.examples.payments:build"
_CLIENT = ("bootstrap.servers",)


def source_options(settings: Settings) -> dict[str, str]:
    """The options that give the data source the worker's broker and client settings."""
    options = {
        "bootstrap.servers": settings.bootstrap_servers,
        "application.id": settings.application_id,
    }
    options.update({f"kafka.{k}": v for k, v in settings.kafka_passthrough().items()})
    return options


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("worker")`` and ``df.write.format("worker")`` available."""
    spark.dataSource.register(WorkerTopics)


def _settings(options: Mapping[str, str]) -> Settings:
    values: dict[str, Any] = {k: v for k, v in options.items() if k.lower().startswith("kafka.")}
    for name in ("bootstrap.servers", "application.id"):
        if name in options:
            values[name] = options[name]
    return load(None, values, environ={}).settings


def _built_topology(spec: str, application_id: str) -> Any:
    """The built topology of ``module:attr`` (a Topology or a DSL builder, or a callable
    returning one), as ``worker start --app`` takes it, a builder built with
    ``application_id`` (its repartition topics need it); LoadRejected if it is not one."""
    module_name, _, attr = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise LoadRejected(f"cannot load the app {spec}: {exc}") from None
    topology: Any = target if hasattr(target, "build") or not callable(target) else target()
    if not hasattr(topology, "build"):
        raise LoadRejected(f"{spec} is not a Topology")
    if isinstance(topology, StreamsBuilder):
        topology = topology.build(application_id)
    return topology.build()


def _store_spec(options: Mapping[str, str], settings: Settings) -> tuple[str, Serde, Serde, bool]:
    """(changelog topic, key serde, value serde, versioned) of the store named by the
    options; versioned when it is a versioned table read from its topic."""
    topology = _built_topology(options.get("app", DEFAULT_APP), settings.application_id)
    try:
        _, spec = topology.store(options["store"])
    except KeyError:
        names = sorted(s.name for st in topology.subtopologies for s in st.stores)
        raise TableNotFound(
            f"no store {options['store']!r} in {options.get('app', DEFAULT_APP)};"
            f" its stores: {', '.join(names)}"
        ) from None
    if spec.history_ms is not None:
        # A versioned table's changelog holds its versions in the store's own layout; its
        # topic holds them as records, the one with the largest time per key being the
        # latest version (worker.kafka.table_reader reads them so).
        topic = _versioned_table_topic(topology, spec.name)
        if topic is not None:
            return topic, spec.key_serde, spec.value_serde, True
    return spec.changelog(settings.application_id), spec.key_serde, spec.value_serde, False


def _versioned_table_topic(topology: Any, store: str) -> str | None:
    """The topic versioned table ``store`` reads (``builder.table(..., history_ms=)``), or
    None for a versioned store a processor writes."""
    wanted = source_node(store)
    for st in topology.subtopologies:
        for source in st.sources:
            if source.name == wanted:
                return str(source.topic)
    return None


class WorkerTopics(DataSource):
    """``format("worker")``: a table topic or store changelog, read or written whole."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        settings = _settings(options)
        self.config = reader_config(settings)
        self.write_config = writer_config(settings)
        key_serde: Serde = by_name("str")
        value_serde: Serde = by_name("json")
        self.by_time = False
        if "store" in options:
            self.topic, key_serde, value_serde, self.by_time = _store_spec(options, settings)
        elif "topic" in options:
            self.topic = options["topic"]
        else:
            raise LoadRejected("give the option topic or store")
        self.key_serde = by_name(options["keySerde"]) if "keySerde" in options else key_serde
        self.value_serde = (
            by_name(options["valueSerde"]) if "valueSerde" in options else value_serde
        )
        self.key_column = options.get("keyColumn", "key")
        self.raw = options.get("raw", "false").lower() == "true"
        self.latest = options.get("latest", "true").lower() == "true"
        self.sample_size = int(options.get("sampleSize", "1000"))
        self.idle_timeout = float(options.get("idleTimeout", "60"))
        self.timestamp_column = options.get("timestampColumn")
        if self.timestamp_column is not None and self.raw:
            raise LoadRejected("raw reads have no timestamp column: give raw or timestampColumn")

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def partitions(self) -> int:
        """The topic's partition count; TableNotFound if it does not exist."""
        count = partition_count(self.config, self.topic)
        if count is None:
            what = f"topic {self.topic!r}"
            if "store" in self.options:
                what = (
                    f"the changelog of store {self.options['store']!r}, {what}, under"
                    f" application.id {self.options.get('application.id', 'default')!r}"
                    " (is that the workers' application.id?),"
                )
            raise TableNotFound(f"{what} does not exist")
        return count

    def schema(self) -> str:
        """Inferred from up to ``sampleSize`` records, taken from every partition at once
        (one consumer each pays a connection: in turn, many partitions would add up)."""
        if self.raw:
            return ddl(RAW_FIELDS)
        count = self.partitions()
        share = -(-self.sample_size // count)

        def sample_of(partition: int) -> list[tuple[bytes, bytes]]:
            content = read_table_partition(
                self.config, self.topic, partition, idle_timeout=self.idle_timeout, limit=share
            )
            return list(itertools.islice(content.rows.items(), share))

        with ThreadPoolExecutor(max_workers=min(8, count)) as pool:
            sample = [record for part in pool.map(sample_of, range(count)) for record in part]
        fields = infer_fields(sample, self.key_serde, self.value_serde, self.key_column)
        if self.timestamp_column is not None:
            if self.timestamp_column in dict(fields):
                raise SchemaMismatch(
                    f"the table has a column {self.timestamp_column!r} already: name the"
                    " timestamp column otherwise (option timestampColumn)"
                )
            fields = (*fields, (self.timestamp_column, "timestamp"))
        return ddl(fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        fields = tuple((f.name, f.dataType.simpleString()) for f in schema.fields)
        if self.timestamp_column is not None:
            if not fields or fields[-1] != (self.timestamp_column, "timestamp"):
                raise SchemaMismatch(
                    f"with timestampColumn the last column is {self.timestamp_column!r}"
                    f" timestamp, got {ddl(fields)}"
                )
            fields = fields[:-1]
        decoder = None
        if not self.raw:
            decoder = RowDecoder.for_schema(fields, self.key_serde, self.value_serde)
        elif fields != RAW_FIELDS:
            raise SchemaMismatch(f"raw reads have the schema {ddl(RAW_FIELDS)}")
        return TopicReader(
            self.config,
            self.topic,
            self.partitions(),
            decoder,
            self.idle_timeout,
            self.latest,
            ReadMode(by_time=self.by_time, stamped=self.timestamp_column is not None),
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        fields = tuple((f.name, f.dataType.simpleString()) for f in schema.fields)
        if fields not in (RAW_FIELDS, STAMPED_FIELDS):
            raise LoadRejected(
                f"writing a table takes the columns {ddl(RAW_FIELDS)} (encoded records),"
                f" optionally with {ddl(STAMPED_FIELDS[-1:])} (epoch ms; null: the time of"
                f" the write), got {ddl(fields)}: worker.spark.load.load_table encodes rows"
            )
        return TopicWriter(
            self.write_config,
            self.topic,
            self.partitions(),
            float(self.options.get("timeout", "180")),
            int(self.options.get("transactionTimeoutMs", "900000")),
        )


@dataclass(frozen=True, slots=True)
class ReadMode:
    """How a reader picks and stamps rows: ``by_time`` takes each key's latest version by
    timestamp (a versioned table), ``stamped`` adds each row's record time as a column."""

    by_time: bool = False
    stamped: bool = False


class TopicReader(DataSourceReader):
    """One input partition per Kafka partition; each read by an executor, decoded there."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        count: int,
        decoder: RowDecoder | None,
        idle_timeout: float,
        latest: bool = True,
        mode: ReadMode = ReadMode(),
    ) -> None:
        self.config, self.topic, self.count = config, topic, count
        self.decoder, self.idle_timeout, self.latest = decoder, idle_timeout, latest
        self.mode = mode

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        index = int(partition.value)
        records: Iterable[tuple[Any, Any, int]]
        if self.latest:
            content = read_table_partition(
                self.config,
                self.topic,
                index,
                idle_timeout=self.idle_timeout,
                by_time=self.mode.by_time,
            )
            times = content.times
            records = ((k, v, times[k]) for k, v in content.rows.items())
        else:
            every = committed_messages(
                self.config, self.topic, index, idle_timeout=self.idle_timeout
            )
            records = ((k, v, t) for k, v, t in every if k is not None)
        if self.decoder is None:
            for key, value, _ in records:
                yield index, key, value
            return
        decode = self.decoder.decode
        if not self.mode.stamped:
            for key, value, _ in records:
                yield decode(key, value)
            return
        for key, value, timestamp in records:
            yield (*decode(key, value), record_time(timestamp))


def record_time(timestamp: int) -> datetime | None:
    """A record's timestamp as Spark takes a timestamp column: an aware UTC datetime,
    None for a record without one (Kafka's -1)."""
    return None if timestamp < 0 else datetime.fromtimestamp(timestamp / 1000, UTC)


class Committed(WriterCommitMessage):
    """What one Spark task committed, per Kafka partition."""

    def __init__(self, summary: WriteSummary) -> None:
        self.summary = summary


class TopicWriter(DataSourceWriter):
    """Writes each task's rows, one transaction per Kafka partition (see the module doc)."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        count: int,
        timeout: float,
        transaction_timeout_ms: int,
    ) -> None:
        self.config, self.topic, self.count = config, topic, count
        self.timeout, self.transaction_timeout_ms = timeout, transaction_timeout_ms

    def write(self, iterator: Iterator[Any]) -> Committed:
        records = (
            (
                int(row[0]),
                bytes(row[1]),
                None if row[2] is None else bytes(row[2]),
                row[3] if len(row) > 3 else None,
            )
            for row in iterator
        )
        summary = write_transactions(
            self.config,
            self.topic,
            self.count,
            records,
            self.timeout,
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        return Committed(summary)
