"""The ``account-profiles`` topic as a plain table, its topic its changelog: what a Spark
load writes, as the worker restores and serves it. The example app reads the topic as a
versioned table (a store with a log of its own); the load tests look at the plain kind."""

from __future__ import annotations

from worker.examples import payments as app
from worker.processing import Topology
from worker.serde import JSON, STR

APP = "tests.apps.profiles_table:build"


def build() -> Topology:
    return Topology().add_table(app.PROFILES, app.PROFILES, key_serde=STR, value_serde=JSON)
