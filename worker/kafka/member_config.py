"""The group member's client settings: our settings translated for kafka-python.

The member runs on a different client from the data path (kafka-python, not librdkafka),
so the librdkafka pass-through is translated here key by key; keys kafka-python has no
use for are logged by name and dropped. The leader's planner knobs come from the same
settings (:func:`planner_config`).
"""

from __future__ import annotations

from typing import Any

from worker.assignment import planner
from worker.config import Settings
from worker.observability import get_logger

# librdkafka pass-through keys kafka-python understands, and what it calls them.
_PASSTHROUGH = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}
_UPPERCASE = {"security_protocol", "sasl_mechanism"}


def kafka_python_config(settings: Settings) -> dict[str, Any]:
    """Consumer settings for the group member, from our settings and the pass-through.

    Only the security and identity keys of the librdkafka pass-through apply here (it is
    a different client); the rest are ignored and their names logged, never their values.
    """
    config: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in settings.bootstrap_servers.split(",")],
        "client_id": f"{settings.application_id}-membership",
        "group_id": settings.application_id,
        "group_instance_id": settings.group_instance_id or None,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
        "max_poll_interval_ms": settings.max_poll_interval_ms,
        "enable_auto_commit": False,
        # Under exactly-once kafka-python then fetches committed offsets with KIP-447's
        # require_stable: on Kafka the offsets of a transaction are materialised after
        # commit_transaction returns, and a fetch in between (a revival right after a
        # commit) would get the previous ones and reprocess committed input. The broker
        # answers UNSTABLE_OFFSET_COMMIT until they are, and kafka-python retries.
        "isolation_level": "read_committed" if settings.exactly_once else "read_uncommitted",
        "allow_auto_create_topics": False,
        "metrics_enabled": False,
        # kafka-python backs off reconnects up to 30 s by default: after an outage the
        # member would find the coordinator up to 30 s after the broker came back (seen).
        "reconnect_backoff_max_ms": 2000,
    }
    ignored = []
    for key, value in settings.kafka_passthrough().items():
        name = _PASSTHROUGH.get(key)
        if name is None and key == "ssl.endpoint.identification.algorithm":
            config["ssl_check_hostname"] = value.lower() == "https"
        elif name is None:
            ignored.append(key)
        else:
            config[name] = value.upper() if name in _UPPERCASE else value
    if ignored:
        get_logger(component="membership").info(
            "membership.config_ignored", keys=sorted(ignored), reason="not used by kafka-python"
        )
    return config


def planner_config(settings: Settings) -> planner.PlannerConfig:
    """The leader's KIP-441 knobs from our settings."""
    return planner.PlannerConfig(
        num_standby_replicas=settings.num_standby_replicas,
        max_warmup_replicas=settings.max_warmup_replicas,
        acceptable_recovery_lag=settings.acceptable_recovery_lag,
        probing_rebalance_interval_ms=settings.probing_rebalance_interval_ms,
    )
