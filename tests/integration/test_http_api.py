"""The HTTP API of two real workers sharing the example app's tasks, one standby each.

Every endpoint is exercised over the network: a key whose task is active on the worker
asked is answered there; a key whose task lives on the other worker is redirected to
that worker's endpoint (from the group's host map, which one of the two serves to the
other) and answered there; with
``allow_stale=true`` the standby copy answers with its lag in a header.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.example_app import TASKS, ExampleData, example_data
from tests.support.waiting import wait_until
from worker.dev.processes import WorkerProcess

pytestmark = pytest.mark.integration
TOTALS = "account-totals"
RECENT = "recent-payments"
BUSY = "busy-10m"  # the windowed store of the busy-account alert


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = body

    @property
    def json(self) -> Any:
        return orjson.loads(self.raw)


def get(endpoint: str, path: str) -> Reply:
    """GET ``path`` on ``host:port`` without following redirects."""
    host, port = endpoint.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def endpoint(worker: WorkerProcess) -> str:
    return f"127.0.0.1:{worker.http_port}"


def tasks_of(worker: WorkerProcess) -> dict[str, Any]:
    reply = get(endpoint(worker), "/tasks")
    assert reply.status == 200
    return reply.json  # type: ignore[no-any-return]


def settled(workers: list[WorkerProcess]) -> bool:
    """Both ready; every task active on one worker and standby on the other, the standby's
    stores at the same committed changelog offsets as the active's.

    Offsets, not the reported lag: a standby's lag is measured against the changelog end
    its last fetch saw, so it can read 0 for a moment before new records arrive.
    """
    if not all(w.ready() for w in workers):
        return False
    copies: dict[str, dict[str, Any]] = {t: {} for t in TASKS}
    for worker in workers:
        for task in tasks_of(worker)["tasks"]:
            offsets = {s["name"]: s["offset"] for s in task["stores"]}
            copies[task["task_id"]][task["kind"]] = (offsets, task["lag"])
    for kinds in copies.values():
        if sorted(kinds) != ["active", "standby"]:
            return False
        (active, _), (standby, lag) = kinds["active"], kinds["standby"]
        if lag != 0 or standby != active or None in active.values():
            return False
    return True


@pytest.fixture
def pair(own_broker, worker_factory) -> Iterator[tuple[ExampleData, list[WorkerProcess]]]:
    data = example_data(own_broker.bootstrap, accounts=60)
    settings = {
        "bootstrap.servers": own_broker.bootstrap,
        "commit.interval.ms": 200,
        "num.standby.replicas": 1,
    }
    workers = [worker_factory(name, settings=settings) for name in ("a", "b")]
    for worker in workers:
        worker.wait_ready(90)
    data.produce(1500)
    wait_until(
        lambda: sum(w.metric("worker_processed_records_total") for w in workers) >= 1500,
        60,
        message="payments processed",
    )
    wait_until(
        lambda: all(w.metric("worker_uncommitted_bytes") == 0 for w in workers),
        30,
        message="everything committed",
    )
    wait_until(lambda: settled(workers), 90, message="actives and caught-up standbys placed")
    yield data, workers


def test_every_endpoint_of_two_workers(pair: tuple[ExampleData, list[WorkerProcess]]) -> None:
    data, (a, b) = pair
    expected, _ = data.reference()

    _health_and_metrics(a)
    owners = _tasks_and_host_maps(a, b)
    local, remote = _keys_by_owner(expected, a, b, owners)
    _answered_here(a, local, expected)
    _redirected_to_the_other_worker(a, b, remote, expected)
    _stale_read_from_the_local_standby(a, remote, expected)
    _ranges_cover_the_store_partition_by_partition(a, b, expected)
    _clear_errors(a)


def _health_and_metrics(worker: WorkerProcess) -> None:
    health = get(endpoint(worker), "/healthz")
    assert (health.status, health.json["alive"]) == (200, True)
    ready = get(endpoint(worker), "/readyz")
    assert (ready.status, ready.json["ready"], ready.json["state"]) == (200, True, "running")
    metrics = get(endpoint(worker), "/metrics")
    assert metrics.status == 200
    names = {f.name for f in text_string_to_metric_families(metrics.raw.decode())}
    assert {"worker_tasks", "worker_processed_records", "worker_standby_lag_records"} <= names


def _tasks_and_host_maps(a: WorkerProcess, b: WorkerProcess) -> dict[str, str]:
    """/tasks on both workers agree with each other; returns task -> active endpoint."""
    ta, tb = tasks_of(a), tasks_of(b)
    assert ta["endpoint"] == endpoint(a) and tb["endpoint"] == endpoint(b)
    assert ta["active_hosts"] == tb["active_hosts"]
    assert ta["standby_hosts"] == tb["standby_hosts"]
    # User data version 2: one worker's assignment carries the maps (the directory's),
    # the other fetched them from it.
    assert ta["directory"] == tb["directory"] in {endpoint(a), endpoint(b)}
    assert set(ta["active_hosts"]) == {endpoint(a), endpoint(b)}
    for listing, worker in ((ta, a), (tb, b)):
        actives = sorted(t["task_id"] for t in listing["tasks"] if t["kind"] == "active")
        assert actives == listing["active_hosts"][endpoint(worker)]
        for task in listing["tasks"]:
            assert task["state"] == "running"
            stores = {s["name"]: s for s in task["stores"]}
            scoring = task["task_id"].startswith("0_")  # 1_x: the joins' (versioned) table
            assert set(stores) == ({TOTALS, RECENT, BUSY} if scoring else {"account-profiles"})
            assert all(isinstance(s["offset"], int) for s in stores.values())
            (store, *_) = stores.values()
            assert store["partition"] == int(task["task_id"].split("_")[1])
            assert (task["lag"] is None) == (task["kind"] == "active")
    return {t: host for host, tasks in ta["active_hosts"].items() for t in tasks}


def _keys_by_owner(
    expected: dict[str, Any], a: WorkerProcess, b: WorkerProcess, owners: dict[str, str]
) -> tuple[list[str], list[str]]:
    """Accounts whose task is active on a, and those active on b (as a's answers say)."""
    local, remote = [], []
    for account in sorted(expected):
        reply = get(endpoint(a), f"/stores/{TOTALS}/keys/{account}")
        assert reply.status in (200, 307), reply.raw
        task = reply.headers["X-Worker-Task"]
        assert owners[task] == (endpoint(a) if reply.status == 200 else endpoint(b))
        (local if reply.status == 200 else remote).append(account)
    assert local and remote, "the accounts spread over both workers"
    return local, remote


def _answered_here(a: WorkerProcess, accounts: list[str], expected: dict[str, Any]) -> None:
    for account in accounts:
        reply = get(endpoint(a), f"/stores/{TOTALS}/keys/{account}")
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "application/json"
        assert reply.headers["X-Worker-Served-By"] == "active"
        assert "X-Worker-Standby-Lag" not in reply.headers
        assert reply.json["value"] == expected[account]
        assert reply.json["key"] == account


def _redirected_to_the_other_worker(
    a: WorkerProcess, b: WorkerProcess, accounts: list[str], expected: dict[str, Any]
) -> None:
    for account in accounts:
        path = f"/stores/{TOTALS}/keys/{account}"
        reply = get(endpoint(a), path)
        assert reply.status == 307
        target = urlsplit(reply.headers["Location"])
        assert target.netloc == endpoint(b)  # the other worker's endpoint
        assert reply.headers["X-Worker-Endpoint"] == endpoint(b)
        assert target.path == path
        followed = get(target.netloc, target.path)
        assert followed.status == 200
        assert followed.json["value"] == expected[account]
        assert followed.headers["X-Worker-Served-By"] == "active"


def _stale_read_from_the_local_standby(
    a: WorkerProcess, accounts: list[str], expected: dict[str, Any]
) -> None:
    """a holds a standby of every task active on b: allow_stale answers from it."""
    for account in accounts:
        reply = get(endpoint(a), f"/stores/{TOTALS}/keys/{account}?allow_stale=true")
        assert reply.status == 200
        assert reply.headers["X-Worker-Served-By"] == "standby"
        lag = int(reply.headers["X-Worker-Standby-Lag"])
        assert lag == reply.json["lag"] == 0  # caught up: no traffic since it settled
        assert reply.json["value"] == expected[account]


def _ranges_cover_the_store_partition_by_partition(
    a: WorkerProcess, b: WorkerProcess, expected: dict[str, Any]
) -> None:
    """a answers its own partitions merged and names b's; each of b's, asked of a with
    ``partition=``, is redirected to b; together they are the whole store, in key order."""
    mine = get(endpoint(a), f"/stores/{TOTALS}/range?limit=1000")
    assert mine.status == 200 and mine.json["complete"] is False
    assert set(mine.json["elsewhere"].values()) == {endpoint(b)}
    found = {item["key"]: item["value"] for item in mine.json["items"]}
    assert list(found) == sorted(found)
    for partition in mine.json["elsewhere"]:
        path = f"/stores/{TOTALS}/range?partition={partition}&limit=1000"
        redirected = get(endpoint(a), path)
        assert redirected.status == 307
        target = urlsplit(redirected.headers["Location"])
        theirs = get(target.netloc, f"{target.path}?{target.query}")
        assert theirs.status == 200 and theirs.json["partitions"] == [int(partition)]
        found.update((item["key"], item["value"]) for item in theirs.json["items"])
    assert found == expected
    first = sorted(expected)[0]
    some = get(endpoint(b), f"/stores/{TOTALS}/prefix?prefix={first}&limit=1&partition=0")
    assert some.status in (200, 307)
    over = get(endpoint(a), f"/stores/{TOTALS}/range?limit=100000")
    assert over.status == 400 and "maximum 1000" in over.json["error"]


def _clear_errors(a: WorkerProcess) -> None:
    missing = get(endpoint(a), f"/stores/{TOTALS}/keys/no-such-account")
    if missing.status == 307:
        target = urlsplit(missing.headers["Location"])
        missing = get(target.netloc, target.path)
    assert missing.status == 404
    assert missing.json["error"] == "key not found"
    unknown = get(endpoint(a), "/stores/no-such-store/keys/x")
    assert unknown.status == 404
    assert unknown.json["stores"] == [
        "account-profiles",
        TOTALS,
        BUSY,
        "merchant-reference",
        RECENT,
    ]
    bad = get(endpoint(a), f"/stores/{TOTALS}/keys/x?allow_stale=maybe")
    assert bad.status == 400 and "allow_stale" in bad.json["error"]
    table = get(endpoint(a), "/stores/account-profiles/keys/%ff")
    assert table.status == 400


TOKEN = "integration-token-0123456789abcdef"


def test_a_wildcard_bind_is_never_advertised_and_bad_queries_are_short_400s(
    own_broker: Any, worker_factory: Any
) -> None:
    """``http.host = 0.0.0.0`` without ``application.server``: the worker warns and
    advertises its host name, never 0.0.0.0 (issue 32). Repeated query parameters are a
    400, and a 400 repeats at most a short prefix of a 5,000-character parameter."""
    example_data(own_broker.bootstrap, accounts=20)
    worker = worker_factory(
        "wild",
        settings={"bootstrap.servers": own_broker.bootstrap, "http.host": "0.0.0.0"},
        env={"WORKER_HTTP_AUTH_TOKEN": TOKEN},
    )
    worker.wait_ready(90)
    bearer = {"Authorization": f"Bearer {TOKEN}"}

    def call(path: str) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", worker.http_port, timeout=5)
        try:
            connection.request("GET", path, headers=bearer)
            response = connection.getresponse()
            return response.status, orjson.loads(response.read())
        finally:
            connection.close()

    status, tasks = call("/tasks")
    assert status == 200
    advertised = {tasks["endpoint"], *tasks["active_hosts"]}
    assert not any(host.startswith(("0.0.0.0", "[::]")) for host in advertised), advertised
    (warning,) = [e for e in worker.log_events() if e.get("event") == "http.endpoint_guessed"]
    assert warning["endpoint"] == tasks["endpoint"]

    status, body = call(f"/stores/{TOTALS}/keys/acct-1?allow_stale=true&allow_stale=false")
    assert status == 400 and "more than once" in body["error"]
    status, body = call(f"/stores/{TOTALS}/range?limit=" + "q" * 5000)
    assert status == 400 and len(body["error"]) <= 220 and "q" * 100 not in body["error"]
