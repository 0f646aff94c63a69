"""The configuration every confluent-kafka client of the worker starts from.

Every client gets ``bootstrap.servers`` plus the operator's librdkafka pass-through
settings (security, SASL, tuning); consumers add the fetch tuning below.
:func:`check_passthrough` checks those settings with librdkafka at load time.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import confluent_kafka

from worker.config import PASSTHROUGH_PREFIX, Settings, is_secret
from worker.errors import ConfigError
from worker.kafka.broker_access import BROKER_ACCESS
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
        "error_cb": BROKER_ACCESS.error_cb,  # a refused login or ACL: see broker_access.py
    }
    config.update(settings.kafka_passthrough())
    return config


def check_passthrough(settings: Settings) -> None:
    """Check every ``kafka.*`` setting against librdkafka before anything starts.

    librdkafka checks names and values only when a client is created, which in the worker
    happens deep inside start-up (a traceback and exit 1, so a supervisor that stops on
    exit 2 restarts it for ever). A producer built from the pass-through settings alone
    checks them the same way without connecting anywhere (it is given no
    ``bootstrap.servers``); a consumer-only setting is accepted by it, as librdkafka
    checks every property's value whatever the client.

    Raises:
        ConfigError: naming the first ``kafka.*`` key librdkafka rejects (a secret's value
            is never repeated), or ``kafka`` when only the combination is rejected.
    """
    passthrough = settings.kafka_passthrough()
    problem = _rejection(passthrough)
    if problem is None:
        return
    for key, value in sorted(passthrough.items()):
        alone = _rejection({key: value})
        # Refused when set (an unknown name, a bad value): this key. Refused only when
        # the client is built, the key may be innocent: security.protocol=SASL_SSL alone
        # fails for want of the default mechanism (GSSAPI), whatever sasl.mechanism says.
        if alone is not None and not alone.startswith(_BUILD_FAILED):
            reason = "librdkafka rejects its value" if is_secret(key) else alone
            raise ConfigError(f"{PASSTHROUGH_PREFIX}{key}", reason)
    named = _named_by(problem, passthrough)
    if named is not None:
        raise ConfigError(f"{PASSTHROUGH_PREFIX}{named}", problem)
    raise ConfigError("kafka", f"librdkafka rejects these settings together: {problem}")


_BUILD_FAILED = "Failed to create"  # librdkafka's prefix for a rejection at client build
_WORD = re.compile(r"[\w.-]+")


def _named_by(problem: str, config: dict[str, str]) -> str | None:
    """The key librdkafka's ``problem`` names: by its value (``Unsupported SASL mechanism:
    BOGUS``), else by its name (``sasl.username and sasl.password must be set``). Secrets'
    values are never looked for; values shorter than 3 characters or plain numbers would
    match by chance."""
    words = {w.lower() for w in _WORD.findall(problem)}
    for key, value in sorted(config.items()):
        plain = value.lower()
        if not is_secret(key) and len(plain) >= 3 and not plain.isdigit() and plain in words:
            return key
    text = problem.lower()
    for key in sorted(config):
        if key in text or key.replace(".", " ") in text:
            return key
    return None


def _rejection(config: dict[str, str]) -> str | None:
    """librdkafka's complaint about ``config``, or None when a client accepts it."""
    quiet = logging.getLogger("worker.kafka.config_check")
    quiet.propagate = False  # the warnings of an unconnected producer are not news
    quiet.addHandler(logging.NullHandler())
    try:
        confluent_kafka.Producer({**config, "logger": quiet})
    except confluent_kafka.KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return error.str() if isinstance(error, confluent_kafka.KafkaError) else str(exc)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None
