"""QueryRouter: which task owns a key, local reads, redirects, stale reads, clear errors."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import orjson
import pytest

from tests.unit.http.conftest import (
    ME,
    OTHER,
    PARTITIONS,
    THIRD,
    StatusBox,
    Stores,
    key_on,
    snapshot,
    task_of,
)
from worker.assignment.model import Assignment
from worker.assignment.task_id import TaskId
from worker.clock import FakeClock
from worker.http.queries import QueryRouter
from worker.observability import Metrics
from worker.partitioner import partition_for
from worker.runtime.availability import AvailabilityTracker, StallCause, TaskSample
from worker.runtime.status import Routing, task_status

ALL = ["0_0", "0_1", "0_2", "0_3"]


def path(store: str, key: str, query: str = "") -> str:
    return f"/stores/{store}/keys/{key}" + (f"?{query}" if query else "")


def ask(router: QueryRouter, store: str, key: str, stale: bool = False):  # type: ignore[no-untyped-def]
    return router.get(store, key, stale, path(store, key, "allow_stale=true" if stale else ""))


def test_the_owning_task_is_murmur2_of_the_key_bytes_over_the_task_count(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {})
    for key in (b"acct-00001", b"a", b"\x00\xff"):
        expected = TaskId(0, partition_for(key, PARTITIONS))
        assert router.owner("counts", key) == expected


def test_a_key_of_a_running_local_active_is_answered_with_its_committed_value(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    key = key_on(1)
    stores.put("counts", key.encode(), orjson.dumps({"count": 3}), offset=41)
    box.current = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})

    reply = ask(router, "counts", key)

    assert reply.status == 200
    assert reply.body == {"store": "counts", "key": key, "task": "0_1", "kind": "active",
                          "value": {"count": 3}}  # fmt: skip
    assert reply.headers["X-Worker-Task"] == "0_1"
    assert reply.headers["X-Worker-Served-By"] == "active"
    assert "X-Worker-Standby-Lag" not in reply.headers


def test_uncommitted_writes_are_never_visible(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    key = key_on(1)
    stores.by_task[TaskId(0, 1)]["counts"].put(key.encode(), b"1")  # buffered, not committed
    box.current = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})
    assert ask(router, "counts", key).status == 404


def test_an_absent_key_is_a_404_naming_the_task(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {"0_2": ("active", "running")}, {ME: ["0_2"]})
    reply = ask(router, "counts", key_on(2))
    assert reply.status == 404
    assert reply.body["error"] == "key not found"
    assert reply.body["task"] == "0_2"


def test_an_unknown_store_is_a_404_listing_the_stores(router: QueryRouter) -> None:
    reply = ask(router, "nope", "k")
    assert reply.status == 404
    assert reply.body["stores"] == ["blobs", "counts", "labels", "tags"]


def test_a_key_the_serde_cannot_take_is_a_400(router: QueryRouter) -> None:
    assert ask(router, "tags", "not-json").status == 400
    assert ask(router, "blobs", "xyz").status == 400


def test_json_and_bytes_keys_are_found_in_their_stores(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    stores.put("tags", b'"red"', b'{"n":1}')
    stores.put("blobs", b"\x01\x02", b"\xff")
    box.current = snapshot(stores, {t: ("active", "running") for t in ALL}, {ME: ALL})

    tags = ask(router, "tags", '"red"')
    blobs = ask(router, "blobs", "hex:0102")

    assert (tags.status, tags.body["value"], tags.body["key"]) == (200, {"n": 1}, "red")
    assert (blobs.status, blobs.body["value"], blobs.body["encoding"]) == (200, "ff", "hex")


def test_a_key_whose_task_is_active_elsewhere_redirects_to_that_instance(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"], OTHER: ["0_3"]})
    key = key_on(3)

    reply = ask(router, "counts", key)

    assert reply.status == 307
    assert reply.headers["Location"] == f"http://{OTHER}/stores/counts/keys/{key}"
    assert reply.headers["X-Worker-Endpoint"] == OTHER
    assert reply.body["endpoint"] == OTHER
    assert reply.body["task"] == "0_3"


@pytest.mark.parametrize("advertised", ["evil.com/@x:80", "h:80\r\nSet-Cookie: a=b", "h:99999"])
def test_an_instance_advertising_no_valid_endpoint_is_never_a_redirect_target(
    router: QueryRouter, box: StatusBox, stores: Stores, advertised: str
) -> None:
    box.current = snapshot(
        stores, {"0_0": ("active", "running")}, {ME: ["0_0"], advertised: ["0_3"]}
    )

    reply = ask(router, "counts", key_on(3))

    assert reply.status == 503
    assert "Location" not in reply.headers and "X-Worker-Endpoint" not in reply.headers
    assert reply.body["task"] == "0_3"


def test_a_local_standby_redirects_to_the_active_unless_stale_reads_are_allowed(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    key = key_on(3)
    stores.put("counts", key.encode(), b'{"count":1}')
    box.current = snapshot(
        stores, {"0_3": ("standby", "running", 5)}, {OTHER: ["0_3"]}, {ME: ["0_3"]}
    )

    fresh = ask(router, "counts", key)
    stale = ask(router, "counts", key, stale=True)

    assert fresh.status == 307
    assert fresh.headers["Location"].startswith(f"http://{OTHER}/")
    assert stale.status == 200
    assert stale.body["value"] == {"count": 1}
    assert stale.body["kind"] == "standby"
    assert stale.headers["X-Worker-Standby-Lag"] == "5"
    assert stale.body["lag"] == 5


def test_a_stale_read_with_unknown_lag_says_so(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {"0_3": ("warmup", "running", None)}, {OTHER: ["0_3"]})
    reply = ask(router, "counts", key_on(3), stale=True)
    assert reply.status == 404  # the key is absent, from the warmup's point of view
    assert reply.headers["X-Worker-Standby-Lag"] == "unknown"


def test_an_active_still_restoring_here_is_unavailable_unless_stale_reads_are_allowed(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    key = key_on(2)
    stores.put("counts", key.encode(), b"7")
    box.current = snapshot(stores, {"0_2": ("active", "restoring", 120)}, {ME: ["0_2"]})

    fresh = ask(router, "counts", key)
    stale = ask(router, "counts", key, stale=True)

    assert fresh.status == 503
    assert fresh.headers["Retry-After"] == "1"
    assert "restoring" in fresh.body["error"]
    assert (stale.status, stale.body["value"]) == (200, 7)
    assert stale.headers["X-Worker-Standby-Lag"] == "120"


def test_nothing_is_known_before_the_topics_were_checked_or_the_first_assignment(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {}, partitions={})
    assert ask(router, "counts", "k").status == 503
    box.current = snapshot(stores, {})
    reply = ask(router, "counts", "k")
    assert reply.status == 503
    assert "no instance hosts" in reply.body["error"]


def test_a_task_just_assigned_here_but_not_open_yet_is_unavailable_not_a_redirect_loop(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {}, {ME: ["0_1"]})
    assert ask(router, "counts", key_on(1)).status == 503


def test_a_stale_read_without_an_active_anywhere_goes_to_a_standby_elsewhere(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {}, {}, {THIRD: ["0_1"]})
    reply = ask(router, "counts", key_on(1), stale=True)
    assert reply.status == 307
    assert reply.headers["Location"].startswith(f"http://{THIRD}/")
    assert reply.headers["Location"].endswith("?allow_stale=true")


def test_a_store_closed_under_the_read_is_retried_on_the_newer_snapshot(
    topology, stores: Stores
) -> None:
    key = key_on(1)
    before = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})
    after = snapshot(stores, {}, {OTHER: ["0_1"]})
    stores.by_task[TaskId(0, 1)]["counts"].close()  # the loop closed it: the task moved
    snapshots = iter([before, after])
    router = QueryRouter(topology, lambda: next(snapshots))

    reply = ask(router, "counts", key)

    assert reply.status == 307
    assert reply.headers["X-Worker-Endpoint"] == OTHER


def test_a_store_closed_with_no_newer_snapshot_is_unavailable(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})
    stores.by_task[TaskId(0, 1)]["counts"].close()
    reply = ask(router, "counts", key_on(1))
    assert reply.status == 503
    assert "closed" in reply.body["error"]


def test_tasks_lists_local_tasks_with_offsets_and_lag_and_the_host_maps(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    stores.put("counts", key_on(0).encode(), b"1", offset=41)
    box.current = snapshot(
        stores,
        {"0_0": ("active", "running"), "0_1": ("standby", "running", 3)},
        {ME: ["0_0"], OTHER: ["0_1"]},
        {ME: ["0_1"], OTHER: ["0_0"]},
    )

    body = router.tasks().body

    assert body["endpoint"] == ME
    assert body["generation"] == 7
    assert body["active_hosts"] == {ME: ["0_0"], OTHER: ["0_1"]}
    assert body["standby_hosts"] == {ME: ["0_1"], OTHER: ["0_0"]}
    first, second = body["tasks"]
    assert (first["task_id"], first["kind"], first["state"], first["lag"]) == (
        "0_0", "active", "running", None,
    )  # fmt: skip
    counts = next(s for s in first["stores"] if s["name"] == "counts")
    assert counts == {"name": "counts", "changelog": "app-counts-changelog", "partition": 0,
                      "offset": 41}  # fmt: skip
    assert (second["kind"], second["lag"]) == ("standby", 3)
    orjson.dumps(body)  # JSON-ready


def test_tasks_shows_the_unavailable_seconds_the_tracker_charged_rounded_to_milliseconds(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    clock = FakeClock()
    tracker = AvailabilityTracker(Metrics(), clock)
    for seconds, cause in ((0.0, StallCause.RESTORE), (0.5, StallCause.REBALANCE), (1.23456, None)):
        clock.advance(seconds)
        tracker.observe([TaskSample("0_0", 3, input_waiting=True, cause=cause)])
    box.current = snapshot(stores, {"0_0": ("active", "running"), "0_1": ("standby", "running")})
    first, second = box.current.tasks
    box.current = replace(
        box.current,
        tasks=(replace(first, unavailable_seconds=tracker.unavailable_seconds("0_0")), second),
    )

    shown = [t["unavailable_seconds"] for t in router.tasks().body["tasks"]]

    assert shown == [{"rebalance": 1.235, "restore": 0.5}, {}]
    assert list(shown[0]) == ["rebalance", "restore"]  # sorted by cause, not by first charge


def test_routing_takes_the_host_maps_and_generation_of_an_assignment() -> None:
    routing = Routing(ME).with_partitions({0: 4})
    assignment = Assignment(
        frozenset({TaskId(0, 0)}),
        frozenset(),
        frozenset(),
        {ME: frozenset({TaskId(0, 0)}), OTHER: frozenset({TaskId(0, 1)})},
        {ME: frozenset({TaskId(0, 1)})},
        generation=9,
    )
    updated = routing.with_assignment(assignment)
    assert updated.endpoint == ME
    assert updated.partitions == {0: 4}
    assert updated.generation == 9
    assert updated.active_host(TaskId(0, 1)) == OTHER
    assert updated.active_host(TaskId(0, 2)) is None
    assert updated.standby_hosts_of(TaskId(0, 1)) == [ME]


def test_task_status_copies_offsets_and_keeps_the_live_store(stores: Stores) -> None:
    tid = TaskId(0, 1)
    stores.put("counts", key_on(1).encode(), b"1", offset=12)
    task = SimpleNamespace(
        id=tid,
        role=SimpleNamespace(value="standby"),
        state=SimpleNamespace(value="running"),
        stores={"counts": stores.by_task[tid]["counts"]},
        changelogs={"counts": ("app-counts-changelog", 1)},
    )
    charged = {"restore": 2.5}
    status = task_status(task, lambda t: 4 if t == tid else None, charged)  # type: ignore[arg-type]
    charged["restore"] = 9.0
    assert (status.task_id, status.kind, status.state, status.lag) == ("0_1", "standby",
                                                                       "running", 4)  # fmt: skip
    (view,) = status.stores
    assert (view.name, view.changelog, view.partition, view.offset) == (
        "counts", "app-counts-changelog", 1, 12,
    )  # fmt: skip
    assert view.store is stores.by_task[tid]["counts"]
    assert status.unavailable_seconds == {"restore": 2.5}  # a copy: the snapshot is immutable
    assert task_status(task, lambda t: None).unavailable_seconds == {}  # type: ignore[arg-type]


def test_key_on_helper_finds_keys_of_each_partition() -> None:
    for p in range(PARTITIONS):
        assert task_of(key_on(p).encode()) == TaskId(0, p)
