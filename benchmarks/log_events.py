"""Reading a worker's JSON log lines: when an event happened and which events start a
group join. The event names come from :mod:`worker.events`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from worker.events import MEMBERSHIP_TRANSITION


def log_time(event: Mapping[str, Any]) -> float:
    """The wall-clock time (epoch seconds) of a structlog JSON event (``timestamp`` in ISO)."""
    stamp = str(event["timestamp"]).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(stamp).timestamp()


def starts_join(event: Mapping[str, Any]) -> bool:
    """Whether a worker log event is its group member starting a join (JoinGroup sent)."""
    return event.get("event") == MEMBERSHIP_TRANSITION and event.get("dst") == "joining"
