"""Range and prefix queries: per-partition routing, committed data only, limits, errors."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.http.conftest import ME, OTHER, StatusBox, Stores, key_on, snapshot
from worker.http.queries import QueryRouter, Reply
from worker.http.ranges import DEFAULT_LIMIT, MAX_LIMIT, RangeQueries


def ask(router: QueryRouter, store: str, kind: str, **params: str) -> Reply:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return RangeQueries(router).get(store, kind, params, f"/stores/{store}/{kind}?{query}")


def keys_of(reply: Reply) -> list[object]:
    return [item["key"] for item in reply.body["items"]]


@pytest.fixture
def filled(stores: Stores) -> dict[int, list[str]]:
    """Three str keys in each partition of "counts", committed; one more only buffered."""
    by_partition = {p: [key_on(p, prefix) for prefix in ("a-", "b-", "c-")] for p in range(4)}
    for keys in by_partition.values():
        for key in keys:
            stores.put("counts", key.encode(), orjson.dumps(len(key)))
    uncommitted = key_on(0, "a-x")
    stores.by_task[next(iter(stores.by_task))]["counts"].put(uncommitted.encode(), b"1")
    return by_partition


def test_one_partition_answers_its_committed_pairs_in_key_order(
    router: QueryRouter, box: StatusBox, stores: Stores, filled: dict[int, list[str]]
) -> None:
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"]})

    reply = ask(router, "counts", "range", partition="0")

    assert reply.status == 200
    assert keys_of(reply) == sorted(filled[0])  # the buffered key is not there
    assert reply.body["partitions"] == [0] and reply.body["complete"] is True
    assert reply.body["limit"] == DEFAULT_LIMIT and reply.body["more"] is False


def test_without_a_partition_the_local_actives_are_merged_and_the_rest_named(
    router: QueryRouter, box: StatusBox, stores: Stores, filled: dict[int, list[str]]
) -> None:
    box.current = snapshot(
        stores,
        {"0_0": ("active", "running"), "0_2": ("active", "running")},
        {ME: ["0_0", "0_2"], OTHER: ["0_1"]},
    )

    reply = ask(router, "counts", "range", to="b-", reverse="true", limit="1")

    wanted = sorted((k for p in (0, 2) for k in filled[p] if k < "b-"), reverse=True)
    assert keys_of(reply) == wanted[:1] and reply.body["more"] is True
    assert reply.body["elsewhere"] == {"1": OTHER, "3": None}
    assert reply.body["complete"] is False


def test_a_prefix_query_reads_the_keys_that_start_with_it(
    router: QueryRouter, box: StatusBox, stores: Stores, filled: dict[int, list[str]]
) -> None:
    box.current = snapshot(stores, {"0_1": ("active", "running")}, {ME: ["0_1"]})

    reply = ask(router, "counts", "prefix", prefix="b-", partition="1")

    assert keys_of(reply) == [k for k in filled[1] if k.startswith("b-")]


def test_a_json_string_prefix_needs_no_closing_quote(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    for key in ("acct-1", "acct-2", "other"):
        for task in stores.by_task.values():
            task["tags"].put(orjson.dumps(key), b"1")
            task["tags"].commit({})
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"]})

    open_quote = ask(router, "tags", "prefix", prefix='"acct-', partition="0")
    closed = ask(router, "tags", "prefix", prefix='"acct-"', partition="0")

    assert keys_of(open_quote) == keys_of(closed) == ["acct-1", "acct-2"]


def test_a_partition_active_elsewhere_redirects_there(
    router: QueryRouter, box: StatusBox, stores: Stores
) -> None:
    box.current = snapshot(stores, {}, {OTHER: ["0_3"]})

    reply = ask(router, "counts", "range", partition="3")

    assert reply.status == 307
    assert reply.headers["Location"] == f"http://{OTHER}/stores/counts/range?partition=3"


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("range", {"limit": str(MAX_LIMIT + 1)}, f"over the maximum {MAX_LIMIT}"),
        ("range", {"limit": "-1"}, "must be an int >= 0"),
        ("range", {"limit": "ten"}, "limit must be an integer"),
        ("range", {"from": "b", "to": "a"}, "is after to"),
        ("range", {"partition": "9"}, "partition 9 >= 4 partitions"),
        ("range", {"reverse": "maybe"}, "reverse must be true or false"),
        ("range", {"key": "a"}, "unknown query parameters 'key'"),
        ("prefix", {}, "prefix= is required"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_problem(
    router: QueryRouter,
    box: StatusBox,
    stores: Stores,
    kind: str,
    params: dict[str, str],
    message: str,
) -> None:
    box.current = snapshot(stores, {"0_0": ("active", "running")}, {ME: ["0_0"]})

    reply = ask(router, "counts", kind, **params)

    assert reply.status == 400
    assert message in reply.body["error"]


def test_an_unknown_store_is_a_404(router: QueryRouter, box: StatusBox) -> None:
    assert ask(router, "nope", "range").status == 404
