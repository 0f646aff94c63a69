"""Input and state for the example app (``worker.examples.payments``), as raw Kafka records.

Records are serialised exactly as the worker's serdes would (``STR`` keys, ``JSON``
values through orjson), so the worker reads them like any producer's, and partitioned by
murmur2 of the key like the worker's own producer, so a seeded changelog record lands
in the partition of the task that owns its key.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from benchmarks.harness import client_settings
from benchmarks.kafka_io import Record, create_topics, produce
from worker.dev import sample_data
from worker.examples import payments as app
from worker.serde import JSON, STR

EXAMPLE_PARTITIONS = 4


def totals_changelog(application_id: str) -> str:
    """The changelog topic of the example app's ``account-totals`` store."""
    return f"{application_id}-{app.TOTALS}-changelog"


def accounts(count: int) -> list[sample_data.Account]:
    return sample_data.accounts(count)


def profile_records(accts: list[sample_data.Account]) -> Iterator[Record]:
    """The ``account-profiles`` table, one record per account."""
    for key, value in sample_data.profiles(accts):
        yield STR.serialize(key), JSON.serialize(value)


def payment_records(
    accts: list[sample_data.Account], count: int, start: int = 0
) -> Iterator[Record]:
    """``count`` payments (ids from ``start``), about 1% of them raising an alert."""
    for key, value in sample_data.payments(accts, count, start=start):
        yield STR.serialize(key), JSON.serialize(value)


def totals_records(accts: list[sample_data.Account], versions: int) -> Iterator[Record]:
    """An ``account-totals`` changelog as the app would have written it over ``versions``
    commits that each touched every account: ``versions`` records per account, in commit
    order, the last one the current total. The embedded broker never compacts, so this is
    what a worker restores."""
    rng = random.Random(3)
    sums = [0] * len(accts)
    keys = [STR.serialize(a.id) for a in accts]
    for version in range(1, versions + 1):
        for i, key in enumerate(keys):
            sums[i] += rng.randrange(100, 100_000)
            yield key, JSON.serialize({"count": version, "sum_cents": sums[i]})


def load_example_state(
    bootstrap: str, application_id: str, accts: list[sample_data.Account], versions: int
) -> dict[int, int]:
    """Create the example topics and the totals changelog; load profiles and totals.

    A worker that starts over an empty state dir then restores both the profiles table
    and the totals store from these topics. Returns, per partition, the offset of the
    totals changelog after the seeded records (where the worker's own writes start).
    """
    sample_data.create_example_topics(client_settings(bootstrap), EXAMPLE_PARTITIONS)
    changelog = create_totals_changelog(bootstrap, application_id)
    produce(bootstrap, app.PROFILES, profile_records(accts))
    seeded: dict[int, int] = {}
    produce(bootstrap, changelog, totals_records(accts, versions), next_offsets=seeded)
    return seeded


def create_totals_changelog(bootstrap: str, application_id: str) -> str:
    """Create the totals changelog as the worker would at start-up (same partitions and
    config), so it can be seeded before any worker runs. Returns its name."""
    changelog = totals_changelog(application_id)
    create_topics(
        bootstrap, {changelog: EXAMPLE_PARTITIONS}, {changelog: {"cleanup.policy": "compact"}}
    )
    return changelog
