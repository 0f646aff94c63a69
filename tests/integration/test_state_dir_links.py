"""A running worker's start-up scan and cleaner leave symbolic links in its state directory
alone (and say so), while still cleaning the real directories nobody owns."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.waiting import wait_until
from worker.events import STATE_SYMLINK_REFUSED
from worker.examples import counting

pytestmark = [pytest.mark.integration, pytest.mark.duration(15)]


def test_a_running_worker_refuses_linked_task_directories_and_cleans_the_rest(
    own_broker, worker_factory, tmp_path: Path
):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, 2, 1) for t in (counting.INPUTS, counting.OUTPUTS)]
    ).values():
        future.result(30)
    precious = tmp_path / "precious"
    (precious / "rocksdb").mkdir(parents=True)
    (precious / "rocksdb" / "000001.sst").write_bytes(b"not yours")
    (precious / "notes.txt").write_text("keep")
    settings = {"bootstrap.servers": own_broker.bootstrap, "state.cleanup.delay.ms": 0}
    worker = worker_factory(
        "w", settings=settings, args=["--app", "worker.examples.counting:build"], start=False
    )
    app_dir = worker.state_dir / str(worker.settings["application.id"])
    app_dir.mkdir(parents=True)
    (app_dir / "0_7").symlink_to(precious)  # a task directory's name, linked elsewhere
    (app_dir / "1_0").symlink_to(precious / "notes.txt")
    (app_dir / "0_9" / "rocksdb").mkdir(parents=True)  # a real one nobody owns

    worker.start()
    worker.wait_ready(90)

    def refused() -> set[str]:
        return {
            Path(e["path"]).name
            for e in worker.log_events()
            if e.get("event") == STATE_SYMLINK_REFUSED
        }

    wait_until(lambda: refused() == {"0_7", "1_0"}, 30, message="links reported")
    wait_until(lambda: not (app_dir / "0_9").exists(), 30, message="the cleaner ran")
    assert worker.alive
    assert (app_dir / "0_7").is_symlink() and (app_dir / "1_0").is_symlink()
    assert (precious / "rocksdb" / "000001.sst").read_bytes() == b"not yours"
    assert (precious / "notes.txt").read_text() == "keep"
    assert sorted(p.name for p in precious.rglob("*")) == ["000001.sst", "notes.txt", "rocksdb"]
    events = [e for e in worker.log_events() if e.get("event") == STATE_SYMLINK_REFUSED]
    assert len(events) == 2  # once per link, not at every cleaner round
    assert worker.terminate() == 0
