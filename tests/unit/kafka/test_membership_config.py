"""Group-member settings and error classification, without a broker."""

from __future__ import annotations

import pytest

from worker.config import Settings
from worker.errors import FatalError
from worker.kafka.member_config import kafka_python_config
from worker.kafka.membership import GroupMember
from worker.observability import Metrics


def _settings(**values: object) -> Settings:
    return Settings.model_validate(values)


def test_timeouts_group_and_commit_mode_come_from_settings() -> None:
    config = kafka_python_config(
        _settings(
            **{
                "application.id": "payments",
                "bootstrap.servers": "k1:9092, k2:9092",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1500,
                "max.poll.interval.ms": 10000,
            }
        )
    )
    assert config["group_id"] == "payments"
    assert config["bootstrap_servers"] == ["k1:9092", "k2:9092"]
    assert (config["session_timeout_ms"], config["heartbeat_interval_ms"]) == (6000, 1500)
    assert config["max_poll_interval_ms"] == 10000
    assert config["enable_auto_commit"] is False
    assert config["group_instance_id"] is None


@pytest.mark.parametrize(
    "guarantee, isolation",
    [("at_least_once", "read_uncommitted"), ("exactly_once_v2", "read_committed")],
)
def test_exactly_once_fetches_committed_offsets_only_once_stable(
    guarantee: str, isolation: str
) -> None:
    # kafka-python sends OffsetFetch with require_stable under read_committed (KIP-447).
    config = kafka_python_config(_settings(**{"processing.guarantee": guarantee}))
    assert config["isolation_level"] == isolation


def test_a_group_instance_id_is_passed_on() -> None:
    config = kafka_python_config(_settings(**{"group.instance.id": "worker-0"}))
    assert config["group_instance_id"] == "worker-0"


def test_security_passthrough_is_mapped_and_the_rest_ignored() -> None:
    passthrough = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "scram-sha-512",
        "sasl.username": "svc",
        "sasl.password": "secret",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": "/etc/cert.pem",
        "ssl.key.location": "/etc/key.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "pay-7",
        "linger.ms": "5",
        "fetch.queue.backoff.ms": "10",
    }
    config = kafka_python_config(_settings(kafka=passthrough))
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (config["sasl_plain_username"], config["sasl_plain_password"]) == ("svc", "secret")
    assert config["ssl_cafile"] == "/etc/ca.pem"
    assert (config["ssl_certfile"], config["ssl_keyfile"]) == ("/etc/cert.pem", "/etc/key.pem")
    assert config["ssl_check_hostname"] is False
    assert config["client_id"] == "pay-7"
    assert "linger_ms" not in config and "linger.ms" not in config


def test_a_member_that_was_never_started_closes_quietly_and_refuses_work() -> None:
    member = GroupMember(_settings(), {0: ["a"]}, lambda: None, Metrics())  # type: ignore[arg-type,return-value]
    assert member.generation == -1
    assert member.member_id == ""
    assert member.assigned_partitions == frozenset()
    member.close()
    member.close()
    with pytest.raises(FatalError, match="closed"):
        member.poll()
