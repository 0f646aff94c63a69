"""Every check of the settings that ``worker start`` makes before anything starts.

One function, so that ``worker config show`` makes the same checks and exits 2 on the
same settings (it used to exit 0 on a short token, missing TLS files or an unreadable
token file that ``worker start`` refused: issue 32). What it checks reads files and
builds clients' configurations, never connects anywhere.
"""

from __future__ import annotations

from worker.config import Settings
from worker.http.security import http_security
from worker.kafka.client_config import check_passthrough
from worker.processing import timestamps


def check_settings(settings: Settings) -> None:
    """Raises ConfigError naming the first key at fault: a ``kafka.*`` value librdkafka
    rejects, a ``timestamp.extractor`` that does not load, the HTTP security files and
    token (``worker.http.security``)."""
    check_passthrough(settings)
    timestamps.resolve(settings.timestamp_extractor)
    http_security(settings)
