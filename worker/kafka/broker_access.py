"""Whether a broker refused this process's clients their credentials or permissions.

librdkafka treats a failed SASL handshake, an untrusted TLS certificate or a missing ACL
like any failed connection: it logs a line and retries for ever, and each request times
out as if the broker were away. The worker then waited "for the broker" for ever, with
``/healthz`` 200 and the reason in one log line (issue 32). Every confluent-kafka client
of the worker gets :meth:`BrokerAccess.error_cb` (``worker.kafka.client_config``), which
keeps the first refusal it is told of; the start-up steps and the processing loop call
:meth:`BrokerAccess.check`, which turns it into :class:`BrokerAccessDenied` (exit 2, with
librdkafka's reason).

Thread-safety: librdkafka calls ``error_cb`` from whichever thread serves the client's
callbacks; the reason is one attribute, replaced whole (two refusals at once keep either
one: both are the reason). No lock: a client's configuration travels to Spark's executors
by pickle, and the watch pickles as a reference to the receiving process's own.
"""

from __future__ import annotations

from typing import Any

from worker.errors import BrokerAccessDenied
from worker.kafka.error_classifier import denies_access


class BrokerAccess:
    """The first access refusal any client of the process was told of."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _process_access, ()

    def error_cb(self, error: Any) -> None:
        """confluent-kafka's ``error_cb``: keeps the reason of the first refusal."""
        if self.reason is None and denies_access(error):
            self.reason = str(error.str())

    def check(self) -> None:
        """Raises BrokerAccessDenied once a client was refused access."""
        reason = self.reason
        if reason is not None:
            raise BrokerAccessDenied(reason)

    def forget(self) -> None:
        """For tests that provoke a refusal in-process."""
        self.reason = None


# One per process: every client shares it through its configuration (a parameter on
# every client's constructor would thread it through eight adapters for one flag).
BROKER_ACCESS = BrokerAccess()


def _process_access() -> BrokerAccess:
    """What an unpickled :class:`BrokerAccess` is: the receiving process's own."""
    return BROKER_ACCESS
