"""The configuration every confluent-kafka client of the worker starts from.

Every client gets ``bootstrap.servers`` plus the operator's librdkafka pass-through
settings (security, SASL, tuning); consumers add the fetch tuning below.
"""

from __future__ import annotations

from typing import Any

from worker.config import Settings
from worker.kafka.client_logs import librdkafka_logger

# Fetch tuning from platform-facts: the default 1000 ms queue backoff stalls a consumer
# that drains faster than the broker refills it.
_FETCH_TUNING = {"fetch.queue.backoff.ms": 10, "queued.min.messages": 100000}


def fetch_config(settings: Settings) -> dict[str, Any]:
    """Fetch tuning plus the prefetch queue's share of ``input.buffer.max.bytes``.

    ``queued.max.messages.kbytes`` is what bounds the queue here: ``queued.min.messages``
    counts records per partition and would let 64 partitions of 1 KiB records queue 6 GB.
    """
    return {**_FETCH_TUNING, "queued.max.messages.kbytes": settings.consumer_queue_kbytes}


def base_config(settings: Settings, client: str) -> dict[str, Any]:
    """The settings every client of the worker shares; its log lines become structured
    events served by the client's own poll calls (see ``worker.kafka.client_logs``)."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": f"{settings.application_id}-{client}",
        "logger": librdkafka_logger(client),
    }
    config.update(settings.kafka_passthrough())
    return config
