"""Typed settings with one ``load()``: defaults < TOML file < ``WORKER_*`` env < ``--set``.

Keys are named after Kafka Streams' where one exists (``commit.interval.ms``...). Keys
under ``kafka.`` pass through unchanged to every librdkafka client (security, SASL,
tuning), so operators configure the data path exactly as they would any librdkafka app.
Every value is validated before anything starts; an error names the key
(:class:`~worker.errors.ConfigError`) and the CLI exits with code 2.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from worker.endpoint import bracketed, parse_endpoint
from worker.errors import ConfigError

ENV_PREFIX = "WORKER_"
PASSTHROUGH_PREFIX = "kafka."
# Environment variables of the CLI itself, not settings.
_ENV_NOT_SETTINGS = {"WORKER_CONFIG", "WORKER_APP", "WORKER_STATE_DIR"}

MiB = 1024 * 1024

# Keys whose values are secrets (sasl.password, ssl.key.password, ssl.key.pem,
# sasl.oauthbearer.client.secret, a token...): printed redacted by ``worker config show``.
_SECRET_KEY = re.compile(
    r"password|passwd|secret|token|credential|jaas|oauthbearer\.config|key\.pem|private", re.I
)
REDACTED = "<redacted>"


def is_secret(key: str) -> bool:
    """True for a setting whose value must not be printed or logged."""
    return _SECRET_KEY.search(key) is not None


# librdkafka settings the worker sets from one of its own (the memory budget's queues, the
# transaction timeout), and the worker setting each derives from.
_BUDGETED_LIBRDKAFKA = {
    "queued.max.messages.kbytes": "input.buffer.max.bytes",
    "queue.buffering.max.kbytes": "output.buffer.max.bytes",
    "transaction.timeout.ms": "transaction.timeout.ms",
}

# Kafka's legal topic characters; the id also names the state directory and prefixes topics.
_APPLICATION_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def check_application_id(value: str) -> str:
    """``value`` if it can name a group, a topic prefix and one state directory safely.

    Raises ValueError for anything else: ``.``, ``..`` and other names made of dots only
    would put the state directory at or above ``state.dir`` (a wipe would leave it), and
    a path separator or an empty name would not be one directory.
    """
    if not _APPLICATION_ID.fullmatch(value):
        raise ValueError("must be 1-200 characters of A-Z a-z 0-9 . _ -")
    if value.strip(".") == "":
        raise ValueError("must not be made of dots only (it names a directory in state.dir)")
    return value


# What happens to a record that cannot be deserialised or processed (worker.processing.handlers).
ExceptionPolicyName = Literal["fail", "log_and_continue", "dead_letter"]


class Settings(BaseModel):
    """The validated settings. Immutable once loaded; ``kafka`` holds librdkafka pass-through."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    application_id: str = Field("payments-app", alias="application.id")
    bootstrap_servers: str = Field("127.0.0.1:9092", alias="bootstrap.servers", min_length=1)
    processing_guarantee: Literal["at_least_once", "exactly_once_v2"] = Field(
        "at_least_once", alias="processing.guarantee"
    )
    commit_interval_ms: int = Field(30000, alias="commit.interval.ms", ge=1)
    # 0: derived from the commit interval (see transaction_timeout_ms_effective).
    transaction_timeout_ms: int = Field(0, alias="transaction.timeout.ms", ge=0, le=900000)
    num_standby_replicas: int = Field(1, alias="num.standby.replicas", ge=0)
    # 0 (not allowed in Kafka Streams) moves tasks at once, without warming up: the
    # baseline the scale-out benchmark compares warmups against.
    max_warmup_replicas: int = Field(2, alias="max.warmup.replicas", ge=0)
    acceptable_recovery_lag: int = Field(10000, alias="acceptable.recovery.lag", ge=0)
    probing_rebalance_interval_ms: int = Field(
        600000, alias="probing.rebalance.interval.ms", ge=60000
    )
    state_dir: Path = Field(Path("./state"), alias="state.dir")
    initial_standbys_enabled: bool = Field(True, alias="initial.standbys.enabled")
    state_cleanup_delay_ms: int = Field(600000, alias="state.cleanup.delay.ms", ge=0)
    state_disk_min_free_bytes: int = Field(1024 * MiB, alias="state.disk.min.free.bytes", ge=0)
    statestore_checkpoint_interval_ms: int = Field(
        300000, alias="statestore.checkpoint.interval.ms", ge=0
    )
    repartition_purge_interval_ms: int = Field(30000, alias="repartition.purge.interval.ms", ge=0)
    # The memory budget (see memory_bound_bytes): RocksDB, the uncommitted write buffers,
    # librdkafka's prefetch queues and the producer's queue, each bounded by one setting.
    statestore_uncommitted_max_bytes: int = Field(
        16 * MiB, alias="statestore.uncommitted.max.bytes", ge=-1
    )
    rocksdb_memory_bytes: int = Field(256 * MiB, alias="rocksdb.memory.bytes", ge=16 * MiB)
    input_buffer_max_bytes: int = Field(
        32 * MiB, alias="input.buffer.max.bytes", ge=2 * MiB, le=2 * 1024 * MiB
    )
    output_buffer_max_bytes: int = Field(
        16 * MiB, alias="output.buffer.max.bytes", ge=MiB, le=2 * 1024 * MiB
    )
    restore_batch_records: int = Field(10000, alias="restore.batch.records", ge=1, le=1_000_000)
    # Kafka Streams' name and default: a windowed store's changelog keeps records this much
    # longer than the store's retention (worker.processing.internal_topics.changelog_config).
    windowstore_changelog_additional_retention_ms: int = Field(
        24 * 3600 * 1000, alias="windowstore.changelog.additional.retention.ms", ge=0
    )
    http_host: str = Field("127.0.0.1", alias="http.host", min_length=1)
    http_port: int = Field(8080, alias="http.port", ge=0, le=65535)
    application_server: str = Field("", alias="application.server")
    # -- HTTP access and limits (worker/http/security.py, worker/http/limits.py) --------
    # A second listener for /healthz, /readyz and /metrics only; -1: none (they are
    # served on http.port as well either way).
    http_management_port: int = Field(-1, alias="http.management.port", ge=-1, le=65535)
    # The bearer token: from the environment (WORKER_HTTP_AUTH_TOKEN, from a Secret) or
    # from a file; SecretStr keeps it out of reprs and `config show`.
    http_auth_token: SecretStr = Field(SecretStr(""), alias="http.auth.token")
    http_auth_file: str = Field("", alias="http.auth.file")
    # Serve the query API without credentials on a non-loopback http.host (a trusted
    # network, or a NetworkPolicy that admits only the clients).
    http_query_unauthenticated: bool = Field(False, alias="http.query.unauthenticated")
    http_tls_cert_file: str = Field("", alias="http.tls.cert.file")
    http_tls_key_file: str = Field("", alias="http.tls.key.file")
    http_tls_ca_file: str = Field("", alias="http.tls.ca.file")
    http_max_requests: int = Field(16, alias="http.max.requests", ge=1, le=1024)
    http_max_connections: int = Field(512, alias="http.max.connections", ge=8, le=65536)
    http_socket_timeout_ms: int = Field(10000, alias="http.socket.timeout.ms", ge=100)
    http_request_timeout_ms: int = Field(10000, alias="http.request.timeout.ms", ge=100)
    # -- end of HTTP access and limits -------------------------------------------------
    session_timeout_ms: int = Field(10000, alias="session.timeout.ms", ge=1000)
    heartbeat_interval_ms: int = Field(3000, alias="heartbeat.interval.ms", ge=100)
    max_poll_interval_ms: int = Field(300000, alias="max.poll.interval.ms", ge=1000)
    group_instance_id: str = Field("", alias="group.instance.id")
    replication_factor: int = Field(-1, alias="replication.factor", ge=-1)
    internal_topics_create: bool = Field(True, alias="internal.topics.create")
    poll_ms: int = Field(100, alias="poll.ms", ge=0, le=10000)
    shutdown_timeout_ms: int = Field(30000, alias="shutdown.timeout.ms", ge=1000)
    default_deserialization_exception_handler: ExceptionPolicyName = Field(
        "fail", alias="default.deserialization.exception.handler"
    )
    processing_exception_handler: ExceptionPolicyName = Field(
        "fail", alias="processing.exception.handler"
    )
    processing_exception_max_retries: int = Field(
        2, alias="processing.exception.max.retries", ge=0, le=100
    )
    max_record_bytes: int = Field(MiB, alias="max.record.bytes", ge=-1)
    # "record" or module:attr; imported by worker.processing.timestamps.resolve at start.
    timestamp_extractor: str = Field(
        "record",
        alias="timestamp.extractor",
        pattern=r"^(record|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$",
    )
    # Kafka 4's broker default for log.message.timestamp.after.max.ms; -1: no bound.
    timestamp_max_future_ms: int = Field(3_600_000, alias="timestamp.max.future.ms", ge=-1)
    # How long a task reading several partitions waits for an empty one before it
    # processes the others (worker.tasks.partition_group); -1: never.
    max_task_idle_ms: int = Field(0, alias="max.task.idle.ms", ge=-1)
    # Records a partition of such a task may hold fetched past which its fetching pauses
    # until it drains (Kafka Streams' setting of the same name and default).
    buffered_records_per_partition: int = Field(1000, alias="buffered.records.per.partition", ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", alias="log.level")
    log_format: Literal["json", "console"] = Field("json", alias="log.format")
    kafka: dict[str, str] = Field(default_factory=dict)

    @field_validator("application_id")
    @classmethod
    def _application_id(cls, value: str) -> str:
        return check_application_id(value)

    @field_validator("application_server")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value:
            parse_endpoint(value)  # BadEndpoint is a ValueError naming what is wrong
        return value

    @field_validator("max_record_bytes")
    @classmethod
    def _record_bound(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be -1 (no bound) or a positive number of bytes")
        return value

    @field_validator("kafka")
    @classmethod
    def _budgeted_queues(cls, value: dict[str, str]) -> dict[str, str]:
        """The queue sizes belong to the memory budget: one setting each, not two."""
        for key, setting in _BUDGETED_LIBRDKAFKA.items():
            if key in value:
                raise ValueError(f"kafka.{key} is derived from {setting}; set that instead")
        return value

    @property
    def consumer_queue_kbytes(self) -> int:
        """librdkafka ``queued.max.messages.kbytes`` of each of the two consumers.

        The source consumer and the changelog (restore) consumer share
        ``input.buffer.max.bytes`` half and half. librdkafka also caps a consumer's
        ``fetch.max.bytes`` at this (but not below ``message.max.bytes``), so one fetch
        response cannot overshoot the queue by much.
        """
        return self.input_buffer_max_bytes // 2 // 1024

    @property
    def producer_queue_kbytes(self) -> int:
        """librdkafka ``queue.buffering.max.kbytes`` of the producers, in all: changelogs and
        sinks under exactly-once, split in half between the two at-least-once producers."""
        return self.output_buffer_max_bytes // 1024

    @property
    def memory_bound_bytes(self) -> int | None:
        """What the worker may hold on top of its idle footprint, from its settings alone.

        ``rocksdb.memory.bytes`` (block cache, memtables, read caches; the memtables of all
        stores are held to a quarter of it by ``RocksDBEnv.store_written``) + twice
        ``statestore.uncommitted.max.bytes`` (a commit holds the buffered values as Python
        objects and again in the RocksDB write batch built from them) +
        ``input.buffer.max.bytes`` + ``output.buffer.max.bytes``. None when the uncommitted
        buffers are unbounded (-1). The idle footprint (interpreter, libraries, about
        0.3 MiB per open store) comes on top. The memory benchmark checks peak RSS growth
        against this sum (64 stores: 0.73-0.80x); docs/operations.md says what the growth
        holds and what the sum does not.
        """
        if self.statestore_uncommitted_max_bytes < 0:
            return None
        return (
            self.rocksdb_memory_bytes
            + 2 * self.statestore_uncommitted_max_bytes
            + self.input_buffer_max_bytes
            + self.output_buffer_max_bytes
        )

    @property
    def dead_letter_enabled(self) -> bool:
        """True when some record error ends in the dead-letter topic (it must exist)."""
        return "dead_letter" in (
            self.default_deserialization_exception_handler,
            self.processing_exception_handler,
        )

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once_v2"

    @property
    def commit_timeout_s(self) -> float:
        """How long one commit (flush, offsets, transaction) may take before it counts as failed."""
        return max(10.0, self.session_timeout_ms / 1000.0)

    @property
    def transaction_timeout_ms_effective(self) -> int:
        """The producer's ``transaction.timeout.ms`` under exactly-once: after it the broker
        aborts a transaction its producer left open.

        Why it is set on purpose: a worker killed mid-transaction and not restarted holds
        the last stable offset of every partition it wrote until the broker aborts its
        transaction, so its tasks' new owners cannot finish restoring (nor a
        ``read_committed`` reader see past it) before then. Shorter is a shorter stall; but
        a transaction stays open for a whole commit interval plus the commit itself, and
        one the broker times out fences the producer and revives every task. So the
        default is the commit interval plus the commit timeout (10.25 s with a 250 ms
        interval, near Kafka Streams' 10 s under exactly-once; 40 s with the default
        30 s); an explicit value must exceed the commit interval.
        """
        if self.transaction_timeout_ms:
            return self.transaction_timeout_ms
        return self.commit_interval_ms + int(self.commit_timeout_s * 1000)

    def endpoint(self) -> str:
        """The host:port other instances use to reach this one's HTTP API."""
        return self.application_server or f"{bracketed(self.http_host)}:{self.http_port}"

    def kafka_passthrough(self) -> dict[str, str]:
        """librdkafka settings given by the operator, applied to every client."""
        return dict(self.kafka)


class LoadedSettings:
    """Settings plus where each value came from (for ``worker config show``)."""

    def __init__(
        self, settings: Settings, sources: dict[str, str], ignored_env: list[str] | None = None
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.ignored_env = ignored_env or []


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return _flatten(tomllib.load(fh))
    except FileNotFoundError as exc:
        raise ConfigError("--config", f"file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from exc


def _env_key(name: str) -> str:
    return name[len(ENV_PREFIX) :].lower().replace("_", ".")


def _read_env(environ: Mapping[str, str]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Settings from ``WORKER_*`` variables, and the names of those that are not settings.

    Unknown names are reported, not fatal: platforms inject their own ``WORKER_*``
    variables (Kubernetes adds ``WORKER_SERVICE_HOST``, ``WORKER_PORT``... for a Service
    named "worker"), and refusing to start over them would be wrong.
    """
    known = _known_keys()
    found: dict[str, tuple[str, str]] = {}
    ignored: list[str] = []
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in _ENV_NOT_SETTINGS:
            continue
        key = _env_key(name)
        if key in known or key.startswith(PASSTHROUGH_PREFIX):
            found[key] = (value, f"env:{name}")
        else:
            ignored.append(name)
    return found, sorted(ignored)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """Parse ``--set key=value`` pairs; a malformed pair names itself in the error."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, "--set expects key=value")
        parsed[key.strip()] = value.strip()
    return parsed


def _known_keys() -> set[str]:
    return {field.alias or name for name, field in Settings.model_fields.items()} - {"kafka"}


def _build(values: dict[str, Any]) -> Settings:
    known = _known_keys()
    plain: dict[str, Any] = {}
    passthrough: dict[str, str] = {}
    for key, value in values.items():
        if key.startswith(PASSTHROUGH_PREFIX):
            setting = _BUDGETED_LIBRDKAFKA.get(key[len(PASSTHROUGH_PREFIX) :])
            if setting is not None:
                # Checked here, not only by the model, so the error names the key and
                # never echoes the other pass-through values (passwords among them).
                raise ConfigError(key, f"derived from {setting}; set that instead")
            passthrough[key[len(PASSTHROUGH_PREFIX) :]] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
        elif key in known:
            plain[key] = value
        else:
            raise ConfigError(key, "unknown setting (librdkafka settings go under 'kafka.')")
    try:
        return _check_combinations(Settings.model_validate({**plain, "kafka": passthrough}))
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "config"
        # the kafka table's input holds every pass-through value, passwords among them
        secret = is_secret(key) or key.startswith("kafka")
        got = REDACTED if secret else repr(first.get("input"))
        raise ConfigError(key, f"{first['msg']} (got {got})") from None


def _check_combinations(settings: Settings) -> Settings:
    """Refuse values that are valid alone but not together; the error names the key to change."""
    timeout = settings.transaction_timeout_ms
    if settings.exactly_once and timeout and timeout <= settings.commit_interval_ms:
        raise ConfigError(
            "transaction.timeout.ms",
            f"must be longer than commit.interval.ms ({settings.commit_interval_ms}): a "
            f"transaction stays open a whole commit interval (got {timeout})",
        )
    message_timeout = settings.kafka.get("message.timeout.ms", "")
    effective = settings.transaction_timeout_ms_effective
    if settings.exactly_once and message_timeout.isdigit() and int(message_timeout) > effective:
        raise ConfigError(
            "kafka.message.timeout.ms",
            f"must be at most transaction.timeout.ms ({effective}) under exactly_once_v2 "
            f"(librdkafka refuses it) (got {message_timeout})",
        )
    return settings


def load(
    path: Path | None = None,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """Load and validate settings from every layer; raise ConfigError naming the bad key."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        for key, value in _read_file(path).items():
            values[key], sources[key] = value, f"file:{path}"
    from_env, ignored_env = _read_env(os.environ if environ is None else environ)
    for key, (value, source) in from_env.items():
        values[key], sources[key] = value, source
    for key, value in (overrides or {}).items():
        values[key], sources[key] = value, "--set"
    settings = _build(values)
    for key in _known_keys():
        sources.setdefault(key, "default")
    return LoadedSettings(settings, sources, ignored_env)
