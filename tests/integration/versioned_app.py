"""A versioned table and a stream joined with it as of each record's time.

Run with ``worker start --app tests.integration.versioned_app:build``; the topics come
from the environment (:data:`TOPICS_ENV`: ``table,stream,out``) so each test has its own.
The table keeps ``HISTORY_MS`` of history; the join is a left join, so a stream record
gives ``[value, version or None]`` on the output topic.
"""

from __future__ import annotations

import os

from worker.operators.joins.stream_table import add_stream_table_join
from worker.operators.joins.tables import add_versioned_table
from worker.processing.topology import Topology
from worker.serde import STR

TOPICS_ENV = "VERSIONED_APP_TOPICS"
STORE = "profiles"
HISTORY_MS = 60_000


def _pair(value: object, version: object) -> object:
    return f"{value}|{version}"


def build() -> Topology:
    table, stream, out = os.environ[TOPICS_ENV].split(",")
    t = Topology().add_source("stream", stream, STR, STR)
    add_versioned_table(t, STORE, table, HISTORY_MS, key_serde=STR, value_serde=STR)
    add_stream_table_join(t, "join", "stream", STORE, _pair, left=True)
    return t.add_sink("out", out, ["join"], STR, STR)
