"""The state directory's free space: a gauge every 10 s, a warning below the threshold at
most once a minute, and a line when it recovers."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from worker.observability import Metrics
from worker.state.disk_space import DiskSpaceWatch, free_bytes


class Disk:
    def __init__(self, free: int) -> None:
        self.free, self.reads = free, 0

    def __call__(self, path: Path) -> int:
        self.reads += 1
        return self.free


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("worker_state_dir_free_bytes")


def test_free_space_is_a_gauge_read_every_ten_seconds(tmp_path: Path) -> None:
    metrics, disk = Metrics(), Disk(5_000)
    watch = DiskSpaceWatch(tmp_path, 1_000, metrics, disk)

    watch.check(0.0)
    watch.check(9.0)
    disk.free = 4_000
    watch.check(10.0)

    assert disk.reads == 2 and gauge(metrics) == 4_000


def test_below_the_threshold_it_warns_once_a_minute_and_says_when_it_recovered(
    tmp_path: Path,
) -> None:
    disk = Disk(500)
    watch = DiskSpaceWatch(tmp_path, 1_000, Metrics(), disk)

    with capture_logs() as logs:
        for now in range(0, 70, 10):
            watch.check(float(now))
        disk.free = 2_000
        watch.check(70.0)

    events = [e["event"] for e in logs]
    assert events == ["state.low_disk_space", "state.low_disk_space", "state.disk_space_recovered"]
    assert logs[0]["free_bytes"] == 500 and logs[0]["min_free_bytes"] == 1_000


def test_the_real_file_system_has_some_free_bytes(tmp_path: Path) -> None:
    assert free_bytes(tmp_path) > 0
