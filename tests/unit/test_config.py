"""Settings: layering (defaults < file < env < --set), validation naming the key, pass-through."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from worker.config import MiB, Settings, load, parse_assignments
from worker.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = REPO / "config" / "worker.toml"
K8S_CONFIGMAP = REPO / "deploy" / "kubernetes" / "configmap.yaml"
DEFAULTS = Settings.model_validate({})


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_load_without_any_source() -> None:
    loaded = load(environ={})

    assert loaded.settings == DEFAULTS
    assert loaded.settings.application_id == "payments-app"
    assert loaded.settings.commit_interval_ms == 30000
    assert loaded.settings.kafka == {}
    assert set(loaded.sources.values()) == {"default"}


def test_toml_dotted_keys_are_flattened_back_to_setting_names(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        application.id = "orders"
        commit.interval.ms = 500
        num.standby.replicas = 0
        internal.topics.create = false
        """,
    )

    loaded = load(path, environ={})

    assert loaded.settings.application_id == "orders"
    assert loaded.settings.commit_interval_ms == 500
    assert loaded.settings.num_standby_replicas == 0
    assert loaded.settings.internal_topics_create is False
    assert loaded.sources["commit.interval.ms"] == f"file:{path}"


def test_toml_nested_tables_mean_the_same_as_dotted_keys(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        [commit.interval]
        ms = 750
        """,
    )

    assert load(path, environ={}).settings.commit_interval_ms == 750


def test_worker_env_variables_override_the_defaults() -> None:
    environ = {
        "WORKER_COMMIT_INTERVAL_MS": "1234",
        "WORKER_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
        "WORKER_HTTP_PORT": "9100",
        "UNRELATED": "ignored",
    }

    loaded = load(environ=environ)

    assert loaded.settings.commit_interval_ms == 1234
    assert loaded.settings.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert loaded.settings.http_port == 9100
    assert loaded.sources["commit.interval.ms"] == "env:WORKER_COMMIT_INTERVAL_MS"


def test_cli_variables_of_the_worker_command_are_not_settings() -> None:
    environ = {"WORKER_CONFIG": "/etc/worker/worker.toml", "WORKER_APP": "m:a"}

    assert load(environ=environ).settings == DEFAULTS


def test_set_beats_env_which_beats_file(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        commit.interval.ms = 100
        poll.ms = 200
        acceptable.recovery.lag = 300
        """,
    )
    environ = {"WORKER_COMMIT_INTERVAL_MS": "111", "WORKER_POLL_MS": "222"}
    overrides = parse_assignments(["commit.interval.ms=999"])

    loaded = load(path, overrides=overrides, environ=environ)

    assert loaded.settings.commit_interval_ms == 999  # --set over env and file
    assert loaded.settings.poll_ms == 222  # env over file
    assert loaded.settings.acceptable_recovery_lag == 300  # file over default
    assert loaded.sources["commit.interval.ms"] == "--set"
    assert loaded.sources["poll.ms"] == "env:WORKER_POLL_MS"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("commit.interval.ms", "soon"),
        ("commit.interval.ms", "0"),
        ("http.port", "70000"),
        ("num.standby.replicas", "-1"),
        ("probing.rebalance.interval.ms", "1000"),
        ("application.id", "has spaces"),
        ("log.level", "loud"),
        ("application.server", "no-port"),
        ("rocksdb.memory.bytes", "1024"),
    ],
)
def test_a_bad_value_raises_config_error_naming_the_dotted_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={key: value}, environ={})

    assert caught.value.key == key
    assert key in str(caught.value)


def test_a_bad_value_in_the_file_names_the_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'commit.interval.ms = "often"\n')

    with pytest.raises(ConfigError, match=re.escape("commit.interval.ms")):
        load(path, environ={})


def test_a_bad_env_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=re.escape("max.poll.interval.ms")):
        load(environ={"WORKER_MAX_POLL_INTERVAL_MS": "ten"})


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "commit.intervall.ms = 100\n")

    with pytest.raises(ConfigError) as caught:
        load(path, environ={})

    assert caught.value.key == "commit.intervall.ms"
    assert "unknown setting" in str(caught.value)


def test_unknown_worker_env_variables_are_reported_not_fatal() -> None:
    # Kubernetes injects WORKER_SERVICE_HOST etc. for a Service named "worker".
    loaded = load(environ={"WORKER_SERVICE_HOST": "10.0.0.1", "WORKER_PORT": "tcp://x:1"})
    assert loaded.ignored_env == ["WORKER_PORT", "WORKER_SERVICE_HOST"]
    assert loaded.settings.http_port == 8080


def test_a_missing_or_broken_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load(tmp_path / "absent.toml", environ={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write_toml(tmp_path, "commit.interval.ms = = 1\n"), environ={})


def test_a_malformed_set_pair_names_itself() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_assignments(["commit.interval.ms"])


def test_kafka_keys_pass_through_from_every_layer(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        [kafka]
        security.protocol = "SASL_SSL"
        sasl.mechanism = "PLAIN"
        enable.ssl.certificate.verification = false
        """,
    )
    environ = {"WORKER_KAFKA_SASL_PASSWORD": "from-env"}
    overrides = {"kafka.sasl.username": "from-set"}

    settings = load(path, overrides=overrides, environ=environ).settings

    assert settings.kafka_passthrough() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "enable.ssl.certificate.verification": "false",
        "sasl.password": "from-env",
        "sasl.username": "from-set",
    }


def test_both_guarantees_are_accepted_and_anything_else_is_named() -> None:
    assert load(
        overrides={"processing.guarantee": "exactly_once_v2"}, environ={}
    ).settings.exactly_once
    assert not load(environ={}).settings.exactly_once
    with pytest.raises(ConfigError, match="processing.guarantee"):
        load(overrides={"processing.guarantee": "exactly_once"}, environ={})


def test_shipped_config_file_loads_and_equals_the_defaults() -> None:
    loaded = load(SHIPPED_CONFIG, environ={})

    assert loaded.settings == DEFAULTS
    assert loaded.settings.bootstrap_servers == "127.0.0.1:9092"
    assert loaded.settings.http_port == 8080


def test_shipped_config_file_documents_every_setting() -> None:
    text = SHIPPED_CONFIG.read_text()
    set_keys = {
        match.group(1) for match in re.finditer(r"^([a-z][a-z0-9.]*) = ", text, re.MULTILINE)
    }
    known = {field.alias or name for name, field in Settings.model_fields.items()} - {"kafka"}

    assert set_keys == known
    assert "# [kafka]" in text


def test_shipped_kafka_example_is_valid_when_uncommented(tmp_path: Path) -> None:
    text = SHIPPED_CONFIG.read_text()
    block = text[text.index("# [kafka]") :]
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines())
    path = tmp_path / "worker.toml"
    path.write_text(text[: text.index("# [kafka]")] + uncommented + "\n")

    settings = load(path, environ={}).settings

    assert settings.kafka["security.protocol"] == "SASL_SSL"
    assert "sasl.mechanism" in settings.kafka


def test_kubernetes_configmap_holds_a_valid_config(tmp_path: Path) -> None:
    lines = K8S_CONFIGMAP.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "worker.toml: |") + 1
    body = [
        line.removeprefix("    ") for line in lines[start:] if line.startswith("    ") or not line
    ]
    path = tmp_path / "worker.toml"
    path.write_text("\n".join(body) + "\n")

    settings = load(path, environ={}).settings

    assert settings.http_host == "0.0.0.0"
    assert settings.http_port == 8080


def test_exception_handlers_default_to_fail_and_reject_unknown_policies() -> None:
    settings = load(environ={}).settings
    assert settings.default_deserialization_exception_handler == "fail"
    assert settings.processing_exception_handler == "fail"
    assert not settings.dead_letter_enabled
    assert load(
        overrides={"processing.exception.handler": "dead_letter"}, environ={}
    ).settings.dead_letter_enabled
    with pytest.raises(ConfigError, match="default.deserialization.exception.handler"):
        load(overrides={"default.deserialization.exception.handler": "skip"}, environ={})
    with pytest.raises(ConfigError, match="processing.exception.max.retries"):
        load(overrides={"processing.exception.max.retries": "-1"}, environ={})


def test_max_record_bytes_is_minus_one_or_positive() -> None:
    assert load(overrides={"max.record.bytes": "-1"}, environ={}).settings.max_record_bytes == -1
    with pytest.raises(ConfigError, match="max.record.bytes"):
        load(overrides={"max.record.bytes": "0"}, environ={})


def test_memory_bound_sums_rocksdb_twice_the_uncommitted_bound_and_the_client_buffers() -> None:
    settings = load(environ={}).settings

    assert settings.memory_bound_bytes == (256 + 2 * 16 + 32 + 16) * MiB
    assert settings.consumer_queue_kbytes == 16 * 1024  # half the input buffer per consumer
    assert settings.producer_queue_kbytes == 16 * 1024


def test_memory_bound_follows_the_settings_and_is_none_without_an_uncommitted_bound() -> None:
    sized = load(
        overrides={
            "rocksdb.memory.bytes": str(64 * MiB),
            "statestore.uncommitted.max.bytes": str(8 * MiB),
            "input.buffer.max.bytes": str(4 * MiB),
            "output.buffer.max.bytes": str(2 * MiB),
        },
        environ={},
    ).settings
    unbounded = load(overrides={"statestore.uncommitted.max.bytes": "-1"}, environ={}).settings

    assert sized.memory_bound_bytes == (64 + 16 + 4 + 2) * MiB
    assert sized.consumer_queue_kbytes == 2048
    assert unbounded.memory_bound_bytes is None


@pytest.mark.parametrize(
    ("key", "setting"),
    [
        ("kafka.queued.max.messages.kbytes", "input.buffer.max.bytes"),
        ("kafka.queue.buffering.max.kbytes", "output.buffer.max.bytes"),
    ],
)
def test_librdkafka_queue_sizes_are_refused_in_favour_of_the_budget(key: str, setting: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={key: "1024", "kafka.sasl.password": "s3cret"}, environ={})

    assert caught.value.key == key
    assert setting in caught.value.message
    assert "s3cret" not in str(caught.value)


def test_client_buffers_below_their_minimum_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"input.buffer.max.bytes": str(MiB)}, environ={})

    assert caught.value.key == "input.buffer.max.bytes"


def test_the_transaction_timeout_covers_a_commit_interval_and_a_commit_by_default() -> None:
    derived = load(overrides={"commit.interval.ms": "250"}, environ={}).settings
    default = load(environ={}).settings
    chosen = load(overrides={"transaction.timeout.ms": "15000"}, environ={}).settings

    assert derived.transaction_timeout_ms_effective == 250 + 10000
    assert default.transaction_timeout_ms_effective == 30000 + 10000
    assert chosen.transaction_timeout_ms_effective == 15000


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (
            {"transaction.timeout.ms": "1000", "commit.interval.ms": "1000"},
            "transaction.timeout.ms",
        ),
        ({"kafka.message.timeout.ms": "300000"}, "kafka.message.timeout.ms"),
        ({"kafka.transaction.timeout.ms": "5000"}, "kafka.transaction.timeout.ms"),
    ],
)
def test_a_transaction_timeout_shorter_than_a_transaction_is_refused_naming_the_key(
    overrides: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"processing.guarantee": "exactly_once_v2", **overrides}, environ={})

    assert caught.value.key == key


def test_buffered_records_per_partition_is_1000_by_default_and_must_be_positive() -> None:
    assert load(environ={}).settings.buffered_records_per_partition == 1000
    setting = {"buffered.records.per.partition": "50"}
    assert load(overrides=setting, environ={}).settings.buffered_records_per_partition == 50
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConfigError, match=re.escape("buffered.records.per.partition")):
            load(overrides={"buffered.records.per.partition": bad}, environ={})


def test_max_task_idle_is_0_by_default_minus_one_disables_and_below_is_refused() -> None:
    assert load(environ={}).settings.max_task_idle_ms == 0
    assert load(overrides={"max.task.idle.ms": "-1"}, environ={}).settings.max_task_idle_ms == -1
    assert load(overrides={"max.task.idle.ms": "500"}, environ={}).settings.max_task_idle_ms == 500
    for bad in ("-2", "soon"):
        with pytest.raises(ConfigError, match=re.escape("max.task.idle.ms")):
            load(overrides={"max.task.idle.ms": bad}, environ={})
